"""Parsed artifacts are untrusted input: forged profile.json / index.json / junit XML / redirect log
end in a clear error or note (never a traceback, a KeyError or a path outside the run's dir), and
run-derived text is escaped where it lands (Markdown reports, the terminal)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch

from tools.parity.check import result_text
from tools.parity.compare import compare_dumps
from tools.parity.models import CheckResult, RunSummary
from tools.parity.render import chart_png, markdown_report
from tools.probe.child import probe_session
from tools.probe.dump import DumpError, ProbeDump
from tools.profile.report import ProfileError, build_profile_report
from tools.redirect.log import RedirectLogError, load_redirect_log
from tools.textsafe import html, md_code, md_inline, terminal
from tools.trace.pytest_out import JunitRefused, parse_junit_xml, read_junit_xml

SECRET = "host-secret-91b2"
HOSTILE = "a|b`<script>\x1b]52;c;SGVsbG8=\x07x\x1b[2J\r\x9b31m"


def _profile_doc(**over) -> dict:
    doc = {
        "format": "ferry-profile/1", "repo_root": "/ws", "config": {}, "steps_seen": 3,
        "window": {"start_step": 1, "end_step": 3, "wall_s": 0.5, "steps": 2},
        "ops": [{"op": "aten::mm", "count": 4, "self_cpu_us": 10.0, "cpu_total_us": 12.0, "device_us": 0.0}],
        "syncs": [], "tpx": None, "tpx_window": None, "dynamo": {"counters": {}, "events": []},
        "matmul_precision": "highest", "trace": None,
    }
    doc.update(over)
    return doc


def _write_profile(d: Path, doc: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "profile.json").write_text(json.dumps(doc))
    return d


@pytest.fixture
def secret(tmp_path: Path) -> Path:
    p = tmp_path / "host" / "shadow.json"
    p.parent.mkdir()
    p.write_text(json.dumps({"traceEvents": [SECRET]}))
    p.chmod(0o600)
    return p


@pytest.mark.parametrize("field, value, needle", [
    ("ops", "not a list", "ops: Input should be a valid list"),
    ("ops", [{"op": "aten::mm"}], "ops.0.count: Field required"),
    ("window", {"steps": 10**30}, "window.steps: Input should be less than or equal to"),
    ("syncs", [{"category": "d2h_sync", "kind": "item", "file": "a.py", "line": -1, "count": 1}], "syncs.0.line"),
    ("tpx", {"ops": [{"op": "x", "time_s": "NaN"}]}, "tpx.ops.0.time_s"),
    ("dynamo", {"events": [{"kind": "graph_break"}]}, "dynamo.events.0.message: Field required"),
])
def test_a_forged_profile_json_is_a_clear_error(tmp_path: Path, field: str, value, needle: str):
    d = _write_profile(tmp_path / "p", _profile_doc(**{field: value}))
    with pytest.raises(ProfileError) as exc:
        build_profile_report(d, tmp_path)
    assert "profile.json is not what Ferry writes" in str(exc.value) and needle in str(exc.value)
    assert not (d / "profile.md").exists()


@pytest.mark.parametrize("trace", ["../host/shadow.json", "/etc/shadow", "..", "a/../../host/shadow.json"])
def test_a_trace_outside_the_profile_dir_is_refused(tmp_path: Path, secret: Path, trace: str):
    d = _write_profile(tmp_path / "p", _profile_doc(trace=trace))
    with pytest.raises(ProfileError, match="trace must be a plain file name inside the profile directory"):
        build_profile_report(d, tmp_path)


def test_a_trace_that_is_a_link_or_missing_is_left_out_with_a_note(tmp_path: Path, secret: Path):
    d = _write_profile(tmp_path / "p", _profile_doc(trace="trace.json"))
    (d / "trace.json").symlink_to(secret)
    report = build_profile_report(d, tmp_path)
    assert report.trace_path is None
    assert any("trace file 'trace.json'" in n for n in report.notes)
    assert SECRET not in report.model_dump_json() and SECRET not in Path(report.markdown_path).read_text()


def test_bad_json_and_huge_numbers_are_clear_errors(tmp_path: Path):
    d = tmp_path / "p"
    d.mkdir()
    for text, needle in (('{"ops": [', "profile.json is not valid JSON"),
                         ('{"steps_seen": ' + "9" * 5000 + "}", "profile.json is not valid JSON"),
                         ("[" * 100_000, "profile.json is not valid JSON")):
        (d / "profile.json").write_text(text)
        with pytest.raises(ProfileError, match=needle):
            build_profile_report(d, tmp_path)


def test_a_profile_with_a_flood_of_distinct_events_is_read_in_linear_time(tmp_path: Path):
    """The run chooses how many events profile.json holds (millions fit in the file cap): merging
    graph breaks and matching fallback ops to sync sites must not scan what was seen before (25 000
    distinct graph breaks took over a minute that way), and the report lists the most urgent only."""
    import time

    n = 25_000
    doc = _profile_doc(
        dynamo={"counters": {}, "events": [{"kind": "graph_break", "message": f"break {i}"} for i in range(n)]},
        syncs=[{"category": "d2h_sync", "kind": f"op{i}", "file": "a.py", "line": i, "count": 1} for i in range(2000)],
        tpx={"ops": [{"op": f"aten::op{i}", "count": 1, "time_s": 0.001, "fallback_calls": 1} for i in range(2000)],
             "fallback_ops": [f"aten::other{i}" for i in range(2000)]})
    d = _write_profile(tmp_path / "p", doc)
    t0 = time.monotonic()
    report = build_profile_report(d, tmp_path)
    took = time.monotonic() - t0
    assert took < 20, f"build_profile_report took {took:.0f} s for {n} graph breaks"
    assert sum(g.count for g in report.graph_breaks) == n and len(report.graph_breaks) == n
    assert len(report.findings) == 200  # tools.profile.report.MAX_FINDINGS
    assert any("more findings of lower rank are left out" in note for note in report.notes)
    assert Path(report.markdown_path).stat().st_size < 1024**2


def test_profile_md_goes_where_asked_and_never_through_a_planted_link(tmp_path: Path, secret: Path):
    d = _write_profile(tmp_path / "p", _profile_doc())
    (d / "profile.md").symlink_to(secret)
    report = build_profile_report(d, tmp_path)
    assert json.loads(secret.read_text()) == {"traceEvents": [SECRET]}  # not written through the link
    assert Path(report.markdown_path) == d / "profile.md" and not (d / "profile.md").is_symlink()
    elsewhere = tmp_path / "reports"
    elsewhere.mkdir()
    report = build_profile_report(d, tmp_path, report_dir=elsewhere)
    assert Path(report.markdown_path) == elsewhere / "profile.md"


def _table_cells(line: str) -> int:
    return len(re.findall(r"(?<!\\)\|", line)) - 1


def _outside_code(line: str) -> str:
    """The line without backslash escapes and code spans: what Markdown would interpret."""
    return re.sub(r"(`+)(.+?)\1", "", re.sub(r"\\.", "", line))


def test_hostile_names_are_escaped_in_the_profile_markdown(tmp_path: Path):
    doc = _profile_doc(
        ops=[{"op": HOSTILE, "count": 1, "self_cpu_us": 5.0}],
        syncs=[{"category": "d2h_sync", "kind": HOSTILE, "file": f"x{HOSTILE}.py", "line": 3, "source": HOSTILE,
                "count": 12}],
    )
    report = build_profile_report(_write_profile(tmp_path / "p", doc), tmp_path)
    md = Path(report.markdown_path).read_text()
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", md)
    for line in md.splitlines():
        assert "<script>" not in _outside_code(line), line  # only literally, inside code spans
        if line.startswith("| ") and "---" not in line:
            assert _table_cells(line) == 4, line  # a `|` in a name does not add a column
    assert any(HOSTILE.split("\x1b")[0].replace("|", "\\|") in line for line in md.splitlines())


def test_text_escaping_helpers():
    assert terminal(HOSTILE) == "a|b`<script>x\n"
    assert terminal("progress 10%\r20%\r\nok\ttab\x00\u202eevil") == "progress 10%\n20%\nok\ttabevil"
    assert md_inline(HOSTILE) == r"a\|b\`\<script\>x "
    assert md_inline("see `aten::nonzero` then") == r"see \`aten::nonzero\` then"
    assert md_inline("see `aten::nonzero` then", keep_code=True) == "see `aten::nonzero` then"
    assert md_inline("see `aten::nonzero` [x](http://e)", keep_code=True) == r"see `aten::nonzero` \[x\](http://e)"
    assert md_inline("odd `one", keep_code=True) == r"odd \`one"
    assert md_code("a`b|c", table=True) == "``a`b\\|c``" and md_code("`") == "`` ` ``"
    assert html('<a href="x">&') == "&lt;a href=&quot;x&quot;&gt;&amp;"


def test_markdown_entities_in_run_text_render_literally():
    """md_inline left '&' alone: a named entity in a run's text (&rlm;, &NewLine;) rendered as the
    bidi mark or line break that terminal() had stripped from the raw characters."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark")
    for text in ("a&rlm;b", "x&lrm;&NewLine;y", "&ZeroWidthSpace;&amp;"):
        rendered = md.render(md_inline(text))
        assert not re.search("[\u200b-\u200f\u202a-\u202e\u2066-\u2069\n]", rendered.strip()), rendered
        assert rendered.strip() == f"<p>{html(text)}</p>"  # shown as written


