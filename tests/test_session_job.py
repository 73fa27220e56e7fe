"""worker/session_job.py's folder for a session's socket and secret: prepared by root in the
run's folder, which is the job's. A link the job left there is never followed."""

from __future__ import annotations

import stat
from pathlib import Path

from torchyard.contract import RunPaths
from worker.session_job import prepare


def test_a_link_left_as_the_session_folder_is_replaced_not_followed(tmp_path: Path) -> None:
    """An earlier attempt's job left `.session` -> /etc (here, a folder of the test's): root
    chmodded it 0700 and wrote its secret into it."""
    victim = tmp_path / "etc"
    victim.mkdir(mode=0o755)
    victim.chmod(0o755)
    (victim / "token").write_text("the host's file")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / ".session").symlink_to(victim)
    secret = prepare(run_dir)
    assert stat.S_IMODE(victim.stat().st_mode) == 0o755
    assert (victim / "token").read_text() == "the host's file"
    paths = RunPaths(run_dir)
    folder = paths.session_socket.parent
    assert folder.is_dir() and not folder.is_symlink()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert paths.session_token.read_text() == secret
    assert stat.S_IMODE(paths.session_token.stat().st_mode) == 0o600


def test_a_new_attempt_gets_a_new_secret_and_no_old_socket(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    first = prepare(run_dir)
    paths = RunPaths(run_dir)
    paths.session_socket.write_text("an old socket's name")
    paths.session_token.unlink()
    paths.session_token.symlink_to(tmp_path / "elsewhere")  # the job's link, in place of it
    second = prepare(run_dir)
    assert second != first and paths.session_token.read_text() == second
    assert not paths.session_socket.exists() and not (tmp_path / "elsewhere").exists()
