"""The front-end is ES modules the browser loads as they are (docs/ui.md): every script a
template loads from /static/ is a module, every import between them names a file that is
there, and no module sets a global. Read from the files (no server, no Node): a broken import
path would otherwise show only as a blank page part in the browser tests."""

from __future__ import annotations

import re
from pathlib import Path

from app.static_files import STATIC_DIR

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
SCRIPT = re.compile(r"<script\b([^>]*)>")
IMPORT = re.compile(
    r"""^\s*(?:import|export)\b[^"']*?from\s+["']([^"']+)["']|^\s*import\s+["']([^"']+)["']""", re.M
)


def _modules() -> list[Path]:
    return sorted(STATIC_DIR.rglob("*.js"))


def test_every_static_script_of_a_template_is_a_module_that_exists() -> None:
    loaded = []
    for template in sorted(TEMPLATES.glob("*.html")):
        for attrs in SCRIPT.findall(template.read_text()):
            src = re.search(r'src="/static/([^"]+)"', attrs)
            if not src:
                continue
            loaded.append(src.group(1))
            assert 'type="module"' in attrs, f"{template.name}: {attrs}"
            assert (STATIC_DIR / src.group(1)).is_file(), f"{template.name}: {src.group(1)}"
    assert "run.js" in loaded and "common.js" in loaded


def test_every_import_names_a_module_that_is_there() -> None:
    for module in _modules():
        for match in IMPORT.finditer(module.read_text()):
            target = match.group(1) or match.group(2)
            assert target.startswith("./") or target.startswith("../"), f"{module}: {target}"
            resolved = (module.parent / target).resolve()
            assert resolved.is_file(), f"{module.relative_to(STATIC_DIR)} imports {target}"
            assert STATIC_DIR in resolved.parents, f"{module}: {target} is outside app/static"


def test_no_module_sets_a_global() -> None:
    for module in _modules():
        text = module.read_text()
        assert not re.search(r"\bwindow\.\w+\s*=(?!=)", text), module
        assert "globalThis." not in text.replace("globalThis.EventSource", ""), module
