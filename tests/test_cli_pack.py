"""Packing a code directory (torchyard/cli/pack.py) and shipping it (torchyard/cli/code_upload.py):
a real git checkout in tmp_path, the tar read back with tarfile, the upload through the client's own
Api against a stand-in for `POST /api/code` that answers per the design's contract."""

from __future__ import annotations

import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
from pathlib import Path

import httpx
import pytest
import typer
from rich.console import Console

from torchyard.cli.client import Api, CliError
from torchyard.cli.code_upload import code_origin, ship
from torchyard.cli.commands import _code_dir
from torchyard.cli.config import Target
from torchyard.cli.pack import PackError, PackLimits, pack
from torchyard.git_state import strip_credentials


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=env, check=True
    )
    return done.stdout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """A checkout with a commit, an ignored 1 MB file, an untracked file and an edit."""
    repo = tmp_path / "proj"
    (repo / "pkg").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "train.py").write_text("import pkg.helper\nprint('v1')\n")
    (repo / "pkg" / "helper.py").write_text("X = 1\n")
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / ".gitignore").write_text("*.ckpt\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first")
    git(repo, "remote", "add", "origin", "https://alice:s3cr3t-token@git.example.com/team/proj.git")
    (repo / "big.ckpt").write_bytes(os.urandom(1024 * 1024))
    (repo / "notes.txt").write_text("untracked, not ignored\n")
    (repo / "train.py").write_text("import pkg.helper\nprint('v2: uncommitted')\n")
    return repo


def members(path: Path) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(path, "r:gz") as tar:
        return {m.name: m for m in tar.getmembers()}


def read_member(path: Path, name: str) -> bytes:
    with tarfile.open(path, "r:gz") as tar:
        f = tar.extractfile(name)
        assert f is not None
        return f.read()


def test_a_checkout_is_packed_as_git_sees_it(checkout: Path) -> None:
    packed = pack(checkout)
    try:
        names = members(packed.path)
        assert sorted(names) == [".gitignore", "notes.txt", "pkg/helper.py", "run.sh", "train.py"]
        assert "big.ckpt" not in names  # ignored: stays home, and the user is told
        assert [(i.path, i.reason) for i in packed.left_out] == [("big.ckpt", "ignored by git")]
        assert (
            read_member(packed.path, "train.py") == b"import pkg.helper\nprint('v2: uncommitted')\n"
        )
        assert names["run.sh"].mode == 0o755 and names["train.py"].mode == 0o644
        assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" for m in names.values())
        assert packed.in_git and packed.files == sorted(names)
        digest = hashlib.sha256(packed.path.read_bytes()).hexdigest()
        assert packed.digest == "sha256:" + digest
        assert packed.size_bytes == packed.path.stat().st_size
    finally:
        packed.path.unlink()


def test_the_same_tree_gives_the_same_bytes(checkout: Path, tmp_path: Path) -> None:
    first = pack(checkout)
    os.utime(checkout / "train.py", (1, 1))  # times and owners never reach the tar
    (checkout / "notes.txt").chmod(0o600)
    second = pack(checkout)
    try:
        assert first.path.read_bytes() == second.path.read_bytes()
        assert first.digest == second.digest
        (checkout / "notes.txt").write_text("changed\n")
        third = pack(checkout)
        assert third.digest != first.digest
        third.path.unlink()
    finally:
        first.path.unlink()
        second.path.unlink()


def test_a_deleted_tracked_file_and_a_subdirectory(checkout: Path) -> None:
    (checkout / "run.sh").unlink()  # tracked, deleted in the working tree
    packed = pack(checkout / "pkg")  # a subdirectory of the checkout: paths relative to it
    whole = pack(checkout)
    try:
        assert sorted(members(packed.path)) == ["helper.py"]
        assert "run.sh" not in members(whole.path)
    finally:
        packed.path.unlink()
        whole.path.unlink()


def test_code_origin_has_the_commit_the_diff_and_no_credentials(checkout: Path) -> None:
    origin = code_origin(checkout)
    assert origin is not None
    assert set(origin) == {"commit", "branch", "remote", "dirty", "diff", "diff_truncated"}
    assert origin["commit"] == git(checkout, "rev-parse", "HEAD").strip()
    assert origin["branch"] == "main"
    assert origin["remote"] == "https://git.example.com/team/proj.git"
    assert "s3cr3t" not in repr(origin)
    assert origin["dirty"] is True and origin["diff_truncated"] is False
    assert "+print('v2: uncommitted')" in origin["diff"]
    assert "-print('v1')" in origin["diff"]


