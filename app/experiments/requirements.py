"""A run's extra Python packages: each one a PEP 508 requirement from the package index.

The worker installs them (worker/environments.py) with pip into a virtual environment of the
run's own, so each line is hostile input that ends up on pip's command line. Only a plain
requirement is taken (``name[extra]>=1.2; marker``): no pip options (``-e``, ``--index-url``,
``-r``: the index is the worker's, set by whoever runs it), no URL (``name @ https://...``)
and no local path (``./pkg``, ``/tmp/x.whl``), which would install code from wherever the
line points instead of the index the worker trusts. The config (``environment.requirements``)
and a ``requirements.txt`` at the root of a code snapshot pass the same check.
"""

from __future__ import annotations

import re

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

MAX_REQUIREMENTS = 200
MAX_REQUIREMENT_CHARS = 300
# A requirements.txt larger than this is refused rather than read.
MAX_REQUIREMENTS_FILE_BYTES = 64 * 1024

# What pip would take for a file to install rather than a name on the index.
_ARCHIVE_SUFFIXES = (".whl", ".zip", ".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz", ".tar.xz")
_WINDOWS_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


class RequirementRefused(ValueError):
    """A requirement line that is not a plain package requirement; the message names it."""


def check_requirement(line: str) -> str:
    """The requirement in its normal written form, or RequirementRefused saying why not."""
    text = line.strip()
    if not text:
        raise RequirementRefused("an empty requirement")
    if len(text) > MAX_REQUIREMENT_CHARS:
        raise RequirementRefused(
            f"{text[:40]!r}...: longer than {MAX_REQUIREMENT_CHARS} characters"
        )
    if text.startswith("-"):
        raise RequirementRefused(
            f"{text!r}: pip options (-e, -r, --index-url, ...) are not allowed; give a "
            "package requirement like name==1.2 (the package index is the worker's)"
        )
    if (
        "://" in text
        or "\\" in text
        or text.startswith((".", "/", "~"))
        or _WINDOWS_DRIVE.match(text)
    ):
        raise RequirementRefused(
            f"{text!r} is a URL or a local path: only package requirements from the index "
            "(name==1.2) are allowed"
        )
    try:
        requirement = Requirement(text)
    except InvalidRequirement as exc:
        raise RequirementRefused(f"{text!r} is not a valid requirement: {exc}") from None
    if requirement.url is not None:
        raise RequirementRefused(
            f"{text!r} is a URL or a local path: only package requirements from the index "
            "(name==1.2) are allowed"
        )
    if requirement.name.lower().endswith(_ARCHIVE_SUFFIXES):
        raise RequirementRefused(
            f"{text!r} is a URL or a local path: only package requirements from the index "
            "(name==1.2) are allowed"
        )
    return str(requirement)


def check_requirements(lines: list[str], *, source: str) -> list[str]:
    """Every line checked (the first refused one named with ``source`` and its position),
    each requirement once, in the order given."""
    if len(lines) > MAX_REQUIREMENTS:
        raise RequirementRefused(f"{source}: more than {MAX_REQUIREMENTS} requirements")
    checked: list[str] = []
    for position, line in enumerate(lines, start=1):
        try:
            requirement = check_requirement(line)
        except RequirementRefused as exc:
            raise RequirementRefused(f"{source}, item {position}: {exc}") from None
        if requirement not in checked:
            checked.append(requirement)
    return checked


def numbered_lines(text: str) -> list[tuple[int, str]]:
    """(line number, requirement) of a requirements.txt: comments and blank lines left out.
    Every other line is kept as written, so an option line (``-r other.txt``) is refused by
    the check rather than silently dropped."""
    lines: list[tuple[int, str]] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if line and not line.startswith("#"):
            lines.append((number, line))
    return lines


def parse_requirements_file(text: str) -> list[str]:
    """The requirement lines of a requirements.txt (numbered_lines without the numbers)."""
    return [line for _, line in numbered_lines(text)]


def check_requirements_file(text: str, *, source: str) -> list[str]:
    """A requirements.txt checked line by line with the config's rules (check_requirement):
    the first refused line is named by ``source`` and its line number in the file. Used by
    the API when a config names a snapshot (app.experiments.config) and by the worker before
    it installs (worker.environments), so both refuse the same lines the same way."""
    lines = numbered_lines(text)
    if len(lines) > MAX_REQUIREMENTS:
        raise RequirementRefused(f"{source}: more than {MAX_REQUIREMENTS} requirements")
    for number, line in lines:
        try:
            check_requirement(line)
        except RequirementRefused as exc:
            raise RequirementRefused(f"{source}, line {number}: {exc}") from None
    return [line for _, line in lines]


def normal_form(requirement: str) -> str:
    """One spelling per requirement (the cache key of its environment): the canonical name,
    sorted extras, the specifiers as packaging orders them, the marker."""
    parsed = Requirement(requirement)
    extras = f"[{','.join(sorted(parsed.extras))}]" if parsed.extras else ""
    marker = f"; {parsed.marker}" if parsed.marker is not None else ""
    return f"{canonicalize_name(parsed.name)}{extras}{parsed.specifier}{marker}"
