"""The sweep's rules without a database: the pruners' verdicts on known curves, the samplers'
determinism (the restart safety rests on it), the grid's order."""

from __future__ import annotations

from app.sweeps.early_stop import decide, reason
from app.sweeps.sampling import Observed, State, next_params

MEDIAN = {"type": "median", "min_trials": 2, "warmup_steps": 0}
ASHA = {"type": "asha", "min_steps": 1, "reduction_factor": 3}


def done(*points: tuple[int, float]) -> Observed:
    curve = dict(points)
    return Observed({}, State.COMPLETE, value=curve[max(curve)], curve=curve)


def test_median_rule_stops_a_trial_below_the_median_of_the_finished_ones() -> None:
    others = [done((20, 0.9), (40, 0.95)), done((20, 0.8), (40, 0.9))]
    assert decide(MEDIAN, goal="maximize", others=others, curve={20: 0.2})
    assert not decide(MEDIAN, goal="maximize", others=others, curve={20: 0.95})
    # minimize: a high loss is the bad one
    assert decide(MEDIAN, goal="minimize", others=others, curve={20: 0.99})
    text = reason(MEDIAN, metric="val/acc", goal="maximize", others=others, curve={20: 0.2})
    assert text.startswith("stopped early by the sweep (median rule: best val/acc so far 0.2")
    assert "median 0.85 of 2 finished trials" in text


def test_median_rule_waits_for_enough_finished_trials_and_its_warmup() -> None:
    one = [done((20, 0.9))]
    assert not decide(MEDIAN, goal="maximize", others=one, curve={20: 0.1})
    running = Observed({}, State.RUNNING, curve={20: 0.99})
    assert not decide(MEDIAN, goal="maximize", others=[*one, running], curve={20: 0.1})
    warm = {**MEDIAN, "warmup_steps": 30}
    others = [done((20, 0.9)), done((20, 0.8))]
    assert not decide(warm, goal="maximize", others=others, curve={20: 0.1})


def test_asha_keeps_only_the_top_third_at_a_rung() -> None:
    others = [done((1, 0.9), (3, 0.95)), done((1, 0.8), (3, 0.9)), done((1, 0.7), (3, 0.8))]
    assert decide(ASHA, goal="maximize", others=others, curve={1: 0.1})
    assert not decide(ASHA, goal="maximize", others=others, curve={1: 0.99})


def test_samplers_draw_the_same_values_for_the_same_trial_and_history() -> None:
    params = {
        "params.lr": {"distribution": "log_uniform", "min": 1e-4, "max": 1e-1},
        "params.batch_size": {"values": [16, 32, 64]},
        "params.epochs": {"distribution": "int_uniform", "min": 1, "max": 5},
    }
    for method in ("random", "tpe"):
        history = [
            Observed(
                next_params(
                    method=method,
                    goal="maximize",
                    parameters=params,
                    seed=1,
                    max_runs=8,
                    number=n,
                    observed=[],
                ),
                State.COMPLETE,
                value=float(n),
            )
            for n in range(4)
        ]
        draw = [
            next_params(
                method=method,
                goal="maximize",
                parameters=params,
                seed=1,
                max_runs=8,
                number=4,
                observed=history,
            )
            for _ in range(2)
        ]
        assert draw[0] == draw[1]
        assert 1e-4 <= draw[0]["params.lr"] <= 1e-1 and draw[0]["params.batch_size"] in (16, 32, 64)
        assert isinstance(draw[0]["params.epochs"], int)
        assert len({p.params["params.lr"] for p in history}) == 4  # each trial its own draw
        other_seed = next_params(
            method=method,
            goal="maximize",
            parameters=params,
            seed=2,
            max_runs=8,
            number=4,
            observed=history,
        )
        assert other_seed != draw[0]
