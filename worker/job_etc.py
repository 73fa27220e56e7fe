"""The job's /etc: only what programs need, and an account for the job's own uid.

The sandbox (worker/sandbox.py) used to bind the host's whole /etc: any world-readable file an
operator keeps there (a pip.conf with an index token, an rclone or database client config) was
the job's to read, while the job's uid, a per-run one, had no passwd entry, so
``getpass.getuser()`` raised KeyError once the environment had no USER (and ssh, some CUDA
tools and torch's inductor cache name come from it). So the job's /etc is a tmpfs holding:

- generated (read-only, from memfds through bwrap's ``--ro-bind-data``): ``passwd`` and
  ``group`` with root, nobody and the job's own uid as JOB_USER; ``nsswitch.conf`` that reads
  those files and DNS only (the host's may name systemd or LDAP modules whose sockets the
  sandbox has not); ``hosts``: the host's, with this machine's name on the job's own loopback
  (gloo and NCCL bind what the hostname resolves to, and in the job's own network namespace
  the host's address is not the job's);
- the host's, read-only where present (BOUND): the resolver's files, the certificates, the
  loader's cache and configuration, ``alternatives`` (the links many /usr/bin commands are),
  the time zone, ``os-release``, fonts and MIME types.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

ETC = Path("/etc")
JOB_USER = "torchyard"
BOUND = (
    "resolv.conf",
    "host.conf",
    "gai.conf",
    "protocols",
    "services",
    "networks",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "pki",
    "crypto-policies",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "localtime",
    "timezone",
    "os-release",
    "debian_version",
    "locale.alias",
    "fonts",
    "mime.types",
)
NSSWITCH = (
    "passwd: files\ngroup: files\nshadow: files\nhosts: files dns\nnetworks: files\n"
    "protocols: files\nservices: files\n"
)


def _passwd(uid: int, gid: int, home: Path) -> str:
    entries = {
        0: "root:x:0:0:root:/root:/usr/sbin/nologin",
        65534: "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin",
    }
    entries[uid] = f"{JOB_USER}:x:{uid}:{gid}:torchyard job:{home}:/bin/sh"
    return "".join(f"{line}\n" for _, line in sorted(entries.items()))


def _group(gid: int) -> str:
    entries = {0: "root:x:0:", 65534: "nogroup:x:65534:", gid: f"{JOB_USER}:x:{gid}:"}
    return "".join(f"{line}\n" for _, line in sorted(entries.items()))


def _hosts(hostname: str, host_file: Path) -> str:
    """The host's entries without this machine's own name, which goes to loopback."""
    try:
        lines = host_file.read_text().splitlines()
    except OSError:
        lines = []
    kept = [
        line
        for line in lines
        if hostname not in line.split("#", 1)[0].split()[1:]
        and "localhost" not in line.split("#", 1)[0].split()[1:2]
    ]
    head = [f"127.0.0.1\tlocalhost {hostname}", "::1\tlocalhost ip6-localhost ip6-loopback"]
    return "\n".join([*head, *kept]) + "\n"


def generated(uid: int, gid: int, home: Path, host_file: Path = ETC / "hosts") -> dict[str, str]:
    """The files made for this job, by name under /etc."""
    return {
        "passwd": _passwd(uid, gid, home),
        "group": _group(gid),
        "nsswitch.conf": NSSWITCH,
        "hosts": _hosts(socket.gethostname(), host_file),
    }


def data_fd(text: str) -> int:
    """A descriptor bwrap reads `text` from (``--ro-bind-data``), at its start."""
    fd = os.memfd_create("torchyard-etc", os.MFD_CLOEXEC)
    os.write(fd, text.encode())
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
