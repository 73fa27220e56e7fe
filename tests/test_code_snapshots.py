"""POST /api/code and what a snapshot goes through: stored once by digest, every malicious tar
shape refused naming the member (nothing written anywhere), the size cap, zips, the config's
`code`/`script` checks, and removal once nothing refers to it."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from app.auth.models import User
from app.code import store
from app.code.models import CodeSnapshot
from app.code.tarcheck import Limits, TarRefused
from app.db import session_scope
from app.runs.models import Run
from app.settings import get_settings
from tests.code_archives import GOOD_SNAPSHOT, MALICIOUS, tar_gz, zip_bytes
from tests.conftest import WORKSPACE_DIR, make_user
from tests.factories import add_run
from tests.waits import wait_for
from worker import code as code_copy

TRAIN = b"print('snapshot train')\n"


def _good(extra: bytes = b"") -> bytes:
    members = [("train.py", "file", TRAIN + extra), *GOOD_SNAPSHOT[1:]]
    return tar_gz(members)


def _upload(client, headers: dict[str, str], data: bytes, name: str = "code.tar.gz"):
    return client.post("/api/code", headers=headers, files={"file": (name, data)})


def _rows(digest: str) -> int:
    with session_scope() as session:
        return int(
            session.scalar(
                select(func.count()).select_from(CodeSnapshot).where(CodeSnapshot.digest == digest)
            )
            or 0
        )


def _leftovers() -> list[str]:
    tmp = store.code_dir() / "tmp"
    return sorted(os.listdir(tmp)) if tmp.is_dir() else []


def test_upload_stores_once_by_digest(client, user_headers) -> None:
    data = _good(b"# once\n")
    first = _upload(client, user_headers, data)
    assert first.status_code == 201, first.text
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    assert first.json() == {"digest": digest, "size_bytes": len(data)}
    again = _upload(client, user_headers, data)
    assert again.status_code == 200 and again.json() == first.json()
    assert _rows(digest) == 1
    assert store.local_path(digest).read_bytes() == data
    with session_scope() as session:
        row = session.get(CodeSnapshot, digest)
        assert row is not None
        assert row.files == [["train.py", len(TRAIN) + 7], ["helper.py", 42], ["data/x.txt", 18]]
    assert _leftovers() == []


def test_an_upload_past_the_apps_json_body_limit_is_taken(client, user_headers) -> None:
    data = tar_gz([("weights.bin", "file", os.urandom(3 * 1024 * 1024))])
    assert len(data) > get_settings().max_body_bytes
    got = _upload(client, user_headers, data)
    assert got.status_code == 201, got.text
    assert got.json()["size_bytes"] == len(data)


def test_a_zip_is_normalised_to_the_same_tar_gz_every_time(client, user_headers) -> None:
    data = zip_bytes({"train.py": TRAIN, "pkg/mod.py": b"X = 1\n"})
    first = _upload(client, user_headers, data, "code.zip")
    assert first.status_code == 201, first.text
    digest = first.json()["digest"]
    assert _upload(client, user_headers, data, "code.zip").json()["digest"] == digest
    stored = store.local_path(digest).read_bytes()
    assert stored[:2] == b"\x1f\x8b" and digest == "sha256:" + hashlib.sha256(stored).hexdigest()
    with session_scope() as session:
        row = session.get(CodeSnapshot, digest)
        assert row is not None and row.files == [["train.py", len(TRAIN)], ["pkg/mod.py", 6]]


@pytest.mark.parametrize("shape", sorted(MALICIOUS))
def test_each_malicious_shape_is_refused_naming_the_member(
    client, user_headers, shape: str
) -> None:
    members, problem = MALICIOUS[shape]
    before = sorted(os.listdir(store.code_dir())) if store.code_dir().is_dir() else []
    got = _upload(client, user_headers, tar_gz(members))
    assert got.status_code == 422, got.text
    (error,) = got.json()["detail"]
    assert error["loc"] == ["body", "file"]
    assert problem in error["msg"] and members[-1][0] in error["msg"], error
    assert sorted(os.listdir(store.code_dir())) == before  # nothing stored
    assert _leftovers() == []
    assert not Path("/tmp/torchyard-escape.txt").exists()


def test_not_an_archive_and_not_multipart(client, user_headers) -> None:
    got = _upload(client, user_headers, b"#!/bin/sh\necho hi\n")
    assert got.status_code == 422 and "not a gzipped tar" in got.text
    raw = client.post("/api/code", headers=user_headers, content=_good())
    assert raw.status_code == 415 and "'file'" in raw.text
    no_file = client.post("/api/code", headers=user_headers, files={"other": ("x", b"1")})
    assert no_file.status_code == 400 and "'file'" in no_file.text


def test_larger_than_the_cap_is_a_413_naming_it(client, user_headers, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "max_code_bytes", 2048)
    data = _good(os.urandom(4096).hex().encode())  # does not compress
    got = _upload(client, user_headers, data)
    assert got.status_code == 413, got.text
    assert "max_code_bytes (2048 bytes)" in got.json()["detail"]
    assert _leftovers() == []


def test_a_gzip_bomb_is_refused_by_its_unpacked_size(client, user_headers, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "max_code_unpacked_bytes", 1024 * 1024)
    data = tar_gz([("zeros.bin", "file", bytes(2 * 1024 * 1024))])
    assert len(data) < 10_000
    got = _upload(client, user_headers, data)
    assert got.status_code == 422 and "max_code_unpacked_bytes" in got.text
    assert "zeros.bin" in got.text


def test_too_many_members(client, user_headers, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "max_code_members", 3)
    data = tar_gz([(f"f{i}.py", "file", b"") for i in range(5)])
    got = _upload(client, user_headers, data)
    assert got.status_code == 422 and "more than 3 members" in got.text


def test_a_viewer_may_not_upload(client) -> None:
    headers = make_user(role="viewer")[2]
    assert _upload(client, headers, _good()).status_code == 403


def _digest(client, headers, data: bytes | None = None) -> str:
    got = _upload(client, headers, data or _good())
    assert got.status_code in (200, 201), got.text
    return str(got.json()["digest"])


def test_config_checks_code_and_script_in_it(client, user_headers) -> None:
    digest = _digest(client, user_headers)

    def create(config: dict) -> object:
        return client.post(
            "/api/experiments", headers=user_headers, json={"name": "c", "config": config}
        )

    ok = create({"script": "./train.py", "code": digest, "code_origin": {"commit": "abc"}})
    assert ok.status_code == 201, ok.text  # type: ignore[attr-defined]
    config = ok.json()["config"]  # type: ignore[attr-defined]
    assert config["code"] == digest and config["code_origin"]["commit"] == "abc"
    missing = create({"script": "nope.py", "code": digest})
    assert missing.status_code == 422  # type: ignore[attr-defined]
    (error,) = missing.json()["detail"]  # type: ignore[attr-defined]
    assert error["loc"] == ["body", "config", "script"] and digest in error["msg"]
    unknown = create({"script": "train.py", "code": "sha256:" + "0" * 64})
    (error,) = unknown.json()["detail"]  # type: ignore[attr-defined]
    assert error["loc"] == ["body", "config", "code"] and "POST /api/code" in error["msg"]
    bad = create({"script": "train.py", "code": "abc"})
    assert bad.status_code == 422 and "code" in bad.json()["detail"][0]["loc"]  # type: ignore[attr-defined]
    orphan = create({"script": "train.py", "code_origin": {"commit": "abc"}})
    assert orphan.status_code == 422 and "give `code` too" in orphan.text  # type: ignore[attr-defined]
    big = create({"script": "train.py", "code": digest, "code_origin": {"diff": "x" * 600_000}})
    assert big.status_code == 422 and "diff_truncated" in big.text  # type: ignore[attr-defined]
    (WORKSPACE_DIR / "code_plain.py").write_text("print(1)\n")
    plain = create({"script": "code_plain.py"})  # the workspace's: no code keys added to it
    assert plain.status_code == 201, plain.text  # type: ignore[attr-defined]
    assert not {"code", "code_origin"} & set(plain.json()["config"])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("line", "problem"),
    [
        ("-e .", "pip options"),
        ("--extra-index-url https://evil.example/simple", "pip options"),
        ("pkg @ file:///tmp/pkg.whl", "a URL or a local path"),
    ],
)
def test_a_snapshots_requirements_are_checked_when_the_experiment_or_run_is_created(
    client, user_headers, line: str, problem: str
) -> None:
    """The config's rules, at once (not when the run starts): a 422 naming the file, the line
    and the problem, for the experiment and for a run whose overrides name the snapshot."""
    text = f"six==1.17.0\n# a comment\n{line}\n".encode()
    bad = _digest(
        client, user_headers, tar_gz([*_good_members(), ("requirements.txt", "file", text)])
    )
    good_text = b"six==1.17.0\n"
    good = _digest(
        client, user_headers, tar_gz([*_good_members(), ("requirements.txt", "file", good_text)])
    )

    def create(digest: str) -> Any:
        config = {"script": "train.py", "code": digest}
        return client.post(
            "/api/experiments", headers=user_headers, json={"name": "r", "config": config}
        )

    refused = create(bad)
    assert refused.status_code == 422, refused.text
    (error,) = refused.json()["detail"]
    assert error["loc"] == ["body", "config", "code"]
    assert f"requirements.txt in code snapshot {bad}, line 3: " in error["msg"]
    assert problem in error["msg"] and line in error["msg"]
    made = create(good)
    assert made.status_code == 201, made.text
    run = client.post(
        f"/api/experiments/{made.json()['id']}/runs",
        headers=user_headers,
        json={"overrides": {"code": bad}},
    )
    assert run.status_code == 422, run.text
    (error,) = run.json()["detail"]
    assert error["loc"] == ["body", "overrides", "code"] and "line 3" in error["msg"]


def _good_members() -> list[Any]:
    return [("train.py", "file", TRAIN), *GOOD_SNAPSHOT[1:]]


def _owner_id(headers: dict[str, str]) -> int:
    from app.auth.service import check_token

    with session_scope() as session:
        user = check_token(session, token=headers["Authorization"].split()[1])
        assert isinstance(user, User)
        return user.id


def test_deleting_the_last_run_that_uses_a_snapshot_removes_it(client, monkeypatch) -> None:
    monkeypatch.setattr(get_settings(), "code_unused_grace_seconds", 0.0)
    headers = make_user()[2]
    data = _good(b"# deleted\n")
    digest = _digest(client, headers, data)
    owner = _owner_id(headers)
    config = {"script": "train.py", "code": digest, "seed": 1}
    with session_scope() as session:
        runs = [add_run(session, owner_id=owner, config=config, status="succeeded") for _ in "ab"]
        experiments = [session.get(Run, r).experiment_id for r in runs]  # type: ignore[union-attr]
    assert client.delete(f"/api/runs/{runs[0]}", headers=headers).status_code == 204
    # The other run and both experiments (their configs name it too) still use it.
    assert _rows(digest) == 1 and store.local_path(digest).is_file()
    assert client.delete(f"/api/experiments/{experiments[0]}", headers=headers).status_code == 204
    assert _rows(digest) == 1
    gone = client.delete(f"/api/experiments/{experiments[1]}", headers=headers)
    assert gone.status_code == 204
    assert int(gone.headers["X-Freed-Bytes"]) >= len(data)
    assert _rows(digest) == 0 and not store.local_path(digest).exists()


def test_an_unused_snapshot_stays_for_the_grace_period(client) -> None:
    headers = make_user()[2]
    digest = _digest(client, headers, _good(b"# graced\n"))
    owner = _owner_id(headers)
    with session_scope() as session:
        run_id = add_run(session, owner_id=owner, config={"recipe": "x"}, status="succeeded")
    assert client.delete(f"/api/runs/{run_id}", headers=headers).status_code == 204
    assert _rows(digest) == 1  # uploaded just now: a config naming it may be on its way


def test_the_worker_refuses_a_bad_archive_in_the_store(tmp_path: Path) -> None:
    """The worker trusts the store no more than the upload: a tar put there by hand is checked
    again as it is extracted, and nothing lands outside the run's folder."""
    limits = Limits.from_settings()
    assert limits.max_members > 0
    for shape, (members, _problem) in MALICIOUS.items():
        data = tar_gz(members)
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        store.local_path(digest).parent.mkdir(parents=True, exist_ok=True)
        store.local_path(digest).write_bytes(data)
        run_dir = tmp_path / shape.replace(" ", "-") / "run"
        run_dir.mkdir(parents=True)
        with pytest.raises(TarRefused), code_copy.use(run_dir, digest, "train.py"):
            pass
        assert os.listdir(run_dir) == [], shape
        cache = get_settings().snapshots_dir
        assert not list(cache.glob(".unpack-*")) and not (cache / digest[7:]).exists(), shape
        store.local_path(digest).unlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        s.replace(" ", "-") for s in MALICIOUS
    )


