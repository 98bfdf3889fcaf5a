"""The scan flags every line of the idioms real repositories use (issue 18, catalogue 56, 57, 60, 62 and the
pinned-memory and legacy-type forms), with the rule that owns each, and nothing else: each line marked
``# FRYnnn`` below must be reported by that rule (and with that category), unmarked lines never."""

from __future__ import annotations

import re
import textwrap

from tools.scan.api import scan
from tools.scan.models import ScanRequest

SOURCE = textwrap.dedent('''\
    import functools
    import torch
    import torch.backends.cudnn as cudnn
    import torch.nn.functional as F
    from torch.backends import cudnn as backends_cudnn
    from torch.utils.data import DataLoader as Loader


    class Batches(Loader):
        pass


    cudnn.benchmark = True  # FRY031 review
    cudnn.deterministic = True  # FRY031 review
    backends_cudnn.enabled = True  # FRY031 review
    dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float32  # FRY027 auto
    ctx = functools.partial(torch.backends.cuda.sdp_kernel, enable_flash=False)  # FRY060 auto
    flags = {"enable_math": True}
    q = torch.ones(1, 1, 2, 2)
    with torch.backends.cuda.sdp_kernel(**flags):  # FRY060 auto
        a = F.scaled_dot_product_attention(q, q, q)
    with ctx():
        b = F.scaled_dot_product_attention(q, q, q)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)  # FRY019 auto
    start.record()  # FRY019 auto
    end.record()  # FRY019 auto
    elapsed = start.elapsed_time(end)  # FRY019 auto
    laps = [torch.cuda.Event(enable_timing=True) for _ in range(2)]  # FRY019 auto
    laps[0].record()  # FRY019 auto
    laps[1].record()  # FRY019 auto
    lap = laps[0].elapsed_time(laps[1])  # FRY019 auto
    loader = Batches([q], pin_memory=True)  # FRY039 review
    pinned = q.pin_memory()  # FRY039 auto
    moved = pinned.to("cpu", non_blocking=True)
    same = q.type() == "torch.cuda.FloatTensor"  # FRY007 auto
    also = isinstance(q, torch.cuda.FloatTensor)  # FRY007 auto
    print(a.sum().item(), b.sum().item(), elapsed >= 0, lap >= 0, same, also, moved.shape)
    ''')
_MARK = re.compile(r"# (FRY\d{3}) (auto|review)$")


def test_every_idiom_line_is_flagged_by_its_rule(tmp_path):
    (tmp_path / "train.py").write_text(SOURCE, encoding="utf-8")
    report = scan(ScanRequest(path=tmp_path))
    found = {(f.line, f.rule_id, f.category) for f in report.findings}
    expected = {(n, m.group(1), m.group(2)) for n, text in enumerate(SOURCE.splitlines(), 1)
                if (m := _MARK.search(text))}
    assert expected <= found, sorted(expected - found)
    marked = {n for n, _, _ in expected}
    assert {n for n, _, _ in found} == marked, sorted((n, r) for n, r, _ in found if n not in marked)
