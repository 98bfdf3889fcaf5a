"""The chat page end to end in headless Chromium (Debian's chromium, driven by Playwright) against a real
`ferry serve`, and the offline /docs page. Outside CI a missing browser skips the browser tests; in CI it
fails them (.ci/run installs chromium). Screenshots go to $FERRY_TEST_ARTIFACTS when set, else the test's
tmp_path (docs/service.md)."""

from __future__ import annotations

import io
import os
import re
import shlex
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from service_client import PLAIN, TOKENS, Server, create, read_events, write_repo

CHROMIUM = Path("/usr/bin/chromium")
ADDED_RGB = (204, 255, 216)  # style.css: .d-add
MIGRATED_RGB = (31, 136, 61)  # style.css: .state-finished.status-migrated .badge
WAIT_MS = 240_000


def _artifacts(tmp_path: Path) -> Path:
    """Where screenshots go: $FERRY_TEST_ARTIFACTS (created) when set, else the test's tmp_path."""
    where = Path(os.environ.get("FERRY_TEST_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def _no_null(page: Any) -> None:
    """No "null" or "undefined" written into the page (a value the script failed to leave out)."""
    text = page.locator("body").inner_text()
    assert not re.search(r"\b(null|undefined|NaN|\[object Object\])\b", text), text


def _counts_follow_the_events(page: Any) -> None:
    """The header's counts are the steps, edits and runs the page has received."""
    from playwright.sync_api import expect

    n = {kind: page.locator(f"#events .ev-{kind}").count() for kind in ("step", "edit", "run")}
    plural = {kind: f"{n[kind]} {kind}" + ("" if n[kind] == 1 else "s") for kind in n}
    expect(page.locator("#status .counts")).to_have_text(f"{plural['step']} · {plural['edit']} · {plural['run']}",
                                                         timeout=5000)
    assert n["step"] > 0


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
    page.set_viewport_size({"width": 1280, "height": 1000})  # a laptop: the panes must fit
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
    # a waiting session: nothing reads "null", the counts are the events', the phase and a cancel button show
    _no_null(page)
    _counts_follow_the_events(page)
    expect(page.locator("#status .phase")).to_have_text(re.compile(r"^phase \d+ of 10: "))
    assert page.locator("#status button.cancel").is_visible()
    expect(page.locator(f"#sessions li[data-id='{sid}'] .badge")).to_have_text("waiting_for_approval")
    # another session, opened from the sidebar and cancelled with the header's button: header and sidebar say so
    other = create(srv.client, repo, approve=True).json()["id"]
    page.click("#refresh")
    page.click(f"#sessions li[data-id='{other}'] button.link")
    expect(page.locator("#status .sid")).to_have_text(other)
    page.click("#status button.cancel")
    expect(page.locator("#status .badge")).to_have_text("cancelled")
    expect(page.locator(f"#sessions li[data-id='{other}'] .badge")).to_have_text("cancelled")
    assert srv.client.get(f"/v1/sessions/{other}").json()["state"] == "cancelled"
    assert page.locator("#status button.cancel").count() == 0
    _no_null(page)
    page.click(f"#sessions li[data-id='{sid}'] button.link")
    expect(page.locator("#events .ev-approval_request")).to_have_count(1)
    expect(page.locator("#status .badge")).to_have_text("waiting_for_approval")
    # answered with an edit: the proposal's diff in a text box, sent back as the reviewer's version
    assert not page.locator("#events .editor textarea").is_visible()
    page.click("#events .ev-approval_request button.edit")
    box = page.locator("#events .editor textarea")
    expect(box).to_be_visible()
    proposal = srv.client.get(f"/v1/sessions/{sid}").json()["interrupts"][0]["diff"]
    assert box.input_value() == proposal and ".double()" in proposal
    box.fill(proposal.replace(".float()", ".to(torch.float32)"))
    page.click("#events .editor button.send-edit")
    _until_ended(page)
    expect(page.locator("#status")).to_contain_text("finished · migrated", timeout=1000)
    # the sidebar follows the session's state; the header's counts follow the events; no "null" anywhere
    expect(page.locator(f"#sessions li[data-id='{sid}'] .badge")).to_have_text("finished · migrated", timeout=5000)
    _counts_follow_the_events(page)
    assert page.locator("#status button.cancel").count() == 0
    _no_null(page)
    # each run's command is its argv as a shell would read it back
    runs = [e["data"]["command"] for e in read_events(srv.client, sid) if e["event"] == "run"]
    shown = page.locator("#events .ev-run code.command").all_inner_texts()
    assert shown and shown == [shlex.join(argv) for argv in runs]
    assert all(" " in c for c in shown), shown

    # every event the server has, once each, in order
    ids = [int(i) for i in page.locator("#events .event[data-id]").evaluate_all("els => els.map(e => e.dataset.id)")]
    view = srv.client.get(f"/v1/sessions/{sid}").json()
    assert ids == list(range(1, view["counts"]["events"] + 1))
    assert page.locator("#events .ev-approval_answer").inner_text().endswith("edit (prog.py)")
    assert "to(torch.float32)" in srv.client.get(f"/v1/sessions/{sid}/patch").text

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
    expect(parity.locator(".parity-headline")).to_have_text(result["result"]["parity"]["headline"])
    full = parity.locator("details.parity-all")
    assert full.locator("tbody tr").count() == len(result["parity_rows"]) > 0 and not full.evaluate("d => d.open")
    first = result["parity_rows"][0]
    assert first["key"] in (full.locator("tbody tr").first.text_content() or "")
    assert parity.locator(".parity-notable tbody tr").count() == min(len(result["parity_notable"]), 10) > 0
    # at 1280 px the parity table stays in its pane (a wider table scrolls inside its own box)
    assert parity.evaluate("p => p.scrollWidth <= p.clientWidth")
    for scroller in parity.locator(".table-scroll").all():
        assert scroller.evaluate("s => s.getBoundingClientRect().right <= "
                                 "s.closest('.pane').getBoundingClientRect().right")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shots = _artifacts(tmp_path)
    parity.screenshot(path=str(shots / "session-parity.png"))
    page.screenshot(path=str(shots / "session-finished.png"), full_page=True)
    assert (shots / "session-finished.png").stat().st_size > 0
    # the profile's suggestions are Markdown rendered as the chat's replies: `code` in <code>, no backtick shown
    findings = page.locator("#findings")
    assert result["findings"], "the program's .item() in its loop is a profile finding"
    spans = [code for f in result["findings"] for code in re.findall(r"`([^`]+)`", f["suggestion"])]
    assert spans, [f["suggestion"] for f in result["findings"]]
    expect(findings.locator("li.finding")).to_have_count(len(result["findings"]))
    assert "`" not in findings.inner_text(), findings.inner_text()
    shown_code = findings.locator(".suggestion code").all_inner_texts()
    assert all(code in shown_code for code in spans), (spans, shown_code)
    for f in result["findings"]:
        expect(findings).to_contain_text(f["suggestion"].replace("`", ""))
        if f["file"] and f["line"]:
            expect(findings).to_contain_text(f"{f['file']}:{f['line']}")
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
    _no_null(page)
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
    sid = got[0]["id"]

    # the chat's Markdown is formatted: the help reply's bold words and code, not ** and backticks
    # the answer to a message comes late (1.5 s): what is typed meanwhile is kept for the next send
    page.evaluate("""() => { const plain = window.plainFetch = window.fetch; window.fetch = async (url, init) => {
      const resp = await plain(url, init);
      if (String(url).endsWith('/messages') && init && init.method === 'POST') {
        await new Promise((r) => setTimeout(r, 1500)); }
      return resp; }; }""")
    page.fill("#message", "help")
    page.click("#send")
    page.fill("#message", "try again")
    expect(page.locator("#send")).to_be_enabled(timeout=30_000)
    expect(page.locator("#message")).to_have_value("try again", timeout=1000)
    page.evaluate("() => { window.fetch = window.plainFetch; }")
    reply = page.locator("#events .reply .md").last
    expect(reply.locator("li").first).to_be_visible()
    assert reply.locator("strong", has_text="retry").count() == 1
    assert reply.locator("code", has_text="try again").count() == 1
    assert "**" not in reply.inner_text() and "`" not in reply.inner_text()

    # a new attempt: at the moment its event arrives, attempt 1's diff, parity and downloads are gone
    assert page.locator("#downloads button").count() == 4 and page.locator("#parity .parity-headline").count() == 1
    page.evaluate("""() => { window.atAttempt = null; new MutationObserver((_, obs) => {
      if (!document.querySelector('#events .ev-attempt')) return;
      window.atAttempt = { downloads: document.querySelectorAll('#downloads button').length,
        diff: document.querySelector('#diff').textContent, parity: document.querySelector('#parity').textContent,
        counts: document.querySelector('#status .counts').textContent };
      obs.disconnect(); }).observe(document.querySelector('#events'), { childList: true }); }""")
    steps_before = page.locator("#events .ev-step").count()
    page.click("#send")
    expect(page.locator("#events .ev-attempt")).to_have_text(re.compile(r"attempt\s*attempt 2 queued: retry"))
    at = page.evaluate("window.atAttempt")
    assert at == {"downloads": 0, "diff": "", "parity": "", "counts": at["counts"]}, at
    expect(page.locator("#status")).to_contain_text("attempt 2")
    _until_ended(page)
    expect(page.locator("#status")).to_contain_text("finished · migrated", timeout=1000)
    # attempt 2's own result, counts that include its steps, the sidebar up to date
    expect(page.locator("#downloads button")).to_have_count(4)
    expect(page.locator("#diff .d-add").first).to_be_visible()
    assert page.locator("#events .ev-step").count() > steps_before
    _counts_follow_the_events(page)
    expect(page.locator(f"#sessions li[data-id='{sid}'] .badge")).to_have_text("finished · migrated", timeout=5000)
    _no_null(page)
    view = srv.client.get(f"/v1/sessions/{sid}").json()
    assert view["attempt"] == 2 and view["counts"]["steps"] == page.locator("#events .ev-step").count()

    # a refused create shows the server's reason on the page
    page.fill("#path", "/etc")
    page.click("#create")
    expect(page.locator("#create-error")).to_contain_text("--allow-root")
    # untrusted text stays text: a session's content is never parsed as HTML
    page.evaluate("renderEvent(999, 'reply', {text: '<img src=x onerror=window.pwned=1>', intent: 'x'})")
    assert page.locator("#events .reply img").count() == 0
    assert page.evaluate("window.pwned === undefined")
    # Markdown too: formatted, every piece of text escaped, links only to https or this server
    md = ("## Why `x` <b>moved</b>\n\nThe **codemod** *FRY001* changed `<script>` in [docs](docs/idioms.md#fry001), "
          "[bad](javascript:alert(1)) and [site](https://example.org/a).\n\n- one `a|b`\n- **two**\n\n"
          "1. first\n2. second\n\n| rule | sites |\n|---|---|\n| FRY001 | <i>2</i> |\n\n"
          "```diff\n--- a/prog.py\n+++ b/prog.py\n@@ -1 +1 @@\n-x.cuda()\n+x.to(device)\n```\n"
          "```\n<img src=x onerror=window.pwned=2>\n```")
    page.evaluate("t => renderEvent(1000, 'reply', {text: t, intent: 'explain'})", md)
    out = page.locator("#events .reply[data-id='1000'] .md")
    assert out.locator("h4").inner_text() == "Why x <b>moved</b>" and out.locator("h4 code").inner_text() == "x"
    assert out.locator("p strong").inner_text() == "codemod" and out.locator("p em").inner_text() == "FRY001"
    assert out.locator("p code").first.inner_text() == "<script>"
    assert out.locator("a").evaluate_all("as => as.map(a => [a.textContent, a.getAttribute('href')])") == [
        ["docs", "docs/idioms.md#fry001"], ["site", "https://example.org/a"]]
    assert "[bad](javascript:alert(1))" in out.inner_text()
    assert out.locator("ul > li").all_inner_texts() == ["one a|b", "two"]
    assert out.locator("ol > li").all_inner_texts() == ["first", "second"]
    assert out.locator("table th").all_inner_texts() == ["rule", "sites"]
    assert out.locator("table td").all_inner_texts() == ["FRY001", "<i>2</i>"]
    assert out.locator("pre.diff .d-add").inner_text() == "+x.to(device)"
    assert out.locator("pre.diff .d-del").inner_text() == "-x.cuda()"
    assert "<img src=x onerror=window.pwned=2>" in out.locator("pre").last.inner_text()
    assert out.locator("script, img, b, i").count() == 0 and page.evaluate("window.pwned === undefined")
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
    spec = c.get("/openapi.json")
    assert spec.status_code == 200 and spec.json()["openapi"].startswith("3.1")
    # every $ref in the document resolves (Swagger UI shows a resolver error over the page otherwise)
    refs = set(re.findall(r'"\$ref":\s*"#/components/schemas/([^"]+)"', spec.text))
    assert "SessionCreate" in refs and refs <= set(spec.json()["components"]["schemas"]), refs
    assert c.get("/static/../settings.py").status_code == 404
    # the page is public; the API behind it is not
    assert c.get("/v1/sessions").status_code == 401
    assert create(srv.client, tmp_path).status_code == 400  # no --allow-root: uploads only


def _parity_result() -> dict[str, Any]:
    """What GET /result gives the page for a passing parity of 40 module tensors and a loss curve, built with
    the models and functions the service uses (no migration run)."""
    from agent.migration.render import notable_rows, parity_outcome
    from tools.parity.models import ParityReport, TensorComparison
    from tools.parity.tolerances import Tolerances
    from tools.parity.verdicts import TensorMetrics

    tol = Tolerances(dtype="float32", rtol=1.3e-6, atol=1e-5, floor=1e-6)

    def row(key: str, kind: str, max_abs: float) -> TensorComparison:
        return TensorComparison(
            key=key, kind=kind, verdict="pass", tier="assert_close", reason="within assert_close", ref_shape=[16, 64],
            target_shape=[16, 64], ref_dtype="float32", target_dtype="float32", target_device="tpx:0", tolerances=tol,
            metrics=TensorMetrics(numel=1024, max_abs=max_abs, max_rel=max_abs * 10, cosine=1.0, rmse=max_abs / 4,
                                  nonfinite_mismatch=0, assert_close_ok=True))

    tensors = [row(f"TransformerEncoderDecoder.blocks.{i // 8}.attention.out_projection_with_a_long_name#{i % 4}:out",
                   "module_output", 1e-7 * (i + 1)) for i in range(40)]
    report = ParityReport(verdict="pass", summary="parity passes", ref_dir="r", target_dir="t",
                          counts={"pass": 41}, modules=[], tensors=tensors,
                          scalars=[row("scalar:loss", "scalar", 2e-6)])
    return {"result": {"parity": parity_outcome(report).model_dump(mode="json")},
            "parity_rows": [t.model_dump(mode="json") for t in report.rows()],
            "parity_notable": [t.model_dump(mode="json") for t in notable_rows(report)]}


@pytest.mark.browser
def test_parity_diff_and_docs_fit_and_render_at_1280(serve, page, tmp_path: Path) -> None:
    from playwright.sync_api import expect

    result = _parity_result()
    srv: Server = serve()
    page.set_viewport_size({"width": 1280, "height": 1000})
    page.goto(f"{srv.url}/")
    page.evaluate("r => showParity(r)", result)
    page.set_default_timeout(5000)  # the page is drawn already: nothing to wait for
    parity = page.locator("#parity")
    headline = parity.locator(".parity-headline")
    # one line first: the result's headline, as report.md shows it
    assert headline.inner_text() == result["result"]["parity"]["headline"]
    assert headline.inner_text().startswith("parity: pass, 41 tensors, worst max abs 4e-06")
    # then the worst rows only (nothing fails), the largest first
    notable = parity.locator(".parity-notable tbody tr")
    assert notable.count() == len(result["parity_notable"]) == 5
    assert result["parity_notable"][0]["key"] in notable.first.inner_text()
    assert parity.locator("h3").inner_text().startswith("The worst tensors")
    # then every row, folded: closed until opened, and its rows are not shown
    full = parity.locator("details.parity-all")
    assert full.count() == 1 and not full.evaluate("d => d.open")
    assert full.locator("summary").inner_text() == "All 41 compared tensors"
    assert full.locator("tbody tr").count() == 41 and not full.locator("tbody tr").first.is_visible()
    # the shown rows fit the pane at 1280 px: every column (the verdict too) inside it, nothing to scroll
    pane_right = parity.evaluate("p => p.closest('.pane').getBoundingClientRect().right")
    assert parity.evaluate("p => p.scrollWidth <= p.clientWidth")
    notable_box = parity.locator(".parity-notable .table-scroll")
    assert notable_box.evaluate("s => s.scrollWidth <= s.clientWidth")
    assert parity.locator(".parity-notable td.verdict").first.evaluate("c => c.getBoundingClientRect().right") \
        <= pane_right
    # opened, the full table stays in its pane too (scrolling sideways inside its own box if it must)
    full.locator("summary").click()
    assert full.locator("tbody tr").first.is_visible()
    scroller = full.locator(".table-scroll")
    assert scroller.evaluate("s => s.getBoundingClientRect().right") <= pane_right
    assert parity.evaluate("p => p.scrollWidth <= p.clientWidth")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    shots = _artifacts(tmp_path)
    page.locator("#parity").screenshot(path=str(shots / "parity-open.png"))
    full.locator("summary").click()
    page.locator("#parity").screenshot(path=str(shots / "parity.png"))

    # a long diff line scrolls sideways inside the diff box, which stays in its pane
    long_line = "+    value = " + " + ".join(f"term_{i}" for i in range(80))
    page.evaluate("t => showDiffs(t)", f"--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-    value = 0\n{long_line}\n")
    diff = page.locator("#diff")
    assert diff.evaluate("d => d.scrollWidth > d.clientWidth && getComputedStyle(d).overflowX === 'auto'")
    assert diff.evaluate("d => d.getBoundingClientRect().right <= d.closest('.pane').getBoundingClientRect().right")
    diff.evaluate("d => { d.scrollLeft = d.scrollWidth; }")
    assert diff.evaluate("d => d.scrollLeft > 0")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # /docs: Swagger UI renders the OpenAPI 3.1 document offline: operations, each with "Try it out"
    page.goto(f"{srv.url}/docs")
    operation = page.locator(".opblock", has_text="/v1/sessions").first
    expect(operation).to_be_visible(timeout=30_000)
    assert page.locator(".opblock").count() >= 5
    operation.locator(".opblock-summary").first.click()
    expect(operation.locator("button.try-out__btn")).to_be_visible()
    assert page.locator("text=Unable to render this definition").count() == 0
    assert page.locator(".errors-wrapper").count() == 0, page.locator(".errors-wrapper").all_inner_texts()
    page.screenshot(path=str(shots / "docs.png"))


def test_the_eval_report_renders_fits_and_is_screenshotted(page, tmp_path: Path) -> None:
    """report.html as a team opens it: its summary, grade bars and case table within 1280 px, each case's
    patch link reachable; a screenshot goes to the artifacts."""
    from evals import report
    from evals.results import CaseResult

    out = tmp_path / "run"
    results = []
    for name, grade in (("mlp_training", "resolved"), ("vae", "resolved"), ("scientific_float64", "partial")):
        (out / name).mkdir(parents=True)
        (out / name / "ferry.patch").write_text("diff --git a/train.py b/train.py\n")
        (out / name / "report.md").write_text("# report\n")
        results.append(CaseResult.model_validate({
            "suite": "synthetic", "name": name, "kind": "synthetic", "expected_status": "migrated",
            "status": "migrated" if grade == "resolved" else "partial", "grade": grade, "out_dir": name,
            "wall_s": 20.0, "own_run_s": 5.0, "ratio": 4.0, "iterations": 1, "runs": 4, "parity_passed": True,
            "tests": {"fail_to_pass": {"g::a": "passed"}, "pass_to_pass": {"t::b": "passed"}}}))
    html = report.write_reports(results, out, "synthetic")["report"]
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(html.as_uri())
    assert "Resolved\t2/3 (67%)" in page.locator("#summary").inner_text()
    widths = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert widths[0] <= widths[1], widths  # nothing wider than the window
    resolved = page.locator("span.bar[data-grade='resolved']").bounding_box()
    partial = page.locator("span.bar[data-grade='partial']").bounding_box()
    assert resolved and partial and resolved["width"] > 1.5 * partial["width"]
    link = page.locator("#cases a", has_text="patch").first
    assert (out / (link.get_attribute("href") or "")).is_file()
    page.screenshot(path=str(_artifacts(tmp_path) / "eval-report.png"), full_page=True)
