"""Write docs/idioms.md, the idiom catalogue, from the rules the code knows.

    .venv/bin/python scripts/idioms_doc.py          # rewrite docs/idioms.md
    .venv/bin/python scripts/idioms_doc.py --check  # exit 1 when docs/idioms.md is out of date

Every codemod rule (``tools.codemods.registry``: ID, NAME, CATEGORY, DESCRIPTION, ENTRIES) and every
offline policy rule (``agent.policy.engine``) gets a section whose anchor is its id lower-cased
(``docs/idioms.md#fry013``), the link Ferry's scan table, SARIF, reports and commit messages give.
The prose around the generated sections lives here: the page is never edited by hand.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "idioms.md"

INTRO = """\
# The idiom catalogue

`ferry scan` and `ferry migrate` look for the ways PyTorch code ties itself to CUDA: a device
written as `"cuda"`, a call into `torch.cuda`, a setting only NVIDIA's libraries read, a kernel only
an NVIDIA GPU can run. Each such way of writing code is an *idiom*, and each idiom has a rule with a
stable id (`FRY001`...). This page has one section per rule, anchored by its id in lower case:
a scan table, a SARIF log or a migration report links `docs/idioms.md#fry013` for FRY013.

This page is generated from the rules themselves (`scripts/idioms_doc.py`): what a section says a
rule matches is the rule's own description, so the page and the code cannot disagree.

## What Ferry does with a match

Every rule has one of three categories, and the category decides what happens:

{categories}

The rules run on the original code, never on their own output, so running them twice changes
nothing. `--skip-rule FRY0NN` (migrate) or `--rules` (scan, rewrite) leave rules out.

## Rules by topic
"""

#: the table of categories: what Ferry does with a match of each, and why
CATEGORIES: tuple[tuple[str, str, str], ...] = (
    ("**auto**",
     "*rewrites* it: `ferry rewrite` and the first step of `ferry migrate` replace the code with its "
     "device-generic form (`torch.accelerator`, `torch.device(...)`, `device=`...)",
     "the replacement means the same on CUDA and elsewhere, so it is safe to make without asking; the odd "
     "cases a rule cannot prove safe are left as *review* findings (each description says which)"),
    ("**review**",
     "*reports* it with the nearest working option and leaves the code as it is",
     "the right change depends on intent (a tuning knob, a timing, a check of the hardware) or there is more "
     "than one honest answer; `ferry migrate` changes it only when a run fails there (a policy rule or the "
     "model, every edit shown in the report)"),
    ("**unsupported**",
     "*reports* it as blocking: there is no equivalent off NVIDIA hardware",
     "hand-written CUDA kernels and NVIDIA-only libraries cannot be translated by a rewrite; the report names "
     "the nearest option, and a migration whose run fails there ends `needs_human`"),
)


#: why each topic's idioms matter, in a sentence or three (the rule NAME's prefix picks the topic)
TOPICS: dict[str, tuple[str, str]] = {
    "placement": ("Placement: where tensors and modules live",
                  "Code that names the CUDA device by string, index or method puts its data on a device the "
                  "target does not have. One device object chosen once (`torch.accelerator`) and passed "
                  "everywhere makes the same code run on CUDA, tpx or the CPU."),
    "runtime": ("Runtime queries",
                "Questions asked of `torch.cuda` (is it available, how many devices, which one, wait for it) "
                "answer *no* or fail elsewhere, so the program takes its CPU branch or stops. "
                "`torch.accelerator` asks the same questions of whatever device is there."),
    "memory": ("Memory and the allocator",
               "Memory statistics and allocator settings are CUDA's caching allocator's own. Generic "
               "counterparts exist for the common statistics; allocator internals and environment variables "
               "have none, and silently do nothing off CUDA."),
    "streams": ("Streams, events and graphs",
                "Streams and events order work on a device; CUDA graphs replay a recorded sequence of kernels. "
                "`torch.Stream`/`torch.Event` carry the same meaning to other devices; internals such as "
                "`record_stream` have no counterpart and need a person's look."),
    "rng": ("Random numbers",
            "Seeding and saving the CUDA generator leaves the target device's generator unseeded, so two runs "
            "differ and parity cannot be judged. The device-generic calls seed every device."),
    "amp": ("Mixed precision",
            "Autocast and gradient scaling written for `\"cuda\"` are inactive on another device: the model "
            "silently trains in full precision, or the scaler does nothing. Naming the device type keeps "
            "the precision the author chose."),
    "dtype": ("Data types",
              "Not every device computes every dtype: tpx has no float64 and lower-precision types round "
              "differently. Rules here move code to a dtype the device has, or flag code whose numbers will "
              "move (see docs/numerics.md for when outputs still count as equal)."),
    "dist": ("Distributed training",
             "NCCL is NVIDIA's collective library: a process group, barrier or DDP wrapper that names it or "
             "passes CUDA device ids fails to start elsewhere. The rules choose the device's own backend."),
    "data": ("Data loading",
             "Pinned host memory speeds copies to a CUDA GPU; elsewhere it costs memory for nothing or fails."),
    "compile": ("Compilation",
                "`torch.compile` modes and TorchScript paths tuned for CUDA (CUDA graphs, Triton kernels) may "
                "not exist for the target's compiler backend."),
    "profile": ("Profiling",
                "Profiler activities and NVTX ranges only record on CUDA; on another device the trace is empty."),
    "kernels": ("Custom kernels and CUDA-only libraries",
                "C++/CUDA extensions, Triton kernels and libraries such as apex or flash-attn ship code compiled "
                "for NVIDIA GPUs. Ferry can swap a library for a PyTorch equivalent where one exists; a "
                "hand-written kernel needs a person."),
    "perf": ("Performance patterns",
             "Code that is correct everywhere but slow off CUDA or on any accelerator: host syncs in the "
             "training loop, a transfer every step, graph breaks. Reported only; `ferry migrate`'s profile step "
             "measures them (docs/profile.md)."),
    "attention": ("Attention kernels",
                  "The CUDA-specific selection of scaled-dot-product attention kernels has a device-generic "
                  "replacement."),
}

ACTION = {
    "auto": "Ferry **rewrites** it (category auto).",
    "review": "Ferry **reports** it for review with the nearest working option; the code is left as it is.",
    "unsupported": "Ferry **reports** it as unsupported: nothing on the target device does the same.",
}

POLICY_INTRO = """\
## Policy rules (`ferry migrate`)

