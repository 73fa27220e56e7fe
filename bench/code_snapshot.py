"""Code snapshots: the server's time to take an upload (POST /api/code, through the real app:
multipart streamed to disk while hashed, every member checked, stored) and the worker's time to
extract a run's fresh copy (every member checked again), for a checkout-sized snapshot.

    .venv/bin/python bench/code_snapshot.py [--files 2000] [--file-kb 16] [--blob-mb 50]

The snapshot holds --files small source-like files plus one --blob-mb incompressible file
(a model weight someone forgot to ignore).
"""

from __future__ import annotations

import argparse
import io
import os
import shutil
import sys
import tarfile
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def build(files: int, file_kb: int, blob_mb: int) -> bytes:
    buf = io.BytesIO()
    line = b"def f(x):\n    return x * 2  # some code\n"
    body = (line * (file_kb * 1024 // len(line) + 1))[: file_kb * 1024]
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(files):
            info = tarfile.TarInfo(f"pkg{i % 50}/mod{i}.py")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
        blob = os.urandom(blob_mb * 1024 * 1024)
        info = tarfile.TarInfo("weights.bin")
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
    return buf.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--file-kb", type=int, default=16)
    parser.add_argument("--blob-mb", type=int, default=50)
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="torchyard-bench-code-"))
    os.environ.update(
        TORCHYARD_DATA_DIR=str(base / "data"),
        TORCHYARD_DATABASE_URL=f"sqlite:///{base / 'data' / 'torchyard.db'}",
        TORCHYARD_BROKER_URL="memory://",
        TORCHYARD_ADMIN_PASSWORD="bench-password-1",
        TORCHYARD_REAP_INTERVAL_SECONDS="0",
    )
    (base / "data").mkdir()
    from fastapi.testclient import TestClient

    from app.code import store
    from app.code.tarcheck import Limits, extract
    from app.main import create_app
    from app.prestart import prestart

    prestart()
    data = build(args.files, args.file_kb, args.blob_mb)
    print(f"snapshot: {args.files + 1} files, {len(data) / 2**20:.1f} MiB packed")
    with TestClient(create_app()) as client:
        token = client.post(
            "/api/auth/token", data={"username": "admin", "password": "bench-password-1"}
        ).json()["access_token"]
        headers = {"Authorization": f"Bearer {token}"}
        start = time.perf_counter()
        got = client.post("/api/code", headers=headers, files={"file": ("c.tar.gz", data)})
        upload_s = time.perf_counter() - start
        assert got.status_code == 201, got.text
        start = time.perf_counter()
        again = client.post("/api/code", headers=headers, files={"file": ("c.tar.gz", data)})
        again_s = time.perf_counter() - start
        assert again.status_code == 200
    digest = got.json()["digest"]
    start = time.perf_counter()
    extract(store.local_path(digest), base / "copy", Limits.from_settings())
    extract_s = time.perf_counter() - start
    mib = len(data) / 2**20
    print(f"upload (stream, hash, check, store): {upload_s:.2f} s ({mib / upload_s:.0f} MiB/s)")
    print(f"same bytes again (nothing stored):   {again_s:.2f} s")
    print(f"worker extraction (checked again):   {extract_s:.2f} s")
    shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
