"""app/experiments/held_keys.py: the keys whose summaries the experiment page holds, chosen as
its scripts choose their first columns (runs_columns.js defaultSummaries) and metric
(experiment_parcoords.js defaultMetric), in lib/format.js compareKeys' order."""

from __future__ import annotations

from app.experiments.held_keys import held_keys, key_order


def test_key_order_is_the_pages_named_groups_then_ungrouped_then_system() -> None:
    keys = ["sys/gpu0/util", "loss", "val/acc", "Train/loss", "train/loss", "a/x"]
    assert sorted(keys, key=key_order) == [
        "a/x",
        "Train/loss",
        "train/loss",
        "val/acc",
        "loss",
        "sys/gpu0/util",
    ]


def test_the_loss_accuracy_and_first_validation_keys_are_held() -> None:
    # every loss and accuracy: the table's default columns are those most runs logged
    keys = ["val/loss", "val/acc", "train/loss", "train/acc", "other/k1", "sys/acc"]
    assert held_keys(keys) == ["train/acc", "train/loss", "val/acc", "val/loss"]
    many = [f"g/loss{i}" for i in range(10)]
    assert held_keys(many) == many[:6]


def test_without_a_loss_or_an_accuracy_the_first_key_is_held_beside_the_validation_one() -> None:
    # the table's fallback column is the first key of all, not of the validation keys
    assert held_keys(["val/f1", "a/x", "b/y"]) == ["a/x", "val/f1"]
    assert held_keys(["Accuracy/val", "z"]) == ["Accuracy/val"]
    assert held_keys([]) == []
