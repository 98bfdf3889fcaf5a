"""Run a notebook's code cells in order, the way the kernel would, without Jupyter.

Usage: python run_notebook.py NOTEBOOK.ipynb [-p NAME=VALUE ...]

Shell escapes (`!cmd`) and line magics (`%magic`) are skipped; a `%%time` cell runs and prints
its wall time; other cell magics are skipped. `-p` overrides values set in the cell tagged
`parameters` (as papermill does).
"""

import argparse
import ast
import json
import time


def code_cells(path):
    with open(path, encoding="utf-8") as f:
        notebook = json.load(f)
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        source = cell["source"]
        if isinstance(source, list):
            source = "".join(source)
        yield index, cell.get("metadata", {}).get("tags", []), source


def to_python(source):
    """The cell as Python source, or None for a cell magic we do not run; and whether it is timed."""
    lines = source.splitlines()
    timed = bool(lines) and lines[0].strip() == "%%time"
    if lines and lines[0].startswith("%%"):
        if not timed:
            return None, False
        lines = lines[1:]
    python = []
    for line in lines:
        stripped = line.lstrip()
        if stripped.startswith(("!", "%")):
            python.append(line[: len(line) - len(stripped)] + "pass  # " + stripped)
        else:
            python.append(line)
    return "\n".join(python), timed


def run_notebook(path, params=None):
    """Execute the notebook's code cells in one namespace and return that namespace."""
    namespace = {"__name__": "__main__"}
    for index, tags, source in code_cells(path):
        code, timed = to_python(source)
        if code is None:
            continue
        start = time.perf_counter()
        exec(compile(code, f"{path} [cell {index}]", "exec"), namespace)
        if timed:
            print(f"Wall time: {time.perf_counter() - start:.3f} s")
        if "parameters" in tags and params:
            namespace.update(params)
    return namespace


def parse_param(text):
    name, _, value = text.partition("=")
    if not name.isidentifier() or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    try:
        return name, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return name, value


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook")
    parser.add_argument("-p", "--param", type=parse_param, action="append", default=[])
    args = parser.parse_args()
    run_notebook(args.notebook, dict(args.param))


if __name__ == "__main__":
    main()