def test_outside_git_the_origin_is_none(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    assert code_origin(tmp_path) is None


@pytest.mark.parametrize(
    ("url", "clean"),
    [
        ("https://user:token@host/x.git", "https://host/x.git"),
        ("https://ghp_tokenasuser@github.com/a/b", "https://github.com/a/b"),
        ("HTTP://u:p@host:8080/x", "HTTP://host:8080/x"),
        ("ssh://git:pw@host/x.git", "ssh://git@host/x.git"),
        ("ssh://git@host/x.git", "ssh://git@host/x.git"),
        ("git@github.com:a/b.git", "git@github.com:a/b.git"),
        ("/srv/repos/x.git", "/srv/repos/x.git"),
        ("https://host/path@v1", "https://host/path@v1"),
    ],
)
def test_strip_credentials(url: str, clean: str) -> None:
    assert strip_credentials(url) == clean


def test_outside_git_the_junk_and_big_files_are_left_out(tmp_path: Path) -> None:
    root = tmp_path / "code"
    for d in (".git", "__pycache__", "node_modules/x", ".venv/lib", "data", "pkg/__pycache__"):
        (root / d).mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref\n")
    (root / "__pycache__" / "a.pyc").write_bytes(b"x")
    (root / "pkg" / "__pycache__" / "b.pyc").write_bytes(b"x")
    (root / "node_modules" / "x" / "i.js").write_text("x")
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr\n")
    (root / ".venv" / "lib" / "site.py").write_text("x")
    (root / "train.py").write_text("print(1)\n")
    (root / "pkg" / "m.py").write_text("X = 1\n")
    (root / "data" / "x.txt").write_text("hello\n")
    (root / "data" / "huge.bin").write_bytes(b"\0" * 3000)
    (root / "inside").symlink_to("data/x.txt")
    (root / "absolute-inside").symlink_to(root / "data" / "x.txt")
    (root / "outside").symlink_to(tmp_path)
    (root / "dotdot").symlink_to("../code/../../etc/passwd")
    (root / "pkg" / "data.txt").symlink_to("../data/x.txt")  # inside, but needs '..': a copy
    (root / "pkg" / "datadir").symlink_to("../data")  # a directory by '..': left out
    (root / "datalink").symlink_to("data")  # a directory in its own folder: a link
    packed = pack(root, PackLimits(max_file_bytes=2000))
    try:
        names = members(packed.path)
        assert sorted(names) == [
            "absolute-inside",
            "data/x.txt",
            "datalink",
            "inside",
            "pkg/data.txt",
            "pkg/m.py",
            "train.py",
        ]
        assert names["inside"].issym() and names["inside"].linkname == "data/x.txt"
        assert names["absolute-inside"].linkname == "data/x.txt"  # made relative
        assert names["datalink"].issym() and names["datalink"].linkname == "data"
        assert names["pkg/data.txt"].isreg()
        assert read_member(packed.path, "pkg/data.txt") == b"hello\n"
        left = {item.path: item.reason for item in packed.left_out}
        assert set(left) == {
            ".git/",
            "__pycache__/",
            "pkg/__pycache__/",
            "node_modules/",
            ".venv/",
            "data/huge.bin",
            "outside",
            "dotdot",
            "pkg/datadir",
        }
        assert "pyvenv.cfg" in left[".venv/"] and "per-file limit" in left["data/huge.bin"]
        assert "symlink out of the directory" in left["outside"]
        assert not packed.in_git
    finally:
        packed.path.unlink()


def test_an_unignored_venv_in_a_checkout_is_left_out(checkout: Path) -> None:
    (checkout / "env" / "lib").mkdir(parents=True)
    (checkout / "env" / "pyvenv.cfg").write_text("home = /usr\n")
    (checkout / "env" / "lib" / "x.py").write_text("x\n")
    (checkout / "env" / "lib" / "y.py").write_text("y\n")
    packed = pack(checkout)
    try:
        assert not any(name.startswith("env/") for name in members(packed.path))
        left = [item.path for item in packed.left_out]
        assert left == ["big.ckpt", "env/"]  # the venv once, not once per file
    finally:
        packed.path.unlink()


def test_the_caps_say_what_to_do(checkout: Path) -> None:
    with pytest.raises(PackError, match=r"files to pack, over the limit of 2"):
        pack(checkout, PackLimits(max_files=2))
    (checkout / "weights.bin").write_bytes(b"\0" * 5000)
    with pytest.raises(PackError, match=r"the biggest files: weights\.bin .*\.gitignore"):
        pack(checkout, PackLimits(max_total_bytes=4000))
    with pytest.raises(PackError, match="is not a directory"):
        pack(checkout / "train.py")


class CodeServer:
    """Stands in for the server's `POST /api/code` (the code helper's branch) by its
    contract: a multipart `file`, 201 with the digest of the bytes received, 413 over a cap."""

    def __init__(self, cap: int = 10 * 1024 * 1024) -> None:
        self.cap = cap
        self.received: list[bytes] = []
        self.content_lengths: list[str | None] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/api/code" and request.method == "POST"
        self.content_lengths.append(request.headers.get("content-length"))
        body = request.read()
        boundary = request.headers["content-type"].split("boundary=")[1].encode()
        part = body.split(b"--" + boundary)[1]
        headers, _, data = part.partition(b"\r\n\r\n")
        assert b'name="file"' in headers
        data = data.removesuffix(b"\r\n")
        if len(data) > self.cap:
            return httpx.Response(413, json={"detail": f"code snapshots are capped at {self.cap}"})
        self.received.append(data)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        return httpx.Response(201, json={"digest": digest, "size_bytes": len(data)})


def test_ship_uploads_the_snapshot_and_returns_the_config_keys(
    checkout: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    server = CodeServer()
    console = Console(file=io.StringIO(), width=200)
    with Api(Target("http://box", "t"), transport=httpx.MockTransport(server)) as api:
        keys = ship(api, checkout, script="./train.py", console=console)
    packed = pack(checkout)
    try:
        assert server.received == [packed.path.read_bytes()]
        assert server.content_lengths[0] is not None  # a length, not a chunked upload
        assert keys["code"] == packed.digest
    finally:
        packed.path.unlink()
    assert keys["code_origin"]["remote"] == "https://git.example.com/team/proj.git"
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "5 files" in text and keys["code"] in text and "uncommitted" in text
    assert list(temp.iterdir()) == []  # the packed file is removed once uploaded


def test_ship_refuses_a_script_missing_from_the_snapshot_and_explains_a_413(
    checkout: Path,
) -> None:
    console = Console(file=io.StringIO())
    server = CodeServer(cap=10)
    with Api(Target("http://box", "t"), transport=httpx.MockTransport(server)) as api:
        with pytest.raises(CliError, match=r"'helper.py' is not in the snapshot .*pkg/helper\.py"):
            ship(api, checkout, script="helper.py", console=console)
        assert server.received == []
        with pytest.raises(CliError, match=r"too large \(413\): code snapshots are capped at 10"):
            ship(api, checkout, script="train.py", console=console)


def test_submit_ships_the_config_files_directory_only_for_a_new_script_experiment(
    tmp_path: Path,
) -> None:
    spec = tmp_path / "exp" / "spec.yaml"
    script = {"script": "train.py"}
    assert _code_dir(script, spec, code=None, no_code=False, new=True) == tmp_path / "exp"
    assert _code_dir(script, spec, code=None, no_code=True, new=True) is None
    assert _code_dir(script, spec, code=None, no_code=False, new=False) is None
    assert (
        _code_dir({**script, "code": "sha256:ab"}, spec, code=None, no_code=False, new=True) is None
    )
    assert _code_dir({"recipe": "digits_cnn"}, spec, code=None, no_code=False, new=True) is None
    assert _code_dir(script, spec, code=tmp_path, no_code=False, new=False) == tmp_path
    with pytest.raises(typer.BadParameter, match="exclude each other"):
        _code_dir(script, spec, code=tmp_path, no_code=True, new=True)
    with pytest.raises(typer.BadParameter, match="built-in recipe"):
        _code_dir({"recipe": "digits_cnn"}, spec, code=tmp_path, no_code=False, new=True)


def test_a_large_upload_on_a_terminal_shows_a_progress_bar(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("print(1)\n")
    (tmp_path / "weights.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # over 1 MiB packed
    server = CodeServer()
    screen = io.StringIO()
    console = Console(file=screen, force_terminal=True, width=120)
    with Api(Target("http://box", "t"), transport=httpx.MockTransport(server)) as api:
        keys = ship(api, tmp_path, script="train.py", console=console)
    assert keys["code"] == "sha256:" + hashlib.sha256(server.received[0]).hexdigest()
    assert "code_origin" not in keys  # not a git checkout
    assert "uploading code" in screen.getvalue()
