"""The chat page end to end in headless Chromium (Debian's chromium, driven by Playwright) against a real
`ferry serve`, and the offline /docs page. Outside CI a missing browser skips the browser tests; in CI it
fails them (.ci/run installs chromium)."""

from __future__ import annotations

import io
import os
import re
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from service_client import PLAIN, TOKENS, Server, create, write_repo

CHROMIUM = Path("/usr/bin/chromium")
ADDED_RGB = (204, 255, 216)  # style.css: .d-add
MIGRATED_RGB = (31, 136, 61)  # style.css: .state-finished.status-migrated .badge
WAIT_MS = 240_000


def _missing(why: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"{why}: CI runs the browser tests (.ci/run installs Debian's chromium, the dev extra Playwright)")
    pytest.skip(why)


@pytest.fixture
def page(tmp_path: Path) -> Iterator[Any]:
    """A Chromium page (1400x1100) whose script errors fail the test (an HTTP error the page shows is no
    script error: the browser's own "Failed to load resource" lines are left out)."""
    try:
        from playwright.sync_api import expect, sync_playwright
    except ImportError:
        _missing("playwright is not installed")
    if not CHROMIUM.exists():
        _missing(f"{CHROMIUM} is missing (apt-get install chromium)")
    errors: list[str] = []
    expect.set_options(timeout=WAIT_MS)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        try:
            pg = browser.new_page(viewport={"width": 1400, "height": 1100})
            pg.on("pageerror", lambda exc: errors.append(str(exc)))
            pg.on("console", lambda msg: errors.append(msg.text)
                  if msg.type == "error" and not msg.text.startswith("Failed to load resource") else None)
            pg.set_default_timeout(WAIT_MS)
            yield pg
        finally:
            browser.close()
    assert not errors, errors


def _has_colour(png: Path, rgb: tuple[int, int, int], at_least: int = 50) -> bool:
    import matplotlib.image

    pixels = np.asarray(matplotlib.image.imread(png))[..., :3]
    if pixels.dtype != np.uint8:
        pixels = np.rint(pixels * 255)
    near = np.all(np.abs(pixels.astype(int) - np.array(rgb)) <= 3, axis=-1)
    return int(near.sum()) >= at_least


def _until_ended(page: Any) -> None:
    from playwright.sync_api import expect

    expect(page.locator("#status .badge")).to_contain_text(re.compile(r"^(finished|failed|cancelled)"))


def _sign_in(page: Any, srv: Server) -> None:
    page.goto(f"{srv.url}/")
    page.fill("#token", TOKENS["alice"])
    page.press("#token", "Tab")  # change: kept in localStorage, the list reloaded


