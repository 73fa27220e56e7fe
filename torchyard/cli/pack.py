"""Packing a code directory into the gzipped tar `POST /api/code` takes.

What goes in is what git would track: in a checkout, `git ls-files --cached --others
--exclude-standard` (tracked plus untracked-not-ignored, so a 1 GB ignored checkpoint stays
home while a new helper module not yet added goes along); outside one, every file except
`.git`, `__pycache__`, virtual environments (a directory with `pyvenv.cfg`), `node_modules`
and files over a size limit. What was left out is returned with the reason, to be shown.

The tar is deterministic: sorted names, mtime 0, uid/gid 0, no owner names, modes reduced to
0644/0755, and gzip with mtime 0 and no file name. The same tree then gives the same bytes,
so the server's content address (`sha256:...`) stores it once however often it is submitted.

Symlinks are stored as the server accepts them: relative and without `..`, so a link stays
at or below its own folder. One that needs `..` (or is absolute) but lands on a file inside
the directory is stored as a copy of that file; links out of the directory are left out with
the reason, instead of the whole upload being refused. Client side only: no server imports.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import stat
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from torchyard.paths import within

MiB = 1024 * 1024
GIT_TIMEOUT_SECONDS = 30.0
SKIPPED_DIRS = frozenset({".git", "__pycache__", "node_modules"})
# Never inside a snapshot, git or not: the server would refuse the tar for them.
VENV_MARKER = "pyvenv.cfg"


class PackError(Exception):
    """The directory cannot be packed (a cap, unreadable files); the message says why."""


@dataclass(frozen=True)
class PackLimits:
    """Caps checked before anything is uploaded, so the user hears why at once."""

    max_files: int = 20_000
    max_total_bytes: int = 500 * MiB  # uncompressed; the server caps the upload itself
    max_file_bytes: int = 50 * MiB  # outside a git checkout only: git says what belongs


@dataclass(frozen=True)
class LeftOut:
    path: str
    reason: str


@dataclass
class Packed:
    """A packed directory: the .tar.gz at `path` (the caller removes it), its digest as the
    server will compute it, and what was kept and left out."""

    path: Path
    digest: str
    size_bytes: int
    files: list[str]
    total_bytes: int
    in_git: bool
    left_out: list[LeftOut] = field(default_factory=list)


@dataclass(frozen=True)
class _Entry:
    name: str  # posix path relative to the root
    source: Path
    link: str | None  # symlink target as stored, None for a regular file
    size: int
    executable: bool


def _ls_files(root: Path, *options: str) -> list[str] | None:
    """`git ls-files -z OPTIONS` in `root`: paths relative to it, sorted; None when `root` is
    not in a git checkout (or git is missing)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", *options],
            capture_output=True,
            timeout=GIT_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    names = done.stdout.decode("utf-8", "surrogateescape").split("\0")
    return sorted({n for n in names if n})


def _git_files(root: Path, left_out: list[LeftOut]) -> list[str] | None:
    """Paths git would track under `root` (tracked, and untracked but not ignored); what git
    ignores is noted in `left_out` (an ignored directory once), so the user sees what stayed
    home. None outside a git checkout."""
    names = _ls_files(root, "--cached", "--others", "--exclude-standard")
    if names is None:
        return None
    ignored = _ls_files(root, "--others", "--ignored", "--exclude-standard", "--directory")
    left_out.extend(LeftOut(name, "ignored by git") for name in ignored or [])
    return names


