"""`rnnlens predict` and `rnnlens eval --test-file` on a classifier, a tagger and a language
model, from any working folder."""
from __future__ import annotations

import json
import math

import pytest

from rnnlens.cells import CELLS
from rnnlens.cli import main

TINY = ["--embedding-dim", "8", "--hidden-size", "8", "--quiet"]
ROWS = ["pos\ta fine film", "neg\ta dull film", "pos\tgood fun", "neg\tbad plot", "pos\tgreat acting",
        "neg\tawful acting"]


@pytest.fixture(scope="module")
def classifier(tmp_path_factory):
    d = tmp_path_factory.mktemp("cls")
    for split, n in (("train", 8), ("dev", 1), ("test", 1)):
        (d / f"{split}.tsv").write_text("\n".join(ROWS * n) + "\n")
    out = d / "model"
    import os
    old = os.getcwd()
    os.chdir(d)                       # relative data paths, as a user types them
    try:
        assert main(["train", "--corpus", "tsv", "--train-file", "train.tsv", "--dev-file", "dev.tsv",
                     "--test-file", "test.tsv", "--out", "model", "--epochs", "8", "--optimizer", "adam",
                     "--lr", "0.05", *TINY]) == 0
    finally:
        os.chdir(old)
    return out


@pytest.fixture(scope="module")
def tagger(tmp_path_factory):
    d = tmp_path_factory.mktemp("tag")
    (d / "conll2003").mkdir()
    sents = [[("John", "I-PER"), ("lives", "O"), ("in", "O"), ("Paris", "I-LOC")],
             [("Mary", "I-PER"), ("visited", "O"), ("the", "O"), ("U.S.", "I-LOC"), (".", "O")]]
    for name, n in (("eng.train", 40), ("eng.testa", 4), ("eng.testb", 4)):
        lines = ["-DOCSTART- -X- O O", ""]
        for i in range(n):
            lines += [f"{w} NNP I-NP {t}" for w, t in sents[i % 2]] + [""]
        (d / "conll2003" / name).write_text("\n".join(lines))
    out = d / "model"
    assert main(["train", "--task", "tag", "--data", "conll2003", "--data-dir", str(d), "--out", str(out),
                 "--epochs", "6", "--optimizer", "adam", "--lr", "0.05", *TINY]) == 0
    return out


@pytest.fixture(scope="module")
def lm(tmp_path_factory):
    d = tmp_path_factory.mktemp("lm")
    (d / "ptb").mkdir()
    text = "\n".join(["the cat sat on the mat", "a dog ran in the park", "the <unk> 's cat"] * 40)
    for split in ("train", "valid", "test"):
        (d / "ptb" / f"ptb.{split}.txt").write_text(text)
    out = d / "model"
    assert main(["train", "--data", "ptb", "--data-dir", str(d), "--out", str(out), "--epochs", "3", "--optimizer",
                 "adam", "--lr", "0.03", "--bptt", "10", "--batch-size", "4", *TINY]) == 0
    return out


def _records(capsys):
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_predict_a_classifier_on_lines_tsv_and_jsonl(classifier, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)                      # not where it was trained
    (tmp_path / "in.txt").write_text("a fine film\n\nawful acting\n")
    assert main(["predict", "--model", str(classifier), "in.txt"]) == 0
    recs = _records(capsys)
    assert [r["line"] for r in recs] == [1, 3]
    for r in recs:
        assert set(r["probabilities"]) == {"neg", "pos"}
        assert math.isclose(sum(r["probabilities"].values()), 1.0)
        assert r["label"] == max(r["probabilities"], key=r["probabilities"].get)
    assert [r["label"] for r in recs] == ["pos", "neg"]
    (tmp_path / "in.tsv").write_text("pos\ta fine film\nneg\tawful acting\n")
    (tmp_path / "in.jsonl").write_text('{"text": "a fine film"}\n"awful acting"\n')
    for name in ("in.tsv", "in.jsonl"):
        assert main(["predict", "--model", str(classifier), name]) == 0
        assert [r["label"] for r in _records(capsys)] == ["pos", "neg"]
    # a .tsv is read as training reads it: the text is all after the first tab (tabs in it too)
    (tmp_path / "tabs.tsv").write_text("pos\ta fine\tfilm  \t \nawful acting\n")
    assert main(["predict", "--model", str(classifier), "tabs.tsv"]) == 0
    assert [r["tokens"] for r in _records(capsys)] == [["a", "fine", "film"], ["awful", "acting"]]


