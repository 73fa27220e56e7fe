"""The new-experiment page's code upload: the tar the browser writes (app/static/code_pack.js)
read back by Python's tarfile, and a picked folder or .zip packed, uploaded to /api/code and
sent as the config's `code`, with the script picked from the snapshot's files.

Where the server has no `POST /api/code` yet (the code helper's branch builds it), the page's
request is answered by its contract (201 with the sha256 of the bytes received); the bytes the
browser sent are checked the same way either way."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import re
import tarfile
import zipfile
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Dialog, Page, Request, Route, expect

pytestmark = [pytest.mark.slow, pytest.mark.browser]

LONG_DIR = "a" * 60 + "/" + "b" * 60  # over ustar's 100 bytes: the prefix field holds it
LONG_NAME = "c" * 130 + ".py"  # one component over 100 bytes: a PAX record


def tar_gz_members(data: bytes) -> dict[str, tuple[tarfile.TarInfo, bytes]]:
    found = {}
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            f = tar.extractfile(member)
            found[member.name] = (member, f.read() if f else b"")
    return found


def test_the_browsers_tar_is_read_by_pythons_tarfile(admin_page: Page) -> None:
    page = admin_page
    page.goto("/experiments/new")
    encoded = page.evaluate(
        """async ([longDir, longName]) => {
            const text = (s) => new Blob([s]);
            const bytes = new Uint8Array(1500);
            for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7) % 256;
            const entries = [
                {name: "empty.txt", blob: text("")},
                {name: "pkg/helper.py", blob: text("X = 1\\n")},
                {name: "run.sh", blob: text("#!/bin/sh\\n"), mode: 0o755},
                {name: "weights.bin", blob: new Blob([bytes])},
                {name: "données/é.txt", blob: text("accents\\n")},
                {name: longDir + "/deep.py", blob: text("deep\\n")},
                {name: longName, blob: text("long\\n")},
            ];
            const {gzipBlob, tarBlob} = await import("/static/code_pack.js");
            const gz = await gzipBlob(tarBlob(entries));
            const raw = new Uint8Array(await gz.arrayBuffer());
            let s = "";
            for (const b of raw) s += String.fromCharCode(b);
            return btoa(s);
        }""",
        [LONG_DIR, LONG_NAME],
    )
    data = base64.b64decode(encoded)
    assert data[:2] == b"\x1f\x8b"
    gzip.decompress(data)  # a whole gzip stream
    members = tar_gz_members(data)
    assert sorted(members) == sorted(
        [
            "empty.txt",
            "pkg/helper.py",
            "run.sh",
            "weights.bin",
            "données/é.txt",
            f"{LONG_DIR}/deep.py",
            LONG_NAME,
        ]
    )
    assert members["pkg/helper.py"][1] == b"X = 1\n"
    assert members["weights.bin"][1] == bytes((i * 7) % 256 for i in range(1500))
    assert members["empty.txt"][1] == b""
    assert members["données/é.txt"][1] == b"accents\n"
    assert members[f"{LONG_DIR}/deep.py"][1] == b"deep\n"
    assert members[LONG_NAME][1] == b"long\n"
    assert members["run.sh"][0].mode == 0o755 and members["empty.txt"][0].mode == 0o644
    for info, _ in members.values():
        assert info.isreg() and info.mtime == 0 and info.uid == 0 and info.gid == 0


class CodeEndpoint:
    """Records what the page POSTs to /api/code; answers it by the contract when the server
    under test does not have the route yet."""

    def __init__(self, page: Page, api: httpx.Client) -> None:
        self.uploads: list[bytes] = []
        probe = api.post("/api/code", files={"file": ("x.tar.gz", b"")})
        self.stand_in = probe.status_code in (404, 405)
        # Routed either way: a request event carries no blob-backed body, a routed one does.
        page.route("**/api/code", self._handle)

    def _handle(self, route: Route) -> None:
        data = file_field(route.request)
        self.uploads.append(data)
        if not self.stand_in:
            route.continue_()
            return
        digest = "sha256:" + hashlib.sha256(data).hexdigest()
        route.fulfill(status=201, json={"digest": digest, "size_bytes": len(data)})


def file_field(request: Request) -> bytes:
    body = request.post_data_buffer or b""
    boundary = request.headers["content-type"].split("boundary=")[1].encode()
    for part in body.split(b"--" + boundary):
        head, _, data = part.partition(b"\r\n\r\n")
        if b'name="file"' in head:
            return data.removesuffix(b"\r\n")
    raise AssertionError("no `file` field in the upload")


def make_project(root: Path) -> Path:
    for d in (".git", "__pycache__", ".venv/lib", "pkg", "data"):
        (root / d).mkdir(parents=True)
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "__pycache__" / "train.cpython-311.pyc").write_bytes(b"\0")
    (root / ".venv" / "pyvenv.cfg").write_text("home = /usr/bin\n")
    (root / ".venv" / "lib" / "site.py").write_text("x = 1\n")
    (root / "train.py").write_text("import pkg.helper\nprint(open('data/x.txt').read())\n")
    (root / "pkg" / "helper.py").write_text("X = 1\n")
    (root / "data" / "x.txt").write_text("hello\n")
    return root


def submit_and_read_config(page: Page, name: str) -> dict:
    page.fill("input[name=name]", name)
    with page.expect_request(
        lambda r: r.url.endswith("/api/experiments") and r.method == "POST"
    ) as created:
        page.click("#create-and-launch")
    body = created.value.post_data_json
    assert isinstance(body, dict)
    return dict(body["config"])


def test_a_picked_folder_is_packed_uploaded_and_sent_as_the_configs_code(
    admin_page: Page, api: httpx.Client, tmp_path: Path
) -> None:
    page = admin_page
    endpoint = CodeEndpoint(page, api)
    page.goto("/experiments/new")
    page.select_option("select[name=recipe]", "__script__")
    page.set_input_files("#code-folder", str(make_project(tmp_path / "proj")))
    expect(page.locator("#code-field")).to_have_attribute("data-state", "uploaded")

    assert len(endpoint.uploads) == 1
    members = tar_gz_members(endpoint.uploads[0])
    assert sorted(members) == ["data/x.txt", "pkg/helper.py", "train.py"]
    assert members["data/x.txt"][1] == b"hello\n"
    digest = "sha256:" + hashlib.sha256(endpoint.uploads[0]).hexdigest()
    expect(page.locator("#code-status")).to_contain_text(digest)
    assert page.input_value("#code") == digest
    left_out = page.locator("#code-left-out li").all_text_contents()
    assert sorted(item.split(":")[0] for item in left_out) == [".git/", ".venv/", "__pycache__/"]

    # The script is now a pick from the snapshot's Python files, train.py first choice.
    pick = page.locator("select#script-pick")
    expect(pick).to_be_visible()
    assert pick.locator("option").all_inner_texts() == ["pkg/helper.py", "train.py"]
    assert page.input_value("select#script-pick") == "train.py"
    config = submit_and_read_config(page, "browser-code-folder")
    assert config["code"] == digest and config["script"] == "train.py"
    # The form goes on to the new run's page once its POST answers: waited for here, or that
    # navigation can land after the goto below and take its place (CI, on a loaded box: the
    # new-experiment form never came and its recipe select timed out).
    page.wait_for_url(re.compile(r"/runs/\d+$"))

    # "Use the workspace instead" drops the snapshot: a free script field again, no code.
    page.goto("/experiments/new")
    page.select_option("select[name=recipe]", "__script__")
    page.set_input_files("#code-folder", str(tmp_path / "proj"))
    expect(page.locator("#code-field")).to_have_attribute("data-state", "uploaded")
    assert endpoint.uploads[-1] == endpoint.uploads[0]  # same folder, same bytes
    page.click("#code-clear")
    expect(page.locator("input#script")).to_be_visible()
    assert page.input_value("#code") == ""
    page.fill("input#script", "form/train.py")
    config = submit_and_read_config(page, "browser-code-cleared")
    assert "code" not in config and config["script"] == "form/train.py"


def test_a_zip_is_repacked_as_a_tar_gz_with_its_folder_as_the_root(
    admin_page: Page, api: httpx.Client, tmp_path: Path
) -> None:
    archive = tmp_path / "proj.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("proj/", "")
        z.writestr("proj/train.py", "print('zip')\n" * 50, compress_type=zipfile.ZIP_DEFLATED)
        z.writestr("proj/pkg/helper.py", "X = 2\n", compress_type=zipfile.ZIP_STORED)
        z.writestr("__MACOSX/proj/._train.py", "junk")
    page = admin_page
    endpoint = CodeEndpoint(page, api)
    page.goto("/experiments/new")
    page.select_option("select[name=recipe]", "__script__")
    page.set_input_files("#code-archive", str(archive))
    expect(page.locator("#code-field")).to_have_attribute("data-state", "uploaded")
    members = tar_gz_members(endpoint.uploads[-1])
    assert sorted(members) == ["pkg/helper.py", "train.py"]
    assert members["train.py"][1] == b"print('zip')\n" * 50
    assert members["pkg/helper.py"][1] == b"X = 2\n"


def test_a_tar_gz_is_sent_as_it_is_and_listed_for_the_script_pick(
    admin_page: Page, api: httpx.Client, tmp_path: Path
) -> None:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, text in (("main.py", b"print(1)\n"), (LONG_NAME, b"x\n"), ("README", b"r\n")):
            info = tarfile.TarInfo(name)
            info.size = len(text)
            tar.addfile(info, io.BytesIO(text))
    archive = tmp_path / "code.tar.gz"
    archive.write_bytes(buffer.getvalue())
    page = admin_page
    endpoint = CodeEndpoint(page, api)
    page.goto("/experiments/new")
    page.select_option("select[name=recipe]", "__script__")
    page.set_input_files("#code-archive", str(archive))
    expect(page.locator("#code-field")).to_have_attribute("data-state", "uploaded")
    assert endpoint.uploads[-1] == archive.read_bytes()
    options = page.locator("select#script-pick option").all_inner_texts()
    assert options == sorted([LONG_NAME, "main.py"])
    assert page.input_value("select#script-pick") == "main.py"


def test_a_script_naming_a_file_left_out_for_its_size_is_said_and_asked_before_launch(
    admin_page: Page, api: httpx.Client, tmp_path: Path
) -> None:
    # issue 41: a 200 MB file left out was only in a collapsed notice, and the run launched
    root = tmp_path / "big"
    root.mkdir()
    (root / "train.py").write_text("import torch\nstate = torch.load('weights.bin')\n")
    (root / "other.py").write_text("print('no data')\n")
    with (root / "weights.bin").open("wb") as f:
        f.truncate(51 * 1024 * 1024)  # over the 50 MiB per-file limit
    page = admin_page
    CodeEndpoint(page, api)
    page.goto("/experiments/new")
    page.select_option("select[name=recipe]", "__script__")
    page.set_input_files("#code-folder", str(root))
    expect(page.locator("#code-field")).to_have_attribute("data-state", "uploaded")
    needs = page.locator("#code-needs")
    expect(needs).to_be_visible()
    expect(needs).to_contain_text("train.py names weights.bin (51.0 MiB, over the per-file limit")
    expect(needs).to_contain_text("the run will not find it")
    expect(page.locator("#code-left-out")).to_have_attribute("open", "")

    # Sent: the page asks first; dismissed, nothing is created.
    page.fill("input[name=name]", "browser-code-needs")
    asked: list[str] = []

    def dismiss(dialog: Dialog) -> None:
        asked.append(dialog.message)
        dialog.dismiss()

    page.once("dialog", dismiss)
    posts: list[str] = []

    def sent(request: Request) -> None:
        if request.method == "POST":
            posts.append(request.url)

    page.on("request", sent)
    page.click("#create-and-launch")
    expect(page.locator("#create-and-launch")).to_be_enabled()
    assert asked and "needs weights.bin" in asked[0] and "Launch anyway?" in asked[0]
    assert not [u for u in posts if u.endswith("/api/experiments")]

    # Another script that names no such file: no warning, no question.
    page.select_option("select#script-pick", "other.py")
    expect(needs).to_be_hidden()
    page.once("dialog", dismiss)
    config = submit_and_read_config(page, "browser-code-no-needs")
    assert config["script"] == "other.py" and len(asked) == 1
