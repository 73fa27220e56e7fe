"""A member's own library that says where it was loaded: a C shared object that, in every
process the dynamic loader maps it into (LD_PRELOAD, LD_AUDIT: it has ``la_version``), writes a
file ``<euid>-<pid>`` naming the program into a markers folder. Built with the machine's gcc,
as a member would build one into their snapshot; CI has gcc (a missing one fails the test)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = r"""
#include <stdio.h>
#include <unistd.h>
#include <fcntl.h>
unsigned int la_version(unsigned int version) { return version; }
__attribute__((constructor)) static void mark(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%d-%d", MARKERS, (int)geteuid(), (int)getpid());
    int fd = open(path, O_CREAT | O_WRONLY | O_TRUNC, 0666);
    if (fd >= 0) {
        char exe[1024];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe);
        if (n > 0) write(fd, exe, (size_t)n);
        close(fd);
    }
}
"""


def build(folder: Path, markers: Path) -> Path:
    """``folder/mark.so`` writing into `markers` (made world-writable: a job's uid writes too)."""
    gcc = shutil.which("gcc") or shutil.which("cc")
    assert gcc is not None, "the hostile suite needs a C compiler (apt-get install gcc)"
    markers.mkdir(parents=True, exist_ok=True)
    markers.chmod(0o1777)
    (folder / "mark.c").write_text(SOURCE)
    library = folder / "mark.so"
    subprocess.run(
        [gcc, "-shared", "-fPIC", "-O2", f'-DMARKERS="{markers}"', "-o", library, "mark.c"],
        cwd=folder,
        check=True,
        capture_output=True,
    )
    library.chmod(0o755)
    return library


def loaded_by(markers: Path) -> dict[int, list[str]]:
    """Which programs loaded the library, by effective uid."""
    found: dict[int, list[str]] = {}
    for marker in markers.iterdir():
        euid = int(marker.name.split("-")[0])
        found.setdefault(euid, []).append(marker.read_text())
    return found