def _walk_files(root: Path, limits: PackLimits, left_out: list[LeftOut]) -> list[str]:
    """Every file under `root` but the skipped directories, virtual environments and files
    over the per-file limit (noted in `left_out`)."""
    names: list[str] = []
    for current, dirs, files in os.walk(root, followlinks=False):
        here = Path(current)
        rel_dir = here.relative_to(root)
        kept_dirs = []
        for d in sorted(dirs):
            rel = (rel_dir / d).as_posix()
            if (here / d).is_symlink():
                files.append(d)  # stored (or refused) as a link, never followed
            elif d in SKIPPED_DIRS:
                left_out.append(LeftOut(rel + "/", f"{d} is never packed"))
            elif (here / d / VENV_MARKER).exists():
                left_out.append(LeftOut(rel + "/", "a virtual environment (has pyvenv.cfg)"))
            else:
                kept_dirs.append(d)
        dirs[:] = kept_dirs
        for f in files:
            rel = (rel_dir / f).as_posix()
            try:
                st = (here / f).lstat()
            except OSError as e:
                left_out.append(LeftOut(rel, f"unreadable: {e.strerror or e}"))
                continue
            if stat.S_ISREG(st.st_mode) and st.st_size > limits.max_file_bytes:
                left_out.append(
                    LeftOut(
                        rel,
                        f"{st.st_size / MiB:.1f} MiB, over the per-file limit "
                        f"of {limits.max_file_bytes / MiB:.0f} MiB",
                    )
                )
                continue
            names.append(rel)
    return sorted(names)


def _link(root: Path, name: str, path: Path, left_out: list[LeftOut]) -> _Entry | None:
    """A symlink as the server accepts it: relative, with no `..` (a link then points at or
    below its own folder, however links chain). A link that needs `..` (or is absolute) but
    lands on a file inside `root` is stored as a copy of that file; one out of `root`, or to
    a directory elsewhere in it, is left out with the reason."""
    raw = os.readlink(path)
    try:
        resolved = path.resolve(strict=False)  # where it really lands, through further links
    except (OSError, RuntimeError):  # a loop of links
        left_out.append(LeftOut(name, f"a symlink that loops (-> {raw})"))
        return None
    lexical = Path(os.path.normpath(path.parent / raw))  # where it points, by its text
    if not within(lexical, root) or not within(resolved, root):
        left_out.append(LeftOut(name, f"a symlink out of the directory (-> {raw})"))
        return None
    relative = os.path.relpath(lexical, path.parent)
    if ".." not in Path(relative).parts:  # an absolute target inside is made relative
        return _Entry(name, path, Path(relative).as_posix(), 0, False)
    if resolved.is_file():
        st = resolved.stat()
        return _Entry(name, resolved, None, st.st_size, bool(st.st_mode & 0o111))
    left_out.append(
        LeftOut(name, f"a symlink outside its own folder to a directory or nothing (-> {raw})")
    )
    return None


def _entry(root: Path, name: str, left_out: list[LeftOut]) -> _Entry | None:
    path = root / name
    try:
        st = path.lstat()
    except FileNotFoundError:
        return None  # tracked but deleted in the working tree: the snapshot has it deleted
    except OSError as e:
        left_out.append(LeftOut(name, f"unreadable: {e.strerror or e}"))
        return None
    if stat.S_ISLNK(st.st_mode):
        return _link(root, name, path, left_out)
    if stat.S_ISDIR(st.st_mode):
        # git lists a submodule or a nested repository as a directory
        left_out.append(LeftOut(name + "/", "a nested git repository (submodule)"))
        return None
    if not stat.S_ISREG(st.st_mode):
        left_out.append(LeftOut(name, "not a regular file (device, FIFO or socket)"))
        return None
    return _Entry(name, path, None, st.st_size, bool(st.st_mode & 0o111))


def _skipped_dir(root: Path, dirs: list[str], cache: dict[str, str | None]) -> str | None:
    """The first directory on the way to a file that is never packed (`__pycache__`, a
    virtual environment: git lists an un-ignored `.venv` like any untracked files), else
    None. `cache` maps a directory to its reason (None: packed)."""
    for depth in range(1, len(dirs) + 1):
        rel = "/".join(dirs[:depth])
        if rel not in cache:
            if dirs[depth - 1] in SKIPPED_DIRS:
                cache[rel] = f"{dirs[depth - 1]} is never packed"
            elif (root / rel / VENV_MARKER).is_file():
                cache[rel] = "a virtual environment (has pyvenv.cfg)"
            else:
                cache[rel] = None
        if cache[rel] is not None:
            return rel
    return None


