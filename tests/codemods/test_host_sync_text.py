"""FRY050: tensors turned into text in a training loop (print, logging, f-strings, str.format, %)
are reported as host syncs; plain Python values are not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tools.codemods.engine import analyze

FIXTURES = Path(__file__).parent / "fixtures" / "FRY050"
_EXPECT = re.compile(r"#\s*expect:\s*FRY050\b")

# a CUDA idiom in the header so the contextual rule runs, and a training loop around the body
HEADER = """import logging
import torch
import torch.nn.functional as F
model = torch.nn.Linear(2, 1).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.ones(4, 2, device="cuda")
for step in range(3):
    loss = F.mse_loss(model(x), x[:, :1])
    loss.backward()
    opt.step()
"""


def _fry050(source: str) -> list[tuple[int, str]]:
    return [(f.line, f.message) for f in analyze(source, rewrite=False).findings if f.rule_id == "FRY050"]


def _body_hits(*lines: str) -> list[str]:
    """Messages FRY050 gives for lines placed inside the training loop of HEADER."""
    first = HEADER.count("\n") + 1
    src = HEADER + "".join(f"    {line}\n" for line in lines)
    return [msg for line, msg in _fry050(src) if line >= first]


@pytest.mark.parametrize("name", sorted(p.name for p in FIXTURES.glob("*.in.py")))
def test_fixture_lines_marked_expect_are_exactly_the_reported_ones(name):
    src = (FIXTURES / name).read_text(encoding="utf-8")
    expected = {i for i, line in enumerate(src.splitlines(), 1) if _EXPECT.search(line)}
    assert {line for line, _ in _fry050(src)} == expected


@pytest.mark.parametrize("line", [
    "print(loss)",
    "print('loss', loss.detach())",
    "print(f'{loss:.3f}')",
    "print('{}'.format(loss))",
    "print('{l}'.format(l=loss))",
    "print('%s' % loss)",
    "print('%s %d' % (loss, step))",
    "logging.info('loss %s', loss)",
    "print(str(loss * 2))",
    "print(model.weight)",
    "print(model.weight.grad.norm())",
    "print(loss > 1)",
    "print([loss, step])",
    "msg = f'loss {loss}'",
    "print(torch.zeros(2, device='cuda'))",
    "h = torch.zeros(2)\n    print(h.to(x.device))",
    "print(torch.ones_like(loss))",
])
def test_tensor_formatted_as_text_in_the_loop_is_reported(line):
    hits = _body_hits(line)
    assert len(hits) == 1, hits
    assert "formats the tensor" in hits[0]


@pytest.mark.parametrize("line", [
    "print(step)",
    "print('done', step + 1, len(x))",
    "print(x.shape, loss.dtype, loss.requires_grad)",
    "print(model)",
    "print(opt)",
    "print(f'{step:03d}')",
    "print('%d' % step)",
    "print(loss is None)",
    "logging.info('step %d', step)",
    "print(torch.arange(3))",
    "h = torch.zeros(2)\n    print(h + 1, h.to(torch.float16), torch.ones_like(h))",
])
def test_plain_values_are_not_reported(line):
    assert _body_hits(line) == []


def test_item_result_is_reported_once_not_again_when_printed():
    hits = _body_hits("v = loss.item()", "print(v, f'{v:.2f}')", "print(loss.item())")
    assert len(hits) == 2 and all(".item()" in h for h in hits)


def test_logger_from_getlogger_and_backward_receivers():
    src = HEADER.replace("for step", "log = logging.getLogger(__name__)\nfor step") + \
        "    log.warning('loss %s', loss)\n"
    assert any("logging .warning()" in m for _, m in _fry050(src))
    fn = """import torch
x = torch.ones(2).cuda()
def train(model, batches, criterion):
    for xb, yb in batches:
        l = criterion(model(xb), yb)
        l.backward()
        print(l, xb, yb)
"""
    # `l` is a tensor (its .backward() is called); xb/yb are unknown parameters and not reported
    assert [m.split("`")[1] for _, m in _fry050(fn)] == ["l"]


def test_outside_a_training_loop_or_shadowed_print_is_not_reported():
    after = HEADER + "print(loss)\n"
    assert _fry050(after) == []
    shadowed = "def print(*a):\n    pass\n" + HEADER + "    print(loss)\n"
    assert _fry050(shadowed) == []


def test_not_reported_without_other_cuda_idioms():
    src = HEADER.replace(".cuda()", "").replace(', device="cuda"', "") + "    print(loss)\n"
    assert _fry050(src) == []