When a run on the target device fails, or its outputs do not match the reference run's,
`ferry migrate` diagnoses the failure and an offline policy rule may answer it with one edit at the
failing site (or a verdict that a person is needed). Their ids are accepted by `--skip-rule` like
the FRY ids; docs/agent.md says how the policy works.
"""

OUTRO = """\
## Adding a rule

A new codemod rule gets the next free id; its section here appears when this page is generated
again (`.venv/bin/python scripts/idioms_doc.py`). `tests/agent/test_idioms_doc.py` fails when a rule
the code knows has no section, or the page is out of date.
"""


def _cell(text: str) -> str:
    return " ".join(text.split())


def render() -> str:
    sys.path.insert(0, str(ROOT))
    from agent.policy.registry import descriptions, policy_rules
    from tools.codemods.registry import all_rules

    by_topic: dict[str, list[type]] = {}
    for rule in all_rules():
        by_topic.setdefault(rule.NAME.split(".")[0], []).append(rule)
    unknown = sorted(set(by_topic) - set(TOPICS))
    if unknown:
        raise SystemExit(f"scripts/idioms_doc.py: no topic text for {unknown}: add it to TOPICS")
    table = ["| category | what Ferry does | why |", "|---|---|---|"]
    table += [f"| {name} | {does} | {why} |" for name, does, why in CATEGORIES]
    out = [INTRO.format(categories="\n".join(table))]
    for topic, (title, _why) in TOPICS.items():
        if topic in by_topic:
            ids = ", ".join(f"[{r.ID}](#{r.ID.lower()})" for r in by_topic[topic])
            out.append(f"- **{title}**: {ids}")
    out.append("")
    for topic, (title, why) in TOPICS.items():
        rules = by_topic.get(topic)
        if not rules:
            continue
        out += [f"## {title}", "", why, ""]
        for rule in rules:
            out += [f'<a id="{rule.ID.lower()}"></a>', "", f"### {rule.ID} `{rule.NAME}`", "",
                    f"**Matches:** {_cell(rule.DESCRIPTION)}", "",
                    f"**What Ferry does:** {ACTION[rule.CATEGORY]}", "",
                    f"**Why:** {why.split('. ')[0].rstrip('.')}.", ""]
    out.append(POLICY_INTRO)
    out += ["| rule | handles | what it does |", "|---|---|---|"]
    handles: dict[str, list[str]] = {}  # a rule keyed on several kinds at several places: one row, one anchor
    for policy_rule in policy_rules():
        rule_id, kinds = policy_rule.ID, policy_rule.KINDS
        handles.setdefault(rule_id, []).extend(k for k in kinds if k not in handles.get(rule_id, []))
    described = descriptions()
    for rule_id, kinds in handles.items():
        shown = ", ".join("any failing test" if k == "*" else f"`{k}`" for k in kinds)
        out.append(f'| <a id="{rule_id.lower()}"></a>`{rule_id}` | {shown} | {_cell(described.get(rule_id, ""))} |')
    out += ["", OUTRO]
    return "\n".join(out).rstrip() + "\n"


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text(encoding="utf-8") != text:
            print("docs/idioms.md is out of date: run .venv/bin/python scripts/idioms_doc.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
