"""TensorBoard hparams become the run's reported params and images are kept, with caps, by the
worker's event reader (worker.tensorboard_events) through the real forwarder step; the API
lists and serves them (the hostile-bytes side is in test_tensorboard_events.py)."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import numpy as np
import pytest
from PIL import Image as PILImage
from sqlalchemy.orm import Session, sessionmaker
from torch.utils.tensorboard import SummaryWriter

from app.db import session_scope
from app.runs.files import images as run_images
from app.runs.files.images import Caps, Image, ImageLimit, store_images
from app.runs.query.params import MAX_REPORTED, MAX_VALUE_CHARS, ParamLimit, record_reported
from app.settings import get_settings
from tests.factories import admin_run, make_run
from worker.forwarder import forward
from worker.tensorboard_events import clear_cache


@pytest.fixture(autouse=True)
def fresh_worker() -> Iterator[None]:
    clear_cache()
    yield
    clear_cache()


# The tests that call the services take db_sessions (rolled back after each test); those that
# go through the API or a job's log use committed sessions (sessions=None: session_scope).
Sessions = Callable[[], AbstractContextManager[Session]]


def _units(sessions: sessionmaker[Session] | None) -> Sessions:
    return session_scope if sessions is None else sessions.begin


def new_run(sessions: sessionmaker[Session]) -> int:
    with sessions.begin() as session:
        return admin_run(session)


def pump(run_id: int, run_dir: Path, sessions: sessionmaker[Session] | None = None) -> None:
    while True:
        with _units(sessions)() as session:
            if not forward(session, run_id=run_id, metrics_path=run_dir / "metrics.jsonl"):
                return


def listed(run_id: int, sessions: sessionmaker[Session] | None = None) -> dict:
    with _units(sessions)() as session:
        return run_images.list_images(session, run_id=run_id)


def data_of(
    run_id: int, image_id: int, sessions: sessionmaker[Session] | None = None
) -> bytes | None:
    with _units(sessions)() as session:
        return run_images.image_data(session, run_id=run_id, image_id=image_id)


def png(shade: int, size: tuple[int, int] = (6, 4)) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", size, (shade, shade, shade)).save(out, format="PNG")
    return out.getvalue()


def test_add_hparams_and_lightning_style_hparams_become_reported_params(
    client, admin_headers, tmp_path: Path
) -> None:
    exp = client.post(
        "/api/experiments",
        json={"name": "hp", "config": {"recipe": "tiny_mlp", "params": {"epochs": 2}}},
        headers=admin_headers,
    ).json()
    run = client.post(f"/api/experiments/{exp['id']}/runs", json={}, headers=admin_headers).json()
    assert run["params"]["params.epochs"] == 2 and run["params"]["seed"] == run["seed"]
    assert run["params"]["resources.nproc"] == 1 and "hparams.lr" not in run["params"]

    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    writer.add_hparams(
        {"lr": 0.01, "bsize": 32, "optimizer": "adam", "nesterov": True}, {"hp/acc": 0.5}
    )
    writer.add_hparams({"lr": 0.02}, {"hp/acc": 0.7})  # a later report of a name wins
    writer.close()
    pump(run["id"], tmp_path)

    got = client.get(f"/api/runs/{run['id']}", headers=admin_headers).json()
    assert {k: v for k, v in got["params"].items() if k.startswith("hparams.")} == {
        "hparams.lr": 0.02,
        "hparams.bsize": 32,
        "hparams.optimizer": "adam",
        "hparams.nesterov": True,
    }
    assert got["params"]["params.epochs"] == 2  # the config's stay
    listed_runs = client.get("/api/runs", headers=admin_headers).json()["runs"]
    assert next(r for r in listed_runs if r["id"] == run["id"])["params"] == got["params"]
    log = (tmp_path / "output.log").read_text() if (tmp_path / "output.log").exists() else ""
    assert "hparams" not in log  # taken, so not named as skipped


def test_reported_params_are_capped_cut_and_free_of_nul(db_sessions: sessionmaker[Session]) -> None:
    run_id = new_run(db_sessions)
    values: dict[str, object] = {"long": "x" * 5000, "nul\x00name": "a\x00b"}
    values |= {f"p{i:03d}": i for i in range(100_000)}  # a hostile report: never all queried
    with db_sessions.begin() as session:
        limits = record_reported(session, run_id=run_id, values=values)
    assert limits == {ParamLimit.TOO_MANY, ParamLimit.CUT}
    with db_sessions.begin() as session:
        from app.runs.query.params import params_by_run

        params = params_by_run(session, [run_id])[run_id]
    assert len(params) == MAX_REPORTED
    assert params["hparams.nul\ufffdname"] == "a\ufffdb" and "hparams.p253" in params
    with db_sessions.begin() as session:  # a name already kept is still updated when full
        assert record_reported(session, run_id=run_id, values={"p000": -1}) == set()
        assert params_by_run(session, [run_id])[run_id]["hparams.p000"] == -1


def test_long_values_are_cut_to_the_cap(db_sessions: sessionmaker[Session]) -> None:
    run_id = new_run(db_sessions)
    with db_sessions.begin() as session:
        record_reported(session, run_id=run_id, values={"long": "x" * 5000, "a\x00": "b\x00"})
        from app.runs.query.params import params_by_run

        params = params_by_run(session, [run_id])[run_id]
    assert len(params["hparams.long"]) == MAX_VALUE_CHARS and params["hparams.long"][-1] == "…"
    assert params["hparams.a\ufffd"] == "b\ufffd"


def test_add_image_and_add_figure_are_kept_per_tag_and_step(
    tmp_path: Path, db_sessions: sessionmaker[Session]
) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_id = new_run(db_sessions)
    writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
    for step in (0, 10, 20):
        writer.add_image("samples", np.full((3, 8, 12), step / 20.0), step)
        fig = plt.figure(figsize=(2, 1.5), dpi=50)
        plt.plot([0, 1], [0, step])
        writer.add_figure("curves/fig", fig, step)
    writer.add_image("samples", np.zeros((3, 8, 12)), 20)  # the same step again: it replaces
    writer.close()
    pump(run_id, tmp_path, db_sessions)

    got = listed(run_id, db_sessions)
    assert sorted(got) == ["curves/fig", "samples"]
    assert [i["step"] for i in got["samples"]] == [0, 10, 20]
    assert {(i["width"], i["height"]) for i in got["samples"]} == {(12, 8)}
    assert {(i["width"], i["height"]) for i in got["curves/fig"]} == {(100, 75)}
    shades = []
    for image in got["samples"]:
        data = data_of(run_id, image["id"], db_sessions)
        assert data is not None and data.startswith(run_images.PNG_MAGIC)
        pixel = PILImage.open(io.BytesIO(data)).getpixel((0, 0))
        assert isinstance(pixel, tuple)
        shades.append(pixel[0])
    assert shades[0] == 0 and shades[1] in (127, 128) and shades[2] == 0  # step 20 replaced


def test_images_per_tag_are_thinned_keeping_the_newest_and_spread(
    db_sessions: sessionmaker[Session],
) -> None:
    run_id = new_run(db_sessions)
    caps = Caps(image_bytes=10_000, per_tag=5, run_bytes=10**9)
    hit: dict[ImageLimit, str] = {}
    for step in range(20):
        with db_sessions.begin() as session:
            hit |= store_images(
                session, run_id=run_id, images=[Image("t", step, 0.0, 6, 4, png(step))], caps=caps
            )
    steps = [i["step"] for i in listed(run_id, db_sessions)["t"]]
    assert len(steps) <= 5 and steps[-1] == 19 and steps[0] == 0, steps
    assert hit == {ImageLimit.THINNED: "t"}


def test_image_caps_refuse_large_foreign_too_many_tags_and_a_full_run(
    db_sessions: sessionmaker[Session],
) -> None:
    run_id = new_run(db_sessions)
    small = png(1)
    caps = Caps(image_bytes=len(small) + 10, per_tag=10, run_bytes=3 * len(small), tags=2)
    batch = [
        Image("big", 0, 0.0, 1, 1, png(1, (200, 200)) + b"\x00" * 2000),
        Image("gif", 0, 0.0, 1, 1, b"GIF89a" + b"\x00" * 10),
        Image("html", 0, 0.0, 1, 1, b"<script>alert(1)</script>"),
        Image("a", 0, 0.0, 1, 1, small),
        Image("b", 0, 0.0, 1, 1, small),
        Image("c", 0, 0.0, 1, 1, small),  # a third tag
        Image("a", 1, 0.0, 1, 1, small),
        Image("a", 2, 0.0, 1, 1, small),  # over the run's bytes
    ]
    with db_sessions.begin() as session:
        hit = store_images(session, run_id=run_id, images=batch, caps=caps)
    assert hit == {
        ImageLimit.TOO_LARGE: "big",
        ImageLimit.NOT_PNG_OR_JPEG: "gif",
        ImageLimit.TOO_MANY_TAGS: "c",
        ImageLimit.RUN_FULL: "a",
    }
    assert {t: [i["step"] for i in v] for t, v in listed(run_id, db_sessions).items()} == {
        "a": [0, 1],
        "b": [0],
    }


def test_caps_hit_by_a_job_are_said_once_in_its_log(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("TORCHYARD_TB_IMAGE_MAX_BYTES", "100")
    get_settings.cache_clear()
    try:
        run_id = make_run()
        writer = SummaryWriter(log_dir=str(tmp_path / "tb"))
        for step in range(3):
            writer.add_image("noise", np.random.default_rng(step).random((3, 32, 32)), step)
            writer.flush()
            pump(run_id, tmp_path)
        writer.add_image("tiny", np.zeros((3, 1, 1)), 0)
        writer.close()
        pump(run_id, tmp_path)
    finally:
        get_settings.cache_clear()
    assert list(listed(run_id)) == ["tiny"]
    lines = (tmp_path / "output.log").read_text().splitlines()
    assert lines == [
        "torchyard: TensorBoard images (tag 'noise'): images over 100 bytes are not kept "
        "(tb_image_max_bytes)"
    ]
