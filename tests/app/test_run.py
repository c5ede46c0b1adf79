"""rnnlens.app.run.Run: a model folder loaded once, its data reloaded and checked."""
from __future__ import annotations

import pytest

from rnnlens.app.run import Run
from rnnlens.cli import main
from rnnlens.errors import RnnlensError

TINY = ["--epochs", "1", "--hidden-size", "8", "--embedding-dim", "8", "--batch-size", "8", "--quiet"]


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    d = tmp_path_factory.mktemp("run")
    rows = ["pos\ta fine film", "neg\ta dull film", "pos\tgood fun", "neg\tbad plot"] * 6
    for split, n in (("train", 24), ("dev", 8), ("test", 8)):
        (d / f"{split}.tsv").write_text("\n".join(rows[:n]) + "\n")
    out = d / "model"
    assert main(["train", "--corpus", "tsv", "--train-file", str(d / "train.tsv"), "--dev-file", str(d / "dev.tsv"),
                 "--test-file", str(d / "test.tsv"), "--out", str(out), *TINY]) == 0
    return out


def test_load_reads_the_checkpoint_once(model):
    run = Run.load(model)
    assert run.task == "classify" and sorted(run.labels) == ["neg", "pos"]
    assert run.tokenizer("A Fine film") == ["a", "fine", "film"]
    assert run.metrics() and run.metrics()[-1].get("split") == "test"
    assert len(run.split("test")) == 8
    assert run.data() is run.data()                       # reloaded once
    assert sum(len(b) for b in run.batches("dev")) == 8


def test_errors_name_the_problem(model, tmp_path):
    with pytest.raises(RnnlensError, match="does not exist"):
        Run.load(tmp_path / "nope")
    run = Run.load(model)
    with pytest.raises(RnnlensError, match="split 'valid' is not available; available: "):
        run.split("valid")
    with pytest.raises(RnnlensError, match="needs a model of task lm"):
        run.require_task("lm", what="perplexity")


def test_data_that_changed_its_labels_is_refused(model, tmp_path):
    run = Run.load(model)
    for split in ("train", "dev", "test"):
        (tmp_path / f"{split}.tsv").write_text("a\tx y\nb\ty z\nc\tz w\n")
    run.config.data.train_file = str(tmp_path / "train.tsv")
    run.config.data.dev_file = str(tmp_path / "dev.tsv")
    run.config.data.test_file = str(tmp_path / "test.tsv")
    with pytest.raises(RnnlensError, match="task and labels the model was trained on"):
        run.data()