def _dump(tmp_path: Path, name: str, scale: float = 1.0, cls: type = torch.nn.Linear) -> Path:
    d = tmp_path / name
    lin = cls(3, 2)
    with torch.no_grad():
        lin.weight.fill_(0.5)
        lin.bias.fill_(0.0)
    with probe_session(d, steps=1):
        lin(torch.ones(1, 3) * scale)
    return d


def _rewrite_index(d: Path, change) -> None:
    index = json.loads((d / "index.json").read_text())
    change(index)
    (d / "index.json").write_text(json.dumps(index))


@pytest.mark.parametrize("change, needle", [
    (lambda ix: ix["events"][0].update(seq="first"), "events.0.seq"),
    (lambda ix: ix["events"][0].update(chunk="../../host/shadow.json"), "chunk must be a plain file name"),
    (lambda ix: ix["events"][0].update(call=10**40), "events.0.call"),
    (lambda ix: ix["events"][-1].pop("module"), "a module_end event needs key, module and call"),
    (lambda ix: ix.update(meta={"tpx": 5}), "meta.tpx"),
    (lambda ix: ix.update(scalars={"loss": ["x"]}), "scalars.loss.0"),
    (lambda ix: ix.update(events={"a": 1}), "events: Input should be a valid list"),
])
def test_a_forged_probe_index_is_a_clear_error(tmp_path: Path, change, needle: str):
    d = _dump(tmp_path, "dump")
    _rewrite_index(d, change)
    with pytest.raises(DumpError) as exc:
        ProbeDump(d)
    assert "index.json is not what Ferry writes" in str(exc.value) and needle in str(exc.value)


