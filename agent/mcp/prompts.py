"""The prompts an agent's user can pick: migrate a repository with Ferry, find out why parity fails."""

from __future__ import annotations

import mcp_types as types

_PROMPTS: dict[str, tuple[str, list[tuple[str, str, bool]], str]] = {
    "migrate_repository": (
        "Migrate this repository from CUDA to the accelerator with Ferry, and stop only on Ferry's verdict",
        [("path", "the repository folder", True), ("run", "the command that runs the program", True),
         ("test", "the test command, if it has tests", False)],
        "Migrate the PyTorch repository at {path} from CUDA to the accelerator with Ferry's tools.\n"
        "1. `scan` it and `plan` with run={run!r} and test={test!r}; tell me what will change.\n"
        "2. `migrate` it (path={path!r}, run={run!r}, test={test!r}); follow it with `status` until it ends, "
        "answering approvals with `resume` after showing me the proposed edit.\n"
        "3. Read the patch and the report resources it lists. The work is done only when the verdict says "
        "migrated=true. Do not edit or delete tests, skip them, or loosen tolerances to get there: Ferry "
        "refuses such edits, and an edit after the migration makes its verdict stale (migrate again).",
    ),
    "why_parity_fails": (
        "Find out why the accelerator's outputs differ from the CPU's, with Ferry's first divergence and causes",
        [("path", "the repository folder", True), ("run", "the command that runs the program", True)],
        "The outputs of {path} on the accelerator differ from its CPU run. Call `check` with path={path!r} and "
        "command={run!r}. Report the first divergence (the module and the step), the measured causes in the "
        "result, and what each suggests. To test a cause, call `check` again with target_env (for example "
        "TPX_MATMUL_PRECISION=highest) and compare. Use `explain` on any rule it names and "
        "`knowledge_search` for the error text. Propose a fix only for a cause the measurements support.",
    ),
}


def listed() -> list[types.Prompt]:
    return [types.Prompt(name=name, description=desc,
                         arguments=[types.PromptArgument(name=a, description=d, required=r) for a, d, r in args])
            for name, (desc, args, _) in _PROMPTS.items()]


def render(name: str, arguments: dict[str, str]) -> types.GetPromptResult:
    """The prompt's text with its arguments; KeyError (with a message) for an unknown prompt or a missing one."""
    if name not in _PROMPTS:
        raise KeyError(f"no prompt {name!r}; Ferry's prompts: {', '.join(_PROMPTS)}")
    desc, args, template = _PROMPTS[name]
    missing = [a for a, _, required in args if required and not arguments.get(a)]
    if missing:
        raise KeyError(f"prompt {name} needs {', '.join(missing)}")
    values = {a: arguments.get(a) or "" for a, _, _ in args}
    return types.GetPromptResult(description=desc, messages=[
        types.PromptMessage(role="user", content=types.TextContent(text=template.format(**values)))])
