"""The command line answers --help without importing torch, and every command that computes
takes --threads."""
from __future__ import annotations

import subprocess
import sys

import pytest

from rnnlens.cli import THREADED, build_parser

CODE = """
import sys
from rnnlens.cli import main
try:
    main({argv!r})
except SystemExit:
    pass
print("torch" in sys.modules)
"""


@pytest.mark.parametrize("argv", [["--help"], ["eval", "--help"], ["explain", "--help"], ["--version"]])
def test_help_does_not_import_torch(argv):
    out = subprocess.run([sys.executable, "-c", CODE.format(argv=argv)], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_importing_the_package_does_not_import_torch_until_the_cells_are_used():
    code = ("import sys, rnnlens; a = 'torch' in sys.modules; rnnlens.CELLS; "
            "from rnnlens.config import Config; print(a, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False True"


@pytest.mark.parametrize("command", THREADED)
def test_every_computing_command_takes_threads(command):
    sub = next(a for a in build_parser(command)._actions if a.dest == "command")
    parser = sub.choices[command]
    assert any("--threads" in a.option_strings for a in parser._actions), command


def test_every_command_is_a_computing_one_that_takes_threads():
    # every command runs torch (a model, a dataset's tensors, word2vec): none may miss --threads
    sub = next(a for a in build_parser("")._actions if a.dest == "command")
    assert set(sub.choices) == set(THREADED)
