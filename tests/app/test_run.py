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


def test_a_treebank_tokenised_corpus_reads_new_text_as_its_trees_were_split(tmp_path):
    # The SST's trees are Penn Treebank tokens ("it 's", "does n't", "mr."): a model of them
    # reads a new text the same way, typed raw or already split, and keeps its own tokens whole.
    from rnnlens.data.tokenize import Tokenizer

    sents = [("(3 (2 it) (3 (2 's) (3 great)))", 1), ("(1 (2 mr.) (1 (2 smith) (1 (2 does) (1 (2 n't) (1 work)))))", 0),
             ("(3 (2 ``) (3 (3 fun) (2 '')))", 1), ("(1 (2 that) (1 (2 's) (1 dull)))", 0)]
    d = tmp_path / "sst" / "trees"
    d.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        (d / f"{split}.txt").write_text("\n".join(t for t, _ in sents * 3) + "\n")
    out = tmp_path / "m"
    assert main(["train", "--data", "sst2-sentences", "--data-dir", str(tmp_path), "--out", str(out),
                 "--hidden-size", "4", "--embedding-dim", "4", "--epochs", "1", "--quiet"]) == 0
    run = Run.load(out)
    assert run.tokenizer == Tokenizer(treebank=True)
    assert run.tokenize("It's great") == run.tokenize("it 's great") == ["it", "'s", "great"]
    assert run.tokenize("Mr. Smith doesn't work.") == ["mr.", "smith", "does", "n't", "work", "."]
    assert run.tokenize('"fun"') == ["``", "fun", "''"] and run.tokenize("`` fun ''") == ["``", "fun", "''"]
    assert all(t in run.vocab for t in run.tokenize("That's dull"))


@pytest.mark.parametrize("piece, tokens", [
    ("it's", ["it", "'s"]), ("isn't", ["is", "n't"]), ("can't", ["ca", "n't"]), ("'s", ["'s"]), ("n't", ["n't"]),
    ("great,", ["great", ","]), ('"hi"', ["``", "hi", "''"]), ("(yes)", ["(", "yes", ")"]), ("wow...", ["wow", "..."]),
    ("...", ["..."]), ("--", ["--"]), ("-lrb-", ["-lrb-"]), ("well-made", ["well-made"]), ("'", ["'"]),
    ("dogs'", ["dogs", "'"]), ("end.", ["end", "."]), ("you'll!", ["you", "'ll", "!"])])
def test_treebank_tokens_of_a_piece(piece, tokens):
    from rnnlens.data.tokenize import treebank_tokens

    assert treebank_tokens(piece) == tokens
