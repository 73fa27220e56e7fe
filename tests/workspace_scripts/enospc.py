"""Fills the disk its run folder is on until a write fails with ENOSPC, and dies of it
(tests/test_keeper_disk_full.py): the disk stays full while its run is recorded failed."""

chunk = b"x" * 1024**2
with open("fill.bin", "wb") as f:
    while True:
        f.write(chunk)
        f.flush()
