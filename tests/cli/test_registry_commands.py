"""Every registered cell through the commands that read a model: each either runs (exit 0) or
refuses with one designed line (exit 2), never a traceback. Tiny untrained checkpoints on the
built-in corpus, so the whole registry runs in seconds."""
from pathlib import Path

import pytest

from rnnlens.cells import CELLS
from tests.support import run_cli, untrained_checkpoint

SIZES = {"mm": 9}                   # mm's state is a d x d matrix: hidden_size a square
# max-plus cells have no n-gram sum to explain: the commands that read one say so (wfsa reads them)
NO_NGRAMS = ("maxplus",)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("registry")
    return {c: untrained_checkpoint(root / c, cell=c, hidden_size=SIZES.get(c, 4)) for c in sorted(CELLS)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("inputs")
    (root / "in.txt").write_text("the film was good\nthe film was not bad\n", encoding="utf-8")
    (root / "doc.txt").write_text("the film was not good . it was very bad . " * 40, encoding="utf-8")
    return root


def _commands(m: Path, files: Path) -> list[list]:
    return [["explain", "--model", m, "the film was not good"],
            ["explain", "--model", m, "--view", "exact", "--json", "the film was good"],
            ["explain", "--model", m, "--file", files / "doc.txt", "--top", "5"],
            ["predict", "--model", m, files / "in.txt", "--explain", "2"],
            ["eval", "--model", m, "--json"],
            ["approx-error", "--model", m],
            ["faithfulness", "--model", m, "--sentences", "2", "--methods", "ngram", "occlusion", "--quiet"]]


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_every_cell_runs_every_model_command(capsys, models, files, cell):
    for argv in _commands(models[cell], files):
        code, out, err = run_cli(capsys, *argv)
        assert "Traceback" not in err, (argv, err)
        if code == 0:
            continue
        lines = [ln for ln in err.splitlines() if ln.strip()]
        assert code == 2 and len(lines) == 1 and lines[-1].startswith("rnnlens: error: "), (argv, code, err)
        assert any(k in cell for k in NO_NGRAMS) and "max-plus" in lines[-1], (argv, err)
