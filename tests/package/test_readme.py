"""The README's promises: two commands first, and a Python example whose printed numbers are
the first-order n-gram scores and remainder it says they are, checked against a float64
unrolling built from torch's own cells and autograd (no rnnlens code)."""
import copy
import re
import shlex
import subprocess
import tomllib

import torch

from tests.support import REPO, first_order_ngrams, max_diff, torch_step


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", (REPO / "README.md").read_text(), re.S)


# --- the two commands -------------------------------------------------------------------------
def test_readme_starts_with_the_two_commands():
    text = (REPO / "README.md").read_text()
    first = blocks("bash")[0].strip().splitlines()
    assert len(first) == 2
    assert "rnnlens demo" in first[0] and "pytest" in first[1]
    assert text.index("```bash") < 20 and text.index("```bash") < text.index("```python")


def test_readme_commands_parse():
    from rnnlens.cli import build_parser
    from rnnlens.cli.demo import cmd_demo

    demo_line, test_line = blocks("bash")[0].strip().splitlines()
    for line in (demo_line, test_line):
        p = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
    # each line is `venv && activate && pip install ... && <command>`
    steps = [[shlex.split(s) for s in line.split("&&")] for line in (demo_line, test_line)]
    for line in steps:
        assert line[0][:3] == ["python3", "-m", "venv"] and line[1][0] == "." and line[2][:2] == ["pip", "install"]
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "-e" in steps[0][2] and "." in steps[0][2]
    assert ".[test]" in steps[1][2] and any(d.startswith("pytest") for d in extras["test"])
    demo = steps[0][3]
    assert demo[0] == "rnnlens"
    args = build_parser().parse_args(demo[1:])
    assert args.func is cmd_demo and args.out == "demo-out" and args.force is True
    assert steps[1][3][:3] == ["python", "-m", "pytest"]


def test_ci_runs_the_readme_test_command():
    """.ci/run's own extraction (its lines up to the echo, run by bash from the script's
    path) yields the README's test command, and the script then runs that command."""
    script = (REPO / ".ci" / "run").read_text()
    head = script[: script.index('echo "ci: $cmd"')]
    p = subprocess.run(["bash", "-c", head + 'printf "%s" "$cmd"', str(REPO / ".ci" / "run")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout == blocks("bash")[0].strip().splitlines()[1]
    assert 'bash -euo pipefail -c "$cmd"' in script[script.index('echo "ci: $cmd"'):]


# --- the Python example -------------------------------------------------------------------------
def test_python_example_prints_first_order_scores_and_remainder(capsys):
    code = blocks("python")[0]
    assert len(code.strip().splitlines()) <= 12
    printed = []

    def capture(*args, **kw):
        printed.append(args)
        print(*args, **kw)

    ns = {"print": capture}
    exec(compile(code, "README.md", "exec"), ns)
    out = capsys.readouterr().out
    assert len(printed) == 2 and all(len(a) == 1 for a in printed)
    scores, rem = (a[0].detach() for a in printed)
    gru, cell, x, w = ns["gru"], ns["cell"], ns["x"], ns["w"].detach()
    T, H = x.shape[1], gru.hidden_size

    # from_torch: the same outputs as the torch module
    with torch.no_grad():
        y, h_n = gru(x)
        assert max_diff(cell.scan(x)[0], y) < 1e-6
        assert max_diff(cell(x)[0], y) < 1e-6

    # independent float64 first-order unrolling of the GRU
    gru64 = copy.deepcopy(gru).double()
    x64 = x.detach().double()[0]
    v = first_order_ngrams(torch_step("gru", gru64), x64, H)
    with torch.no_grad():
        h = gru64(x64[None])[0][0]                                   # [T,H]
    want_scores = v[T - 1] @ w.double()                               # w^T v_{i:T}, i = 1..T
    want_rem = (h[T - 1] - v[T - 1].sum(0)).norm()
    print("want", want_scores, want_rem)
    assert scores.shape == (T,)
    assert max_diff(scores.double(), want_scores) < 1e-5
    assert abs(float(rem) - float(want_rem)) < 1e-5
    assert float(want_rem) > 1e-3                 # a GRU is not its first-order view: the check bites

    # the printed text shows those numbers (4 decimals)
    lines = out.strip().splitlines()
    nums = [float(s) for s in re.findall(r"-?\d+\.\d+", " ".join(lines[:-1]))]
    assert len(nums) == T and max(abs(a - b) for a, b in zip(nums, want_scores.tolist())) < 6e-5
    assert abs(float(re.findall(r"-?\d+\.\d+", lines[-1])[0]) - float(want_rem)) < 6e-5