def _select(root: Path, limits: PackLimits) -> tuple[list[_Entry], bool, list[LeftOut]]:
    left_out: list[LeftOut] = []
    git_names = _git_files(root, left_out)
    in_git = git_names is not None
    names = git_names if git_names is not None else _walk_files(root, limits, left_out)
    entries = []
    skipped: dict[str, str | None] = {}
    reported: set[str] = set()
    for name in names:
        if name.endswith("/"):
            left_out.append(LeftOut(name, "a nested git repository"))
            continue
        skipped_dir = _skipped_dir(root, name.split("/")[:-1], skipped)
        if skipped_dir is not None:
            if skipped_dir not in reported:  # one line for the directory, not one per file
                reported.add(skipped_dir)
                left_out.append(LeftOut(skipped_dir + "/", str(skipped[skipped_dir])))
            continue
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            left_out.append(LeftOut(name, "its name is not valid UTF-8"))
            continue
        entry = _entry(root, name, left_out)
        if entry is not None:
            entries.append(entry)
    return entries, in_git, sorted(left_out, key=lambda x: x.path)


def _check_caps(entries: list[_Entry], limits: PackLimits, root: Path) -> int:
    total = sum(e.size for e in entries)
    if len(entries) > limits.max_files:
        raise PackError(
            f"{root} has {len(entries)} files to pack, over the limit of {limits.max_files}; "
            "add what should stay home to .gitignore, or pack a smaller directory"
        )
    if total > limits.max_total_bytes:
        biggest = sorted(entries, key=lambda e: -e.size)[:5]
        names = ", ".join(f"{e.name} ({e.size / MiB:.1f} MiB)" for e in biggest)
        raise PackError(
            f"{root} holds {total / MiB:.1f} MiB to pack, over the limit of "
            f"{limits.max_total_bytes / MiB:.0f} MiB; the biggest files: {names}. "
            "Add what should stay home (data, checkpoints) to .gitignore"
        )
    return total


def _tar_info(entry: _Entry) -> tarfile.TarInfo:
    info = tarfile.TarInfo(entry.name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    if entry.link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = entry.link
        info.mode = 0o777
    else:
        info.size = entry.size
        info.mode = 0o755 if entry.executable else 0o644
    return info


def write_tar_gz(entries: list[_Entry], out: io.BufferedIOBase) -> None:
    """The deterministic tar.gz of `entries` (already sorted by name) into `out`."""
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=0, compresslevel=6) as gz:
        with tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for entry in entries:
                info = _tar_info(entry)
                if entry.link is not None:
                    tar.addfile(info)
                    continue
                try:
                    with entry.source.open("rb") as f:
                        tar.addfile(info, f)
                except OSError as e:
                    raise PackError(f"cannot read {entry.name}: {e.strerror or e}") from e
                except tarfile.TarError as e:  # the file shrank while it was read
                    raise PackError(f"{entry.name} changed while it was packed: {e}") from e


def pack(directory: Path, limits: PackLimits | None = None) -> Packed:
    """Pack `directory` into a temporary .tar.gz; the caller deletes `Packed.path`."""
    limits = limits or PackLimits()
    root = directory.expanduser().resolve()
    if not root.is_dir():
        raise PackError(f"{directory} is not a directory")
    entries, in_git, left_out = _select(root, limits)
    if not entries:
        raise PackError(f"{directory} has no files to pack")
    total = _check_caps(entries, limits, root)
    fd, name = tempfile.mkstemp(prefix="torchyard-code-", suffix=".tar.gz")
    path = Path(name)
    try:
        with os.fdopen(fd, "wb") as out:
            write_tar_gz(entries, out)
        digest = hashlib.sha256()
        with path.open("rb") as f:
            while chunk := f.read(MiB):
                digest.update(chunk)
    except BaseException:
        path.unlink(missing_ok=True)
        raise
    return Packed(
        path=path,
        digest="sha256:" + digest.hexdigest(),
        size_bytes=path.stat().st_size,
        files=[e.name for e in entries],
        total_bytes=total,
        in_git=in_git,
        left_out=left_out,
    )
