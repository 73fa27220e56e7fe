"""The host's cache of run environments with the real pip and real file locks: built once
when two runs ask at once, layered on the worker's packages (torch shared), evicted least
recently used first by size but never while a run holds it, and a crashed build never taken
for a ready one."""

from __future__ import annotations

import subprocess
import threading
import time
import traceback
import zipfile
from pathlib import Path

import pytest

from worker import job_base
from worker.env_build import Pip
from worker.environments import MARKER, BuildFailed, Cache, Env, env_key

pytestmark = pytest.mark.slow

PACKAGE = "tomli-w==1.2.0"  # pure Python, on this machine's index, not in the worker


def _kept(path: Path) -> bool:
    """The locks and the job base (worker/job_base.py), which every environment is over."""
    return path.name == ".locks" or path.name.lstrip(".").startswith(job_base.PREFIX)


def pip(tmp_path: Path) -> Pip:
    return Pip(tmp_path, timeout=300)


def test_two_runs_asking_at_once_build_it_once(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "envs", max_bytes=10**12)
    got: list[Env] = []
    failed: list[str] = []
    gate = threading.Barrier(2)

    def ask() -> None:
        gate.wait()
        try:
            with cache.use([PACKAGE], pip(tmp_path)) as env:
                got.append(env)
        except BaseException:  # said in the assertion: a thread's own traceback is lost
            failed.append(traceback.format_exc())  # (stop 52's CI: only "Exception in thread")

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failed, "\n".join(failed)
    assert sorted(e.built for e in got) == [False, True]
    assert got[0].path == got[1].path
    log = (tmp_path / "output.log").read_text()
    assert log.count("Successfully installed tomli-w-1.2.0") == 1
    # the package is the environment's, torch the worker's, and pip saw torch as installed
    out = subprocess.run(
        [
            str(got[0].python),
            "-c",
            "import tomli_w, torch, importlib.metadata as m; "
            "print(tomli_w.__file__); print(torch.__file__); print(m.version('torch'))",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert out[0].startswith(str(got[0].path))
    base = job_base.ensure(tmp_path / "envs")
    assert out[1].startswith(str(base.site_dir)) and out[2] == base.torch_version
    assert not Path(out[1]).resolve().is_relative_to(tmp_path)  # a link to the worker's torch
    assert not list(got[0].path.glob("lib/python*/site-packages/torch"))
    # built in a temp folder: its scripts name the final one
    for script in (got[0].path / "bin").iterdir():
        if script.is_file() and not script.is_symlink():
            assert ".build-" not in script.read_text(errors="replace"), script


def test_a_requirement_for_another_torch_fails_with_pips_message(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "envs", max_bytes=10**12)
    with pytest.raises(BuildFailed, match="pip exited with code 1") as err:
        with cache.use(["torch==2.0.0"], pip(tmp_path)):
            pass
    assert "torch" in str(err.value)
    assert not [p for p in (tmp_path / "envs").iterdir() if not _kept(p)]


def test_eviction_takes_the_least_recently_used_never_one_in_use(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "envs", max_bytes=0)  # every environment is over the cap
    with cache.use([PACKAGE], pip(tmp_path)) as held:
        with cache.use([], pip(tmp_path)) as other:
            # the other is over the cap too, but held (and the one just asked for)
            assert held.path.is_dir() and other.path.is_dir()
        assert cache.evict(keep=held.key) == [other.key]
        assert not other.path.exists()
    with cache.use([], pip(tmp_path)) as again:
        assert again.built
        assert not held.path.exists()  # released, least recently used: gone
    kept = [p.name for p in (tmp_path / "envs").iterdir() if not p.name.startswith(".")]
    assert sorted(kept) == sorted([again.key, job_base.ensure(tmp_path / "envs").path.name])


def test_a_crashed_build_is_never_taken_for_a_ready_environment(tmp_path: Path) -> None:
    root = tmp_path / "envs"
    cache = Cache(root, max_bytes=10**12)
    key = env_key([], job_base.ensure(root))
    (root / f".build-{key}-dead").mkdir(parents=True)  # a worker killed mid-build
    (root / key / "bin").mkdir(parents=True)  # a folder without the ready marker
    with cache.use([], pip(tmp_path)) as env:
        assert env.built and env.key == key
        assert (env.path / MARKER).is_file()
    assert not list(root.glob(".build-*"))


@pytest.mark.timed
def test_a_build_over_its_time_limit_is_stopped_and_left_nowhere(tmp_path: Path) -> None:
    cache = Cache(tmp_path / "envs", max_bytes=10**12)
    job_base.ensure(tmp_path / "envs")  # made once per host, before any build: not pip's time
    started = time.monotonic()
    with pytest.raises(BuildFailed, match=r"the build was stopped: took over 0.5 s"):
        with cache.use([PACKAGE], Pip(tmp_path, timeout=0.5)):
            pass
    assert time.monotonic() - started < 5
    assert not [p for p in (tmp_path / "envs").iterdir() if not _kept(p)]


def test_a_requirement_that_depends_on_torch_takes_the_workers(tmp_path: Path) -> None:
    """rotary-embedding-torch needs torch>=2.4 and einops (which the worker lacks): pip sees
    the worker's torch as installed and adds einops alone."""
    cache = Cache(tmp_path / "envs", max_bytes=10**12)
    with cache.use(["rotary-embedding-torch==0.9.1"], pip(tmp_path)) as env:
        out = subprocess.run(
            [
                str(env.python),
                "-c",
                "import rotary_embedding_torch, einops, torch; print(torch.__file__); "
                "rope = rotary_embedding_torch.RotaryEmbedding(dim=8); "
                "print(rope.rotate_queries_or_keys(torch.ones(1, 2, 4, 8)).shape)",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
    log = (tmp_path / "output.log").read_text()
    assert "Requirement already satisfied: torch>=2.4" in log
    installed = next(line for line in log.splitlines() if "Successfully installed" in line)
    assert "einops" in installed and "rotary-embedding-torch" in installed
    assert "torch-" not in installed.replace("rotary-embedding-torch-", "")
    assert not Path(out[0]).resolve().is_relative_to(tmp_path)  # the job base's link
    assert out[1] == "torch.Size([1, 2, 4, 8])"
    assert not list(env.path.glob("lib/python*/site-packages/torch"))


def _wheel(folder: Path, name: str, version: str, files: dict[str, str]) -> Path:
    """A pure-Python wheel written by hand: its METADATA, WHEEL and RECORD, and ``files``."""
    dist = f"{name.replace('-', '_')}-{version}"
    info = f"{dist}.dist-info"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},,\n" for path in contents) + f"{info}/RECORD,,\n"
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, text in {**contents, f"{info}/RECORD": record}.items():
            archive.writestr(member, text)
    return path


def test_a_runs_own_mlflow_wins_over_the_job_bases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """mlflow-skinny is in every job's base; a run that asks for another version gets it."""
    links = tmp_path / "links"
    links.mkdir()
    _wheel(links, "mlflow-skinny", "99.0.0", {"mlflow/__init__.py": "__version__ = '99.0.0'\n"})
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    cache = Cache(tmp_path / "envs", max_bytes=10**12)
    with cache.use(["mlflow-skinny==99.0.0"], pip(tmp_path)) as env:
        out = subprocess.run(
            [str(env.python), "-c", "import mlflow; print(mlflow.__version__, mlflow.__file__)"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()
    assert out[0] == "99.0.0" and out[1].startswith(str(env.path))
    base = job_base.ensure(tmp_path / "envs")
    assert any(p.startswith("mlflow-skinny==3.") for p in base.packages)