@pytest.mark.browser
def test_a_session_from_the_page_streams_is_approved_and_answers(serve, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    roots = tmp_path / "roots"
    repo = write_repo(roots, "prog")
    srv = serve("--allow-root", str(roots))
    _sign_in(page, srv)
    assert page.evaluate("localStorage.getItem('ferry.token')") == TOKENS["alice"]
    page.fill("#path", str(repo))
    page.fill("#run", "python prog.py")
    page.check("#approve-mode")
    page.click("#create")

    # the steps stream in; the float64 edit asks first
    expect(page.locator("#events .ev-step").first).to_be_visible()
    question = page.locator("#events .ev-approval_request")
    expect(question).to_contain_text("float64_to_float32")
    expect(question).to_contain_text("prog.py:7")
    expect(page.locator("#status")).to_contain_text("waiting_for_approval")
    sid = srv.client.get("/v1/sessions").json()["items"][0]["id"]
    expect(page.locator("#sessions li", has_text=sid)).to_be_visible()
    assert page.evaluate("location.hash") == f"#{sid}"
    page.click(".approve")
    _until_ended(page)
    expect(page.locator("#status")).to_contain_text("finished · migrated", timeout=1000)

    # every event the server has, once each, in order
    ids = [int(i) for i in page.locator("#events .event[data-id]").evaluate_all("els => els.map(e => e.dataset.id)")]
    view = srv.client.get(f"/v1/sessions/{sid}").json()
    assert ids == list(range(1, view["counts"]["events"] + 1))
    assert page.locator("#events .ev-approval_answer").inner_text().endswith("approve")

    # the diff: the session's patch, line for line, coloured
    patch = srv.client.get(f"/v1/sessions/{sid}/patch").text
    diff = page.locator("#diff")
    expect(diff).to_contain_text("torch.accelerator.current_accelerator")
    shown = diff.inner_text()
    added = [ln for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln for ln in patch.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert added and removed and all(ln in shown for ln in added + removed)
    assert diff.locator(".d-add").count() == len(added) and diff.locator(".d-del").count() == len(removed)
    assert diff.locator(".d-del .py-kw", has_text="import").count() + diff.locator(".py-str").count() > 0
    shot = tmp_path / "diff.png"
    diff.screenshot(path=str(shot))
    assert _has_colour(shot, ADDED_RGB), "no added-line colour in the diff's screenshot"

    status = page.locator("#status")
    shot = tmp_path / "status.png"
    status.screenshot(path=str(shot))
    assert sid in status.inner_text() and "migrated" in status.inner_text()
    assert _has_colour(shot, MIGRATED_RGB), "no migrated badge in the status's screenshot"

    # the parity table and the findings are the result's
    result = srv.client.get(f"/v1/sessions/{sid}/result").json()
    parity = page.locator("#parity")
    expect(parity).to_contain_text(f"parity: {result['result']['parity']['verdict']}")
    assert parity.locator("tbody tr").count() == len(result["parity_rows"]) > 0
    first = result["parity_rows"][0]
    assert first["key"] in parity.locator("tbody tr").first.inner_text()
    findings = page.locator("#findings")
    for f in result["findings"]:
        expect(findings).to_contain_text(f["suggestion"])
        if f["file"] and f["line"]:
            expect(findings).to_contain_text(f"{f['file']}:{f['line']}")
    if not result["findings"]:
        expect(findings).to_contain_text("no findings")
    assert page.locator("#downloads button[data-what=patch]").is_visible()
    with page.expect_download() as got:
        page.click("#downloads button[data-what=patch]")
    assert Path(got.value.path()).read_text() == patch

    # the chat: a finished session's stream is read again for the message and its reply
    page.fill("#message", "why did you change line 4?")
    page.click("#send")
    expect(page.locator("#events .message")).to_contain_text("why did you change line 4?")
    reply = page.locator("#events .reply")
    expect(reply).to_have_count(1)
    expect(reply).to_contain_text("(explain)")
    expect(reply).to_contain_text("FRY001")  # line 4's .cuda() -> .to(device) is the catalogue codemods' edit
    ids = [int(i) for i in page.locator("#events .event[data-id]").evaluate_all("els => els.map(e => e.dataset.id)")]
    assert ids == list(range(1, srv.client.get(f"/v1/sessions/{sid}").json()["counts"]["events"] + 1))


def _tar_gz(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.browser
def test_an_upload_through_the_page_file_input(serve, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    srv = serve("--workers", "1")
    archive = tmp_path / "plain.tar.gz"
    archive.write_bytes(_tar_gz({"prog.py": PLAIN, "README.md": "a plain program\n"}))
    _sign_in(page, srv)
    page.fill("#run", "python prog.py")
    page.fill("#test", "   ")
    page.set_input_files("#archive", str(archive))
    page.click("#create")
    _until_ended(page)
    expect(page.locator("#status")).to_contain_text("finished · migrated", timeout=1000)
    got = srv.client.get("/v1/sessions").json()["items"]
    assert len(got) == 1 and got[0]["source"]["kind"] == "archive" and got[0]["source"]["files"] == 2
    assert got[0]["options"]["run"] == "python prog.py" and got[0]["options"]["test"] is None
    expect(page.locator("#diff .d-add").first).to_be_visible()
    # a refused create shows the server's reason on the page
    page.fill("#path", "/etc")
    page.click("#create")
    expect(page.locator("#create-error")).to_contain_text("--allow-root")
    # untrusted text stays text: a session's content is never parsed as HTML
    page.evaluate("renderEvent(999, 'reply', {text: '<img src=x onerror=window.pwned=1>', intent: 'x'})")
    assert page.locator("#events .reply img").count() == 0
    assert page.evaluate("window.pwned === undefined")
    # the token went in headers only: never into a URL the server logged
    srv.kill()
    assert TOKENS["alice"].encode() not in srv.log.read_bytes()


def test_docs_and_page_are_served_without_any_external_url(serve, tmp_path: Path) -> None:
    srv: Server = serve()
    c = srv.as_owner(None)
    docs = c.get("/docs")
    assert docs.status_code == 200 and "text/html" in docs.headers["content-type"]
    page = c.get("/")
    assert page.status_code == 200 and 'id="events"' in page.text
    for html in (docs.text, page.text):
        refs = re.findall(r"""(?:src|href|url)\s*[=:(]\s*['"]?([^'" )>]+)""", html)
        assert refs, html
        assert not [r for r in refs if re.match(r"(?i)(https?:)?//", r)], refs
        for ref in refs:
            if ref.startswith("/") and not ref.startswith("/openapi.json"):
                asset = c.get(ref)
                assert asset.status_code == 200 and asset.content, ref
    assert "/static/docs/swagger-ui-bundle.js" in docs.text
    assert c.get("/static/docs/swagger-ui-bundle.js").headers["content-type"].startswith(
        ("application/javascript", "text/javascript"))
    for name in ("app.js", "style.css"):
        text = c.get(f"/static/{name}").text
        assert not re.search(r"(?i)https?://", text), name
    assert c.get("/openapi.json").status_code == 200
    assert c.get("/static/../settings.py").status_code == 404
    # the page is public; the API behind it is not
    assert c.get("/v1/sessions").status_code == 401
    assert create(srv.client, tmp_path).status_code == 400  # no --allow-root: uploads only