def test_predict_reads_stdin_writes_out_and_explains(classifier, tmp_path, capsys, monkeypatch):
    import io
    monkeypatch.setattr("sys.stdin", io.StringIO("a fine film\ngood fun\n"))
    out = tmp_path / "p.jsonl"
    assert main(["predict", "--model", str(classifier), "-", "--out", str(out), "--explain", "2"]) == 0
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(recs) == 2
    for r in recs:
        ex = r["explanation"]
        assert len(ex["ngrams"]) == 2 and r["label"] in ex["explained"]
    assert main(["predict", "--model", str(classifier), "-", "--out", str(out)]) == 2     # exists: --force
    assert "exists" in capsys.readouterr().err


def test_texts_on_the_command_line_predict_and_explain_as_a_file_does(classifier, tmp_path, capsys):
    (tmp_path / "in.txt").write_text("a fine film\nawful acting\n")
    assert main(["predict", "--model", str(classifier), str(tmp_path / "in.txt"), "--explain", "2"]) == 0
    from_file = _records(capsys)
    assert main(["predict", "--model", str(classifier), "--text", "a fine film", "--text", "awful acting",
                 "--explain", "2"]) == 0
    assert _records(capsys) == from_file
    assert main(["explain", "--model", str(classifier), "a fine film", "--json"]) == 0
    positional = json.loads(capsys.readouterr().out)
    assert main(["explain", "--model", str(classifier), "--text", "a fine film", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == positional


def test_predict_batches_do_not_change_the_answer(classifier, tmp_path, capsys):
    texts = [" ".join(["good", "fun", "film", "bad"][: 1 + i % 4]) for i in range(23)]
    (tmp_path / "t.txt").write_text("\n".join(texts) + "\n")
    got = []
    for bs in ("1", "7", "64"):
        assert main(["predict", "--model", str(classifier), str(tmp_path / "t.txt"), "--batch-size", bs]) == 0
        got.append([r["probabilities"]["pos"] for r in _records(capsys)])
    for a, b in zip(got, got[1:]):
        assert all(math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-9) for x, y in zip(a, b))


def test_eval_on_a_file_with_the_per_class_report(classifier, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "held.tsv").write_text("\n".join(ROWS) + "\n")
    png = tmp_path / "confusion.png"
    assert main(["eval", "--model", str(classifier), "--test-file", "held.tsv", "--json", "--png", str(png)]) == 0
    res = json.loads(capsys.readouterr().out)
    rep = res["report"]
    assert res["file"] == "held.tsv" and sum(map(sum, rep["confusion"])) == len(ROWS)
    assert set(rep["per_class"]) == {"neg", "pos"} and png.stat().st_size > 1000
    correct = sum(rep["confusion"][i][i] for i in range(2))
    assert math.isclose(res["accuracy"], correct / len(ROWS))
    # a split of its own data, from this other folder: the relative training paths still resolve
    assert main(["eval", "--model", str(classifier)]) == 0
    assert "confusion matrix" in capsys.readouterr().out
    # ... to the files training read, not to files of the same names here
    (tmp_path / "test.tsv").write_text("neg\ta fine film\n")
    assert main(["eval", "--model", str(classifier), "--split", "test", "--json"]) == 0
    assert sum(map(sum, json.loads(capsys.readouterr().out)["report"]["confusion"])) == len(ROWS)
    (tmp_path / "bad.tsv").write_text("maybe\tsomething\n")
    assert main(["eval", "--model", str(classifier), "--test-file", "bad.tsv"]) == 2
    assert "do not occur in the training data" in capsys.readouterr().err


def test_eval_counts_its_report_in_the_same_pass_as_an_independent_report(classifier, tmp_path, capsys):
    """The confusion matrix `eval` counts during its own evaluation pass equals the one
    classification_report gets from a separate pass (in eval mode, no gradients) over the same
    examples, mistakes included: half the labels are flipped, so both cells off the diagonal
    fill, and the accuracy is the diagonal's share."""
    from rnnlens.app.predict import classification_report, file_examples
    from rnnlens.app.run import Run

    flipped = [("neg" if r.startswith("pos") else "pos") + r[3:] if i % 2 else r for i, r in enumerate(ROWS * 3)]
    f = tmp_path / "flipped.tsv"
    f.write_text("\n".join(flipped) + "\n")
    assert main(["eval", "--model", str(classifier), "--test-file", str(f), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    run = Run.load(classifier)
    ref = classification_report(run, file_examples(run, f), batch_size=4)
    assert res["report"] == ref
    conf = ref["confusion"]
    assert conf[0][1] + conf[1][0] > 0 and conf[0][0] + conf[1][1] > 0
    assert math.isclose(res["accuracy"], (conf[0][0] + conf[1][1]) / len(flipped))
    assert all(not p.requires_grad or p.grad is None for p in run.model.parameters())


def test_a_tagger_predicts_tags_and_evaluates_a_conll_file(tagger, tmp_path, capsys):
    (tmp_path / "s.txt").write_text("John lives in Paris\n")
    assert main(["predict", "--model", str(tagger), str(tmp_path / "s.txt")]) == 0
    (rec,) = _records(capsys)
    assert len(rec["tags"]) == len(rec["tokens"]) == 4
    # trained from flags alone (data.lowercase's default is true), the tagger keeps the case
    # its CoNLL tokens kept: "John" and "Paris" are known words, not <unk>
    assert rec["tokens"] == ["John", "lives", "in", "Paris"] and not rec.get("unknown")
    # CoNLL's tokens were read on whitespace: a new text is too, so "U.S." stays one known word
    (tmp_path / "u.txt").write_text("Mary visited the U.S. .\n")
    assert main(["predict", "--model", str(tagger), str(tmp_path / "u.txt")]) == 0
    (rec,) = _records(capsys)
    assert rec["tokens"] == ["Mary", "visited", "the", "U.S.", "."] and rec["unknown"] == []
    src = tagger.parent / "conll2003" / "eng.testb"
    assert main(["eval", "--model", str(tagger), "--test-file", str(src), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert 0.0 <= res["f1"] <= 1.0
    # the scores per entity type add up to the overall counts, and give its F1 back
    per = res["per_type"]
    assert set(per) == {"PER", "LOC"}
    right, found, gold = (sum(r[k] for r in per.values()) for k in ("correct", "predicted", "gold"))
    assert gold == 8 and math.isclose(res["f1"], 2 * right / (found + gold) if found + gold else 0.0)
    assert main(["eval", "--model", str(tagger), "--test-file", str(src)]) == 0
    out = capsys.readouterr().out
    assert "type" in out and "precision" in out and "\nLOC " in out and "\nPER " in out
    # a tag the model lacks is named by its entity type, as the file writes it (the model's
    # IOBES tags are converted from the file's BIO ones)
    (tmp_path / "new.txt").write_text("-DOCSTART- -X- O O\n\nJohn NNP I-NP B-BOGUS\nlives VBZ I-VP O\n")
    assert main(["eval", "--model", str(tagger), "--test-file", str(tmp_path / "new.txt")]) == 2
    err = capsys.readouterr().err
    assert "the model has no tag for BOGUS (its tags: " in err and "S-BOGUS" not in err
    # training saw PER and LOC only as single words; a two-word PER is still an entity it can tag
    with open(tagger / "config.json") as f:
        assert {"B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "E-LOC"} <= set(json.load(f)["labels"])
    (tmp_path / "two.txt").write_text("John NNP I-NP I-PER\nSmith NNP I-NP I-PER\nlives VBZ I-VP O\n")
    assert main(["eval", "--model", str(tagger), "--test-file", str(tmp_path / "two.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["per_type"]["PER"]["gold"] == 1
    assert main(["predict", "--model", str(tagger), str(tmp_path / "s.txt"), "--explain", "3"]) == 2
    assert "sentence-level" in capsys.readouterr().err


def test_a_language_model_gives_log_probs_and_perplexity(lm, tmp_path, capsys):
    (tmp_path / "s.txt").write_text("the cat sat on the mat\nthe park ran\n")
    assert main(["predict", "--model", str(lm), str(tmp_path / "s.txt")]) == 0
    recs = _records(capsys)
    for r in recs:
        assert len(r["log_probs"]) == len(r["tokens"]) and r["tokens"][-1] == "<eos>"
        assert math.isclose(r["ppl"], math.exp(-sum(r["log_probs"]) / len(r["log_probs"])))
    assert recs[0]["ppl"] < recs[1]["ppl"]                 # the seen sentence is the likelier
    assert recs[0]["unknown"] == [] and recs[1]["unknown"] == []
    # PTB is tokenised already: a new text is split on whitespace, as training read it, so
    # "<unk>" and "'s" stay the corpus's own tokens
    (tmp_path / "u.txt").write_text("the <unk> 's cat\nthe zebra sat\n")
    assert main(["predict", "--model", str(lm), str(tmp_path / "u.txt")]) == 0
    a, b = _records(capsys)
    assert a["tokens"] == ["the", "<unk>", "'s", "cat", "<eos>"] and a["unknown"] == []
    assert b["unknown"] == ["zebra"]
    assert main(["eval", "--model", str(lm), "--test-file", str(tmp_path / "s.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["ppl"] > 1


def test_an_empty_text_gets_its_record_as_in_a_file(classifier, capsys):
    """`--text ""` is a text with no tokens: its record says so and the others keep theirs,
    as `{"text": ""}` in a .jsonl does."""
    capsys.readouterr()
    assert main(["predict", "--model", str(classifier), "--text", "good fun", "--text", " "]) == 0
    a, b = _records(capsys)
    assert "label" in a and b == {"line": 2, "text": " ", "tokens": [], "error": "no tokens"}


@pytest.mark.parametrize("argv, msg", [
    (["predict", "--model", "nope", "x.txt"], "does not exist"),
    (["predict", "--model", "{m}", "no-such-file.txt"], "cannot read no-such-file.txt"),
    (["predict", "--model", "{m}", "{bad}", "--format", "jsonl"], ":1: not JSON"),
    (["predict", "--model", "{m}", "{bad}", "--format", "xml"], "--format must be one of"),
    (["predict", "--model", "{m}", "{empty}"], "has no texts to predict"),
    (["predict", "--model", "{m}", "{empty}", "--out", "{out}"], "has no texts to predict"),
    (["predict", "--model", "{m}"], "give FILE with the texts"),
    (["predict", "--model", "{m}", "{empty}", "--text", "good fun"], "not both"),
    (["explain", "--model", "{m}", "good fun", "--text", "bad plot"], "give the text once"),
])
def test_bad_input_is_one_line(classifier, tmp_path, capsys, argv, msg):
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{not json\n")
    (tmp_path / "empty.txt").write_text("\n \n")
    argv = [a.format(m=classifier, bad=bad, empty=tmp_path / "empty.txt", out=tmp_path / "o.jsonl") for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0]
    assert not (tmp_path / "o.jsonl").exists()


def test_explain_lines_writes_jsonl_and_one_html_page(classifier, tmp_path, capsys):
    (tmp_path / "lines.txt").write_text("a fine film\n\nawful <script>x</script> acting\ngood fun\n")
    out = tmp_path / "ex"
    assert main(["explain", "--model", str(classifier), "--lines", str(tmp_path / "lines.txt"), "--out", str(out),
                 "--top", "3"]) == 0
    recs = [json.loads(line) for line in (out / "explanations.jsonl").read_text().splitlines()]
    assert [r["line"] for r in recs] == [1, 3, 4]
    for r in recs:
        assert len(r["ngrams"]) <= 3 and len(r["token_shares"]) == len(r["tokens"])
        scale = abs(r["ngram_total"]) + abs(r["remainder"]) + 1.0       # float32 sums of large parts
        assert math.isclose(sum(r["token_shares"]), r["ngram_total"], abs_tol=1e-5 * scale)
        assert math.isclose(r["offset"] + r["ngram_total"] + r["remainder"], r["output"], abs_tol=1e-5 * scale)
        assert r["prediction"] in r["explained"]
    page = (out / "explanations.html").read_text()
    # the tokens are escaped ("<", "script", ">" after tokenisation): no markup from the text
    assert "<script" not in page and "&lt;" in page and "script" in page and "toward" in page
    assert main(["explain", "--model", str(classifier), "--lines", str(tmp_path / "lines.txt"), "--out",
                 str(out)]) == 2                                  # exists: --force
    assert "exists" in capsys.readouterr().err
    assert main(["explain", "--model", str(classifier), "--lines", str(tmp_path / "lines.txt")]) == 2
    assert "--lines needs --out" in capsys.readouterr().err


def test_explain_token_shares_add_up_by_hand():
    import numpy as np

    from rnnlens.app.explain_lines import token_shares

    g = np.zeros((1, 3, 3))
    g[0, 2, 0] = 3.0            # "a b c": shared 1, 1, 1
    g[0, 1, 1] = 2.0            # "b"
    g[0, 2, 1] = -1.0           # "b c": -0.5, -0.5
    assert token_shares(g).tolist() == [1.0, 2.5, 0.5]


TREES = ["(4 (2 a) (4 (4 fine) (2 film)))", "(0 (2 a) (0 (0 dull) (2 film)))", "(3 (3 good) (2 fun))",
         "(1 (1 bad) (2 plot))", "(4 (4 great) (2 acting))", "(0 (0 awful) (2 acting))"]
RELATIONS = [("The <e1>company</e1> fabricates plastic <e2>chairs</e2>.", "Product-Producer(e2,e1)"),
             ("A misty <e1>ridge</e1> uprises from the <e2>surge</e2>.", "Other")]


@pytest.fixture(scope="module")
def regressor(tmp_path_factory):
    d = tmp_path_factory.mktemp("reg")
    (d / "sst" / "trees").mkdir(parents=True)
    for split, n in (("train", 8), ("dev", 1), ("test", 1)):
        (d / "sst" / "trees" / f"{split}.txt").write_text("\n".join(TREES * n) + "\n")
    out = d / "model"
    assert main(["train", "--data", "sst5-regress", "--data-dir", str(d), "--out", str(out), "--epochs", "6",
                 "--optimizer", "adam", "--lr", "0.05", *TINY]) == 0
    return out


@pytest.fixture(scope="module")
def relation(tmp_path_factory):
    d = tmp_path_factory.mktemp("rel")
    (d / "semeval2010_task8").mkdir()

    def blocks(first, n):
        return "".join(f'{first + i}\t"{RELATIONS[i % 2][0]}"\n{RELATIONS[i % 2][1]}\nComment:\n\n' for i in range(n))
    (d / "semeval2010_task8" / "TRAIN_FILE.TXT").write_text(blocks(1, 40))
    (d / "semeval2010_task8" / "TEST_FILE_FULL.TXT").write_text(blocks(8001, 4))
    out = d / "model"
    assert main(["train", "--data", "semeval", "--task", "relation", "--data-dir", str(d), "--out", str(out),
                 "--epochs", "6", "--optimizer", "adam", "--lr", "0.05", *TINY]) == 0
    return out


def test_a_regressor_predicts_values(regressor, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text("a fine film\nawful acting\n")
    capsys.readouterr()
    assert main(["predict", "--model", str(regressor), str(f), "--explain", "2"]) == 0
    recs = _records(capsys)
    assert [r["line"] for r in recs] == [1, 2] and all(isinstance(r["value"], float) for r in recs)
    assert recs[0]["value"] > recs[1]["value"]                   # it learned the sign of the two
    assert all(len(r["explanation"]["ngrams"]) == 2 for r in recs)


def test_a_relation_classifier_reads_the_entity_markers_as_in_training(relation, tmp_path, capsys):
    f = tmp_path / "in.txt"
    f.write_text("\n".join(s for s, _ in RELATIONS) + "\n")
    capsys.readouterr()
    assert main(["predict", "--model", str(relation), str(f)]) == 0
    recs = _records(capsys)
    assert recs[0]["tokens"][:4] == ["the", "<e1>", "company", "</e1>"] and recs[0]["unknown"] == []
    assert [r["label"] for r in recs] == [lab for _, lab in RELATIONS]
    assert abs(sum(recs[0]["probabilities"].values()) - 1) < 1e-9


def test_a_language_model_evaluates_a_file_shorter_than_its_batch(lm, tmp_path, capsys):
    """A few words are enough: the evaluation stream takes as many rows as the file fills
    with a whole BPTT segment each, not a fixed 10: one row here, so every token after the
    first is scored (rows of their own would leave each row's first token and the tail out)."""
    (tmp_path / "short.txt").write_text("the cat sat\n")           # 4 tokens with <eos>
    assert main(["eval", "--model", str(lm), "--test-file", str(tmp_path / "short.txt"), "--json"]) == 0
    assert math.isfinite(json.loads(capsys.readouterr().out)["ppl"])
    (tmp_path / "unk.txt").write_text("the zebra cat okapi sat\n")  # 5 targets, 2 of them unknown
    assert main(["eval", "--model", str(lm), "--test-file", str(tmp_path / "unk.txt"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["unk_rate"] == pytest.approx(2 / 5)


@pytest.mark.parametrize("task, text", [("dyck", "( [ ] )"), ("crossserial", "a a b")])
def test_a_formal_language_model_predicts_the_next_symbol_after_each_prefix(task, text, tmp_path, capsys):
    """A Dyck or cross-serial model reads the start symbol, then the string: one prediction
    after each prefix (the empty one first), each a distribution over the model's symbols."""
    out = tmp_path / "m"
    assert main(["train", "--task", task, "--out", str(out), "--train-size", "64", "--dev-size", "16",
                 "--test-size", "16", *TINY]) == 0
    line = capsys.readouterr().out.splitlines()[-2]              # the test line: a count is a whole number
    count = line.split(" closers=" if task == "dyck" else " strings=")[1].split()[0]
    assert count.isdigit() and int(count) >= 16
    (tmp_path / "s.txt").write_text(text + "\n" + text.replace(" ", "") + "\n")   # spaced, and as one word
    assert main(["predict", "--model", str(out), str(tmp_path / "s.txt")]) == 0
    rec, joined = _records(capsys)
    assert rec["tokens"] == joined["tokens"] == text.split() and rec["unknown"] == joined["unknown"] == []
    assert joined["next"] == rec["next"]
    assert len(rec["next"]) == len(rec["probabilities"]) == len(rec["tokens"]) + 1
    symbols = json.loads((out / "config.json").read_text())["labels"]
    for nxt, dist in zip(rec["next"], rec["probabilities"]):
        assert list(dist) == symbols and math.isclose(sum(dist.values()), 1.0) and nxt == max(dist, key=dist.get)

    # the start symbol typed or not, predict, explain and report read "<s>" first, as training did
    assert main(["predict", "--model", str(out), "--text", "<s> " + text]) == 0
    assert _records(capsys)[0]["next"] == rec["next"]
    for typed in (text, "<s> " + text):
        assert main(["explain", "--model", str(out), typed, "--json"]) == 0
        ex = json.loads(capsys.readouterr().out)
        assert ex["tokens"] == ["<s>"] + text.split()
        assert [o["target"] for o in ex["outputs"]] == rec["next"]
        rep = tmp_path / f"rep{len(typed)}"
        assert main(["report", "--model", str(out), "--out", str(rep), "--text", typed, "--samples", "0"]) == 0
        capsys.readouterr()
        sample = json.loads((rep / "report.json").read_text())["samples"][0]
        assert sample["tokens"] == ex["tokens"] and sample["prediction"] == ex["prediction"]


def test_eval_reports_a_relation_classifier_per_relation(relation, tmp_path, capsys):
    """`eval` on a relation classifier gives the per-relation report and its confusion matrix
    over the 19 directed labels; its macro F1 averages the labels that occur (gold or
    predicted), scikit-learn's macro, the run's own label_macro_f1."""
    from sklearn.metrics import f1_score

    png = tmp_path / "rel.png"
    assert main(["eval", "--model", str(relation), "--json", "--png", str(png)]) == 0
    res = json.loads(capsys.readouterr().out)
    rep = res["report"]
    assert len(rep["labels"]) == 19 and len(rep["confusion"]) == 19 and png.stat().st_size > 1000
    gold, pred = [], []
    for i, row in enumerate(rep["confusion"]):
        for j, n in enumerate(row):
            gold += [i] * n
            pred += [j] * n
    assert math.isclose(rep["macro"]["f1"], f1_score(gold, pred, average="macro"))
    assert math.isclose(rep["macro"]["f1"], res["label_macro_f1"])


@pytest.mark.parametrize("kind, report", [("classifier", "report"), ("relation", "report"), ("tagger", "per_type"),
                                          ("regressor", None), ("lm", None)])
def test_eval_reports_what_each_task_has_and_refuses_a_png_it_cannot_draw(kind, report, request, tmp_path, capsys):
    """Every task's `eval --json` is one JSON object with its split and loss; the report
    (per class, per entity type) only where the task has one; --png (a confusion matrix)
    refused with one line before any work, and no file written, where there is none."""
    model = request.getfixturevalue(kind)
    capsys.readouterr()
    assert main(["eval", "--model", str(model), "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["split"] == "test" and math.isfinite(res["loss"])
    assert ("report" in res) == (report == "report") and ("per_type" in res) == (report == "per_type")
    png = tmp_path / "c.png"
    code = main(["eval", "--model", str(model), "--png", str(png)])
    err = capsys.readouterr().err
    if report == "report":
        assert code == 0 and png.stat().st_size > 1000
    else:
        assert code == 2 and "--png draws a classifier's confusion matrix" in err and len(err.splitlines()) == 1
        assert not png.exists()


@pytest.mark.parametrize("cell", [n for n in CELLS if "max" not in n])
@pytest.mark.parametrize("task", ["dyck", "crossserial"])
def test_every_cell_explains_a_formal_string_as_predict_reads_it(cell, task):
    """For every cell the n-grams explain (max-plus cells refuse them: `wfsa`), a formal
    string is explained as predict reads it, with the start symbol first whether typed or not:
    the explained target after each prefix is predict's next symbol."""
    from pathlib import Path

    import torch

    from rnnlens.analysis.sentence import explain_text
    from rnnlens.app.predict import Predictor
    from rnnlens.app.run import Run
    from rnnlens.config import Config
    from rnnlens.data.formal import START, crossserial_symbols, dyck_symbols
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel

    symbols = list(dyck_symbols(2) if task == "dyck" else crossserial_symbols())
    vocab = Vocab(dict.fromkeys([START, *symbols]))
    cfg = Config.from_dict({"model": {"cell": cell, "embedding_dim": 6, "hidden_size": 4}})
    torch.manual_seed(0)
    model = RNNModel(cfg.model, len(vocab), task, symbols).double().eval()
    run = Run(Path("m"), model, cfg, vocab, {"task": task, "labels": symbols})
    text = "( [ ] )" if task == "dyck" else "a a b c c d"
    want = Predictor(run).records([text])[0]["next"]
    for typed in (text, f"{START} {text}", START + text.replace(" ", "")):
        ex = explain_text(model, vocab, run.reads(run.tokenize(typed)))
        assert ex.tokens == [START] + text.split() and [p.target for p in ex.positions] == want