def test_json_with_millions_of_values_is_refused_before_parsing(tmp_path: Path, monkeypatch):
    """Parsed and validated, each small JSON value costs the host about a kilobyte: 14 MiB of tiny
    probe events took 700 MB and some seconds, and the 256 MiB file cap let a run's index.json or
    profile.json take some 13 GB of host memory."""
    import time

    events = ",".join(f'{{"seq":{i},"kind":"x"}}' for i in range(700_000))  # 2.1 million values
    probe = tmp_path / "probe"
    probe.mkdir()
    (probe / "index.json").write_text('{"format": "ferry-probe/1", "events": [' + events + "]}")
    t0 = time.monotonic()
    with pytest.raises(DumpError, match=r"index.json holds about 2100\d+ JSON values, more than the 2000000"):
        ProbeDump(probe)
    assert time.monotonic() - t0 < 5  # refused from a count, not after parsing
    d = _write_profile(tmp_path / "p", _profile_doc())
    (d / "profile.json").write_text('{"ops": [' + ",".join(["1"] * 2_100_000) + "]}")
    with pytest.raises(ProfileError, match="FERRY_ARTIFACT_MAX_JSON_VALUES"):
        build_profile_report(d, tmp_path)
    small = tmp_path / "small"
    small.mkdir()
    head = events[:2000].rsplit(",{", 1)[0]
    (small / "index.json").write_text('{"format": "ferry-probe/1", "events": [' + head + "]}")
    monkeypatch.setenv("FERRY_ARTIFACT_MAX_JSON_VALUES", "50")
    with pytest.raises(DumpError, match="more than the 50 Ferry reads"):
        ProbeDump(small)
    monkeypatch.setenv("FERRY_ARTIFACT_MAX_JSON_VALUES", "1e4")  # raised for a real run that needs more
    assert len(ProbeDump(small).events) > 50


