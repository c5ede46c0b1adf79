"""The README's promises: two commands first, and a Python example that runs."""
import re
import subprocess

from conftest import REPO


def blocks(lang):
    return re.findall(rf"```{lang}\n(.*?)```", (REPO / "README.md").read_text(), re.S)


def test_readme_starts_with_the_two_commands():
    text = (REPO / "README.md").read_text()
    first = blocks("bash")[0].strip().splitlines()
    assert len(first) == 2
    assert "rnnlens demo" in first[0] and "pytest" in first[1]
    assert text.index("```bash") < 20 and text.index("```bash") < text.index("```python")


def test_ci_runs_the_readme_test_command():
    out = subprocess.run(["awk", r'/^```bash$/{inblock=1; next} /^```$/{if (inblock) exit} inblock',
                          str(REPO / "README.md")], capture_output=True, text=True).stdout
    assert out.splitlines()[1] == blocks("bash")[0].strip().splitlines()[1]
    assert "README.md" in (REPO / ".ci" / "run").read_text()


def test_python_example_runs(capsys):
    code = blocks("python")[0]
    assert len(code.strip().splitlines()) <= 12
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert "tensor(" in out