def test_the_worker_shares_one_read_only_copy_and_mirrors_it_per_run(
    tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setattr(get_settings(), "snapshot_cache_max_bytes", 0)  # gone once unused
    data = _good(b"# copy\n")
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    store.local_path(digest).parent.mkdir(parents=True, exist_ok=True)
    store.local_path(digest).write_bytes(data)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with (
        code_copy.use(tmp_path / "a", digest, "./train.py") as a,
        code_copy.use(tmp_path / "b", digest, "train.py") as b,
    ):
        assert a.unpacked == b.unpacked == get_settings().snapshots_dir / digest[7:]
        root = code_copy.snapshot_root(tmp_path / "a")
        assert a.script == root / "train.py" and a.script.is_symlink()
        assert a.script.resolve() == b.script.resolve() == a.unpacked / "train.py"
        assert (root / "data" / "x.txt").read_text() == "beside the script\n"
        assert (root / "data").is_dir() and not (root / "data").is_symlink()  # the run's own
        assert os.readlink(a.unpacked / "README") == "data/x.txt"
        for path in (a.unpacked, a.unpacked / "data", a.unpacked / "train.py"):
            assert path.lstat().st_mode & 0o222 == 0, path  # nobody writes the shared copy
        with pytest.raises(ValueError, match="not a file in code snapshot"):
            code_copy.prepare(tmp_path / "a", a.unpacked, digest, "other.py")
    assert not a.unpacked.exists()  # no run uses it, and the cap is 0


def test_the_run_page_lists_the_snapshot_and_links_the_download(app, client) -> None:
    from tests.test_runs_views import logged_in

    browser, headers = logged_in(app)
    data = _good(b"# page\n")
    digest = _digest(client, headers, data)
    config = {"script": "train.py", "code": digest, "seed": 1}
    with session_scope() as session:
        run_id = add_run(session, owner_id=_owner_id(headers), config=config, status="failed")
    page = browser.get(f"/runs/{run_id}")
    assert page.status_code == 200
    assert "<code>data/x.txt</code></td><td>18</td>" in page.text
    assert f'href="/api/runs/{run_id}/code"' in page.text
    got = client.get(f"/api/runs/{run_id}/code", headers=headers)
    assert got.status_code == 200 and got.content == data
    assert got.headers["content-type"] == "application/gzip"


def test_team_mode_stores_on_the_artifact_store_and_the_worker_checks_what_it_fetches(
    client,
    user_headers,
    monkeypatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setattr(get_settings(), "artifact_store", str(tmp_path / "store"))
    data = _good(b"# team\n")
    digest = _digest(client, user_headers, data)
    hex_ = digest.removeprefix("sha256:")
    stored = tmp_path / "store" / "code" / f"{hex_}.tar.gz"
    assert stored.read_bytes() == data
    assert not store.local_path(digest).exists()  # the API host keeps no copy
    owner = _owner_id(user_headers)
    config = {"script": "train.py", "code": digest, "seed": 1}
    with session_scope() as session:
        run_id = add_run(session, owner_id=owner, config=config, status="succeeded")
    got = client.get(f"/api/runs/{run_id}/code", headers=user_headers)
    assert got.status_code == 200 and got.content == data
    # A worker on another host fetches it, checks the digest, extracts, keeps no copy.
    (tmp_path / "run").mkdir()
    (tmp_path / "run2").mkdir()
    monkeypatch.setattr(get_settings(), "snapshot_cache_max_bytes", 0)  # fetched each time
    with code_copy.use(tmp_path / "run", digest, "train.py") as code:
        assert code.script.read_bytes() == TRAIN + b"# team\n"
    assert _leftovers() == [] and not store.local_path(digest).exists()
    stored.write_bytes(_good(b"# tampered\n"))
    with (
        pytest.raises(store.SnapshotMissing, match="other bytes"),
        code_copy.use(tmp_path / "run2", digest, "train.py"),
    ):
        pass
    assert not (tmp_path / "run2" / "work").exists() and _leftovers() == []


@pytest.mark.parametrize(
    ("name", "problem"),
    [("../escape.py", "'..'"), ("/abs/escape.py", "absolute"), ("link", "symbolic link")],
)
def test_a_zip_gets_the_same_checks(client, user_headers, name: str, problem: str) -> None:
    import io
    import stat
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as archive:
        info = zipfile.ZipInfo(name)
        if name == "link":
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
        archive.writestr(info, b"/etc/passwd")
    got = _upload(client, user_headers, buf.getvalue(), "c.zip")
    assert got.status_code == 422 and problem in got.text and name in got.text
    assert _leftovers() == []


def test_an_oversized_extended_header_is_refused_before_it_is_read(client, user_headers) -> None:
    import io
    import tarfile

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("train.py")
        info.pax_headers = {"comment": "x" * (2 * 1024 * 1024)}
        tar.addfile(info, io.BytesIO(b""))
    got = _upload(client, user_headers, buf.getvalue())
    assert got.status_code == 422 and "extended header" in got.text


def test_a_damaged_archive_is_a_422(client, user_headers) -> None:
    data = bytearray(_good(b"# damaged\n"))
    data[40:60] = bytes(20)  # inside the deflate stream
    got = _upload(client, user_headers, bytes(data))
    assert got.status_code == 422 and got.json()["detail"][0]["type"] == "code_archive"
    assert "zlib" in got.text or "damaged archive" in got.text
    truncated = _upload(client, user_headers, _good(b"# cut\n")[:-30])
    assert truncated.status_code == 422 and "archive" in truncated.text
    assert _leftovers() == []


def test_the_tests_archives_are_the_same_bytes_across_a_second() -> None:
    """tests.code_archives.tar_gz once wrote gzip's header time: an archive built for its
    digest and built again to compare differed across a second's boundary (a CI flake)."""
    import time

    first = tar_gz([("a.py", "file", b"x")])
    second = int(time.time())
    wait_for(lambda: int(time.time()) > second, timeout=5, what="the next second")
    assert tar_gz([("a.py", "file", b"x")]) == first