def test_forged_tensor_data_is_not_compared(tmp_path: Path, secret: Path):
    ref, tgt = _dump(tmp_path, "ref"), _dump(tmp_path, "tgt", scale=2.0)
    chunk = next(tgt.glob("chunk_*.pt"))
    chunk.unlink()
    chunk.symlink_to(secret)  # a chunk that is a link to a host file
    _rewrite_index(tgt,
                   lambda ix: [e.update(same_as="nowhere#0") for e in ix["events"] if e.get("kind") == "module_input"])
    report = compare_dumps(ref, tgt)  # no KeyError, no traceback
    assert report.counts["compared"] > 0
    assert all(t.verdict == "skipped" for t in report.tensors), [(t.key, t.verdict) for t in report.tensors]
    assert SECRET not in report.model_dump_json()
    # a chunk that is not a torch.save archive, or a compressed one, or holds something else
    for name, data in (("bad.pt", b"not a zip"), ("pickle.pt", b"\x80\x04K\x01.")):
        (ref / name).write_bytes(data)
        with pytest.raises(DumpError, match=r"not a torch\.save archive"):
            ProbeDump(ref)._chunk(name)


def test_a_bad_chunk_named_by_many_keys_is_read_once(tmp_path: Path):
    """A chunk that fails to load was read, checked and unpickled again for every key naming it (and
    warned about each time): a few thousand keys on one large forged chunk kept the host busy for
    as long as the run liked."""
    import logging
    import time
    import zipfile

    class Count(logging.Handler):  # counts only: a kept record would keep its exception's frames alive
        seen = 0

        def emit(self, record: logging.LogRecord) -> None:
            Count.seen += 1

    ref, tgt = _dump(tmp_path, "ref"), _dump(tmp_path, "tgt")
    n = 3000
    for d in (ref, tgt):
        with zipfile.ZipFile(d / "bad.pt", "w", compression=zipfile.ZIP_STORED) as zf:
            zf.writestr("archive/data.pkl", b"\x00" * (4 * 1024**2))  # stored, passes the archive check
        extra = [{"seq": 1000 + i, "kind": "record", "key": f"r{i}", "shape": [2], "dtype": "float32",
                  "chunk": "bad.pt"} for i in range(n)]
        _rewrite_index(d, lambda ix, extra=extra: ix["events"].extend(extra))
    counter = Count(logging.WARNING)
    dump_log = logging.getLogger("tools.probe.dump")
    dump_log.addHandler(counter)
    try:
        t0 = time.monotonic()
        report = compare_dumps(ref, tgt)
        took = time.monotonic() - t0
    finally:
        dump_log.removeHandler(counter)
    assert took < 10, f"compare_dumps took {took:.0f} s"
    recs = [t for t in report.tensors if t.key.startswith("r")]
    assert len(recs) == n and all(t.verdict == "skipped" for t in recs)
    assert Count.seen <= 2 * 21, Count.seen


def test_a_tensor_that_does_not_match_its_index_entry_is_not_compared(tmp_path: Path):
    ref, tgt = _dump(tmp_path, "ref"), _dump(tmp_path, "tgt")
    _rewrite_index(tgt, lambda ix: [e.update(shape=[7]) for e in ix["events"] if e.get("kind") == "module_output"])
    _rewrite_index(ref, lambda ix: [e.update(shape=[7]) for e in ix["events"] if e.get("kind") == "module_output"])
    report = compare_dumps(ref, tgt)
    outs = [t for t in report.tensors if t.kind == "module_output"]
    assert outs and all(t.verdict == "skipped" for t in outs)


