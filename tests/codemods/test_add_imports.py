"""``add_needed_imports`` adds ``import M`` lines exactly as libcst's ``AddImportsVisitor`` does.

The rules only ever ask for ``import M``; Ferry adds those itself (the visitor's import pulls in
``libcst.matchers``). Each case is checked against the visitor (``_with_visitor``, what a pair naming
an object still goes through), so the two cannot drift apart.
"""

from __future__ import annotations

import sys

import libcst as cst
import pytest

from tools.codemods.imports import _with_visitor, add_needed_imports

SOURCES = {
    "empty": "",
    "code only": "x = 1\nprint(x)\n",
    "docstring": '"""Doc."""\nx = 1\n',
    "docstring then imports": '"""Doc."""\n\nimport os\nimport sys\nx = 1\n',
    "strict flag": "__strict__ = True\nimport os\nx = 1\n",
    "torch already": "import torch\n\nx = torch.ones(1)\n",
    "torch aliased": "import torch as T\nx = T.ones(1)\n",
    "submodule only": "import torch.nn as nn\nimport torch.nn\nx = 1\n",
    "two on a line": "import os, torch\nx = 1\n",
    "two statements on a line": "import os; import sys\nx = 1\n",
    "from imports": "from __future__ import annotations\nfrom torch import nn\nx = nn\n",
    "comment before code": "import os\n# the model\nx = 1\n",
    "blank line before code": "import os\n\n\nx = 1\n",
    "imports only": "import os\nimport sys\n",
    "import after code": "x = 1\nimport torch\ny = torch\n",
    "function first": "def f():\n    return 1\n",
    "crlf": "import os\r\nx = 1\r\n",
    "tabs": "import os\nif True:\n\tx = 1\n",
    "f-string docstring": 'f"""not a docstring"""\nimport os\n',
    "concatenated docstring": '"a" "b"\nimport os\n',
    "time present": "import time\nimport argparse\n\nx = time.time()\n",
}
NEEDED = [
    [("torch", None)],
    [("time", None), ("torch", None)],
    [("torch", None), ("argparse", None), ("torch", None)],
    [("os", None)],
    [("torch.nn", None)],
]


@pytest.mark.parametrize("needed", NEEDED, ids=lambda n: ",".join(m for m, _ in n))
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_the_same_code_as_libcsts_visitor(name: str, needed: list[tuple[str, str | None]]) -> None:
    module = cst.parse_module(SOURCES[name])
    assert add_needed_imports(module, needed).code == _with_visitor(module, needed).code


def test_a_missing_import_goes_after_the_leading_block_and_the_code_gets_a_blank_line() -> None:
    module = cst.parse_module('"""Doc."""\nimport os\nx = 1\n')
    assert add_needed_imports(module, [("torch", None), ("argparse", None)]).code == (
        '"""Doc."""\nimport os\nimport argparse\nimport torch\n\nx = 1\n')
    unchanged = cst.parse_module("import torch\nx = 1\n")
    assert add_needed_imports(unchanged, [("torch", None)]) is unchanged


def test_an_object_import_still_goes_through_the_visitor() -> None:
    module = cst.parse_module("from os import path\nx = 1\n")
    assert add_needed_imports(module, [("os", "sep")]).code == "from os import sep, path\nx = 1\n"


def test_a_rewrite_adds_its_import_without_loading_libcst_matchers() -> None:
    import subprocess

    code = ("import sys\n"
            "from tools.codemods.engine import analyze\n"
            "print(repr(analyze('from torch import nn\\nm = nn.Linear(2, 2).cuda()\\n').new_source))\n"
            "print('libcst.matchers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    source, matchers = out.stdout.splitlines()
    assert source.startswith(repr("from torch import nn\nimport torch\n\ndevice = ")[:-1])
    assert matchers == "False"