def test_a_target_dump_naming_a_flood_of_ops_is_localised_in_linear_time(tmp_path: Path):
    """module_ops in the target's index.json is the run's: the ops of the diverging module were
    de-duplicated by scanning the list kept so far (30 000 names: 6 s; 100 000: over a minute)."""
    import time

    class Tripled(torch.nn.Linear):  # same name and weights, a different computation: outputs diverge
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) * 3

    Tripled.__name__ = "Linear"
    ref, tgt = _dump(tmp_path, "ref"), _dump(tmp_path, "tgt", cls=Tripled)
    n = 100_000
    _rewrite_index(tgt,
                   lambda ix: [names.extend(f"aten::op{i}" for i in range(n)) for names in ix["module_ops"].values()])
    _rewrite_index(tgt,
                   lambda ix: ix["meta"].setdefault("tpx", {}).update(fallback_ops=[f"aten::op{i}" for i in range(n)]))
    t0 = time.monotonic()
    report = compare_dumps(ref, tgt)
    took = time.monotonic() - t0
    assert took < 15, f"compare_dumps took {took:.0f} s for {n} op names"
    div = report.first_divergence
    assert div is not None and div.likely_cause == "cpu_fallback"  # attributed with every op the module named
    assert len(div.ops) <= 200 and len(div.explanation) < 2000


def test_hostile_module_names_are_escaped_in_the_parity_report(tmp_path: Path):
    hostile = type(f"Net{HOSTILE}$\\frac{{1}}{{0}}$", (torch.nn.Linear,), {})  # a class name is the program's choice
    ref, tgt = _dump(tmp_path, "ref", cls=hostile), _dump(tmp_path, "tgt", scale=3.0, cls=hostile)
    parity = compare_dumps(ref, tgt)
    assert parity.first_divergence is not None and HOSTILE in parity.first_divergence.key
    run = RunSummary(role="target", status="ok", exit_code=0, duration_s=1.0)
    result = CheckResult(status="fail", summary=parity.summary, out_dir=str(tmp_path), reference=run, target=run,
                         parity=parity, notes=[f"note {HOSTILE}"])
    md = markdown_report(result)
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", md)
    rows = [line for line in md.splitlines() if line.startswith(("| 0 |", "| 1 |"))]
    assert rows and all(_table_cells(line) == 8 for line in rows), rows  # a `|` in a name adds no column
    for line in md.splitlines():
        assert "<script>" not in _outside_code(line), line
    text = result_text(result)
    assert "\x1b" not in text and "\x07" not in text and "\r" not in text and "\x9b" not in text
    assert f"Net{terminal(HOSTILE)}" in text
    assert chart_png(parity, tmp_path / "parity.png") is not None  # `$` in a label is not taken as mathtext


BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">]>
<testsuite><testcase classname="t" name="&lol2;"/></testsuite>
"""


def test_junit_xml_with_a_dtd_is_refused(tmp_path: Path, secret: Path):
    (tmp_path / "junit.xml").write_bytes(BOMB)
    with pytest.raises(JunitRefused, match="DOCTYPE/ENTITY"):
        read_junit_xml(tmp_path / "junit.xml")
    (tmp_path / "utf16.xml").write_bytes(BOMB.decode().replace('"1.0"', '"1.0" encoding="UTF-16"').encode("utf-16"))
    with pytest.raises(JunitRefused, match="DOCTYPE/ENTITY"):
        read_junit_xml(tmp_path / "utf16.xml")
    assert parse_junit_xml(tmp_path / "junit.xml") == []
    (tmp_path / "link.xml").symlink_to(secret)
    with pytest.raises(JunitRefused, match="not read: symlink"):
        read_junit_xml(tmp_path / "link.xml")
    (tmp_path / "ok.xml").write_text('<testsuite><testcase classname="tests.test_a" name="test_x" line="4">'
                                     '<failure message="boom"/></testcase></testsuite>')
    (case,) = read_junit_xml(tmp_path / "ok.xml")
    assert (case.nodeid, case.outcome, case.message, case.line) == ("tests/test_a.py::test_x", "failed", "boom", 5)
    assert parse_junit_xml(tmp_path / "missing.xml") == []


def test_a_junit_xml_of_millions_of_elements_is_refused_not_built(tmp_path: Path):
    """ElementTree built the whole tree of the run's junit XML: 32 MiB of empty elements (within the
    size cap) took some 800 MB on the host, nested as deep as much. Measured in a fresh process."""
    import subprocess
    import sys

    flat = tmp_path / "flat.xml"
    flat.write_bytes(b"<testsuite>" + b"<t/>" * (6 * 1024**2) + b"</testsuite>")
    deep = tmp_path / "deep.xml"
    deep.write_bytes(b"<a>" * 2_000_000 + b"</a>" * 2_000_000)
    real = tmp_path / "real.xml"  # 50 000 test cases, each failed with a message: still read
    real.write_bytes(b"<testsuites><testsuite>" + b"".join(
        b'<testcase classname="tests.t" name="test_%d" time="0.1"><failure message="boom"/></testcase>' % i
        for i in range(50_000)) + b"</testsuite></testsuites>")
    code = ("import resource, sys\n"
            "from pathlib import Path\n"
            "from tools.trace.pytest_out import JunitRefused, read_junit_xml\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            "for name in sys.argv[1:3]:\n"
            "    try:\n"
            "        read_junit_xml(Path(name))\n"
            "    except JunitRefused as exc:\n"
            "        print('refused:', exc)\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)\n"
            "cases = read_junit_xml(Path(sys.argv[3]))\n"
            "print(len(cases), cases[-1].outcome, cases[-1].message)\n")
    out = subprocess.run([sys.executable, "-c", code, str(flat), str(deep), str(real)], capture_output=True,
                         text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr[-2000:]
    flat_refused, deep_refused, grew_mib, real_read = out.stdout.splitlines()
    assert flat_refused.startswith("refused: the junit XML holds 6291458 tags, more than")
    assert deep_refused.startswith("refused: the junit XML holds 4000000 tags")
    assert int(grew_mib) < 200, f"reading the forged junit XML took {grew_mib} MiB more"
    assert real_read == "50000 failed boom"


def test_redirect_log_lines_are_validated_and_a_link_is_refused(tmp_path: Path, secret: Path):
    log = tmp_path / "redirect.jsonl"
    good = {"event": "site", "file": "a.py", "line": 3, "api": "Tensor.cuda", "mapped_to": "cpu", "count": 2, "pid": 1}
    bad = [{**good, "line": "3"}, {**good, "count": 10**30}, {**good, "api": ["x"]}, {**good, "count": True}, [1]]
    log.write_text("\n".join(json.dumps(x) for x in [good, *bad]) + "\n")
    (rec,) = load_redirect_log(log)
    assert (rec.file, rec.line, rec.api, rec.count) == ("a.py", 3, "Tensor.cuda", 2)
    (tmp_path / "link.jsonl").symlink_to(secret)
    with pytest.raises(RedirectLogError, match="was not read: symlink"):
        load_redirect_log(tmp_path / "link.jsonl")


def test_a_redirect_log_of_junk_lines_is_not_a_flood_of_warnings(tmp_path: Path, caplog):
    """Each malformed line was one warning: a 64 MiB log of junk lines is tens of millions of them."""
    import logging

    log = tmp_path / "redirect.jsonl"
    good = {"event": "site", "file": "a.py", "line": 3, "api": "Tensor.cuda", "mapped_to": "cpu", "count": 2, "pid": 1}
    log.write_text("x\n" * 100_000 + json.dumps(good) + "\n")
    caplog.set_level(logging.WARNING, logger="tools.redirect.log")
    (rec,) = load_redirect_log(log)
    assert rec.count == 2
    assert len(caplog.records) <= 21
    assert "100000 malformed redirect log lines skipped in all" in caplog.records[-1].getMessage()
