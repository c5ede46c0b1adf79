"""Bad input everywhere: every reader, config and checkpoint file that a user can hand to
the command line, broken in every way a file can be (malformed lines, wrong encodings,
empty files, labels missing from a split, vocabulary/checkpoint mismatch, a config from
another version, swapped or truncated model files), ends with ONE line on stderr naming
the file (and line where one applies), exit code 2, no traceback and nothing written.
Security: nothing is unpickled, HTML escapes data text, and names the tool makes itself
never lead outside the output folder."""
import gzip
import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch

from rnnlens.cli import main
from rnnlens.errors import RnnlensError
from tests.support import UNTRAINED_WORDS, untrained_checkpoint

TINY = ["--embedding-dim", "8", "--hidden-size", "8", "--epochs", "1", "--quiet"]
NON_UTF8 = b"\xff\xfe\x80 \xc3("      # not UTF-8 anywhere (nor UTF-16 text we could read)


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def assert_clean_error(code, err, *needles):
    """Exit code 2, exactly one line on stderr holding every needle, no traceback."""
    assert code == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("rnnlens: error: ")
    for n in needles:
        assert str(n) in lines[0], f"{n!r} not in {lines[0]!r}"


# --- minimal valid copies of every dataset the registry reads from files ----------------

def _semeval(start: int, n: int) -> str:
    blocks = []
    for i in range(start, start + n):
        label = "Other" if i % 2 else "Message-Topic(e1,e2)"
        blocks.append(f'{i}\t"The <e1>talk</e1> was about <e2>waste</e2> {i}."\n{label}\nComment:\n')
    return "\n".join(blocks) + "\n"


def _linzen(rows: int) -> str:
    head = ["sentence", "orig_sentence", "pos_sentence", "subj", "verb", "subj_pos", "has_rel", "has_nsubj",
            "verb_pos", "subj_index", "verb_index", "n_intervening", "last_intervening", "n_diff_intervening",
            "distance", "max_depth", "all_nouns", "nouns_up_to_verb"]
    out = ["\t".join(head)]
    for i in range(rows):
        verb, pos = ("are", "VBP") if i % 2 else ("is", "VBZ")
        s = f"the key to the cabinet {verb} here ."
        out.append("\t".join([s, s, "DT NN TO DT NN V RB .", "key", verb, "NN", "False", "False", pos, "2", "6",
                              "1", "NN", "0", "4", "0", "key cabinet", "key cabinet"]))
    return "\n".join(out) + "\n"


def _conll(n: int) -> str:
    return "-DOCSTART- -X- O O\n\n" + "EU NNP I-NP I-ORG\nrejects VBZ I-VP O\nPeter NNP I-NP I-PER\n\n" * n


VALID = {
    "sst2": {f"sst/trees/{s}.txt": "(3 (2 a) (4 good))\n(1 (2 a) (0 bad))\n" * 4 for s in ("train", "dev", "test")},
    "sst2-glue": {f"sst/sst2_glue/{s}.tsv": "sentence\tlabel\na good film\t1\na bad film\t0\n" for s in ("train", "dev")},
    "mr": {"mr/rt-polarity.all": "1 a good film\n0 a bad film\n" * 10},
    "trec": {"trec/TREC.train": "HUM:ind Who is he ?\nLOC:city Where is it ?\n" * 10,
             "trec/TREC.test": "HUM:ind Who is she ?\nLOC:city Where is that ?\n"},
    "ag_news": {f"ag_news/{s}.csv": '"1","a title","good words"\n"2","b title","other words"\n' * 10
                for s in ("train", "test")},
    "imdb": {f"imdb/{s}.jsonl.gz": gzip.compress(b'{"text": "good<br />film", "label": 1}\n'
                                                 b'{"text": "bad film", "label": 0}\n' * 10) for s in ("train", "test")},
    "semeval": {"semeval2010_task8/TRAIN_FILE.TXT": _semeval(1, 20),
                "semeval2010_task8/TEST_FILE_FULL.TXT": _semeval(100, 4)},
    "conll2003": {f"conll2003/{s}": _conll(4) for s in ("eng.train", "eng.testa", "eng.testb")},
    "ptb": {f"ptb/ptb.{s}.txt": "a b c\nd e f\n" * 5 for s in ("train", "valid", "test")},
    "agreement": {"agreement/agr_50_mostcommon_10K.tsv": _linzen(40)},
}


def write_dataset(root: Path, name: str, replace: dict | None = None) -> Path:
    for rel, content in {**VALID[name], **(replace or {})}.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode("utf-8") if isinstance(content, str) else content)
    return root


@pytest.mark.parametrize("name", sorted(VALID))
def test_the_valid_copies_load(tmp_path, name):
    """The baseline that every broken copy below departs from by one file."""
    from rnnlens.data.datasets import load_dataset

    ds = load_dataset(name, write_dataset(tmp_path, name))
    assert all(ds.splits.values()), {k: len(v) for k, v in ds.splits.items()}


S, G, T = "sst/trees/train.txt", "sst/sst2_glue/dev.tsv", "trec/TREC.train"
A, I, E = "ag_news/train.csv", "imdb/train.jsonl.gz", "semeval2010_task8/TRAIN_FILE.TXT"
C, P, L = "conll2003/eng.train", "ptb/ptb.train.txt", "agreement/agr_50_mostcommon_10K.tsv"
M = "mr/rt-polarity.all"

# (dataset, file, content, needles): {f} in a needle is the file's path.
BAD_DATA = [
    # malformed lines: "<file>:<line>:"
    ("sst2", S, "(3 (2 a) (4 good))\n(3 (2 a) (4 good)\n", ["{f}:2:", "not closed"]),
    ("sst2", S, "(3 (2 a) (4 good))\n(7 (2 a) (4 good))\n", ["{f}:2:", "not in 0..4"]),
    ("sst2-glue", G, "sentence\tlabel\na fine film\t1\nno tab here\n", ["{f}:3:", "sentence<TAB>label"]),
    ("sst2-glue", G, "a fine film\t1\n", ["{f}:1:", "header"]),
    ("mr", M, "1 a good film\n0 a bad film\nx a bad line\n", ["{f}:3:", "label"]),
    ("trec", T, "HUM:ind Who is he ?\nwho is she\n", ["{f}:2:", "COARSE:fine"]),
    ("ag_news", A, '"1","a","b"\n"2","only two"\n', ["{f}:2:", "3 CSV fields"]),
    ("imdb", I, gzip.compress(b'{"text": "ok", "label": 1}\n{"text": "cut\n'), ["{f}:2:", "bad JSON"]),
    ("imdb", I, gzip.compress(b'{"text": "ok", "label": 1}\n[1, 2]\n'), ["{f}:2:", "'text'"]),
    ("imdb", I, gzip.compress(b"[" * 100_000), ["{f}:1:", "nested too deeply"]),
    ("semeval", E, _semeval(1, 2) + '9\t"no markers"\nOther\nComment:\n', ["{f}:9:", "<e1>"]),
    ("semeval", E, '1\t"<e1>a</e1> <e2>b</e2>"\nNo-Such(e1,e2)\nComment:\n', ["{f}:2:", "unknown relation"]),
    ("conll2003", C, "EU NNP I-NP I-ORG\nrejects VBZ O\n", ["{f}:2:", "4 columns"]),
    ("conll2003", C, "EU NNP I-NP X-ORG\n", ["{f}:1:", "NER tag"]),
    ("agreement", L, _linzen(3) + "too\tfew\tfields\n", ["{f}:5:", "fields"]),
    ("agreement", L, _linzen(3).replace("\tVBZ\t", "\tVBD\t", 1), ["{f}:2:", "VBD"]),
    ("agreement", L, "sentence\tverb\na b\tc\n", ["{f}:", "header lacks"]),
    # wrong encodings (the readers that may fall back to Latin-1 are checked below)
    ("sst2", S, b"(3 (2 a) (4 good))\n(3 (2 " + NON_UTF8 + b") (4 good))\n", ["{f}", "not valid UTF-8"]),
    ("sst2-glue", G, b"sentence\tlabel\na " + NON_UTF8 + b"\t1\n", ["{f}", "not valid UTF-8"]),
    ("ag_news", A, b'"1","a","' + NON_UTF8 + b'"\n', ["{f}", "not valid UTF-8"]),
    ("imdb", I, gzip.compress(b'{"text": "' + NON_UTF8 + b'", "label": 1}\n'), ["{f}", "not valid UTF-8"]),
    ("semeval", E, _semeval(1, 2).encode() + NON_UTF8, ["{f}", "not valid UTF-8"]),
    ("conll2003", C, b"EU NNP I-NP I-ORG\n" + NON_UTF8 + b" NNP I-NP O\n", ["{f}", "not valid UTF-8"]),
    ("ptb", P, b"a b c\n" + NON_UTF8 + b"\n", ["{f}", "not valid UTF-8"]),
    ("agreement", L, _linzen(3).encode() + NON_UTF8 + b"\n", ["{f}", "UTF-8"]),
    ("mr", M, "1 a good film\n0 a bad film\n".encode("utf-16"), ["{f}:1:", "label"]),
    # empty files (and files with blank lines only)
    ("sst2", S, "", ["{f}", "no "]),
    ("sst2-glue", G, "", ["{f}:1:", "header"]),
    ("sst2-glue", G, "sentence\tlabel\n", ["{f}", "no "]),
    ("mr", M, "\n\n", ["{f}", "no "]),
    ("trec", T, "", ["{f}", "no "]),
    ("ag_news", A, "", ["{f}", "no "]),
    ("imdb", I, gzip.compress(b""), ["{f}", "no "]),
    ("imdb", I, b"", ["{f}", "no "]),
    ("semeval", E, "\n", ["{f}", "no "]),
    ("conll2003", C, "-DOCSTART- -X- O O\n\n", ["{f}", "no "]),
    ("ptb", P, "", ["{f}", "no "]),
    ("ptb", P, "\n \n", ["{f}", "no "]),
    ("agreement", L, "", ["{f}", "header lacks"]),
    # truncated or not-really-compressed files
    ("imdb", I, gzip.compress(b'{"text": "ok", "label": 1}\n' * 50)[:40], ["{f}", "gzip"]),
    ("agreement", L + ".gz", gzip.compress(_linzen(30).encode())[:60], ["{f}"]),
    # labels missing from a split: a test label that training never saw
    ("trec", "trec/TREC.test", "NUM:date When was it ?\n", ["trec test", "NUM", "training data"]),
    ("conll2003", "conll2003/eng.testb", "Bonn NNP I-NP I-LOC\n", ["conll2003 test", "LOC", "training data"]),
    ("ag_news", "ag_news/test.csv", '"3","a","b"\n', ["ag_news test", "3", "training data"]),
    ("mr", M, "1 a good film\n" * 30, ["mr: the training split has 1 label(s)", "at least 2"]),
    ("trec", T, "HUM:ind Who is he ?\n" * 10, ["trec: the training split has 1 label(s)", "at least 2"]),
]


@pytest.mark.parametrize("name,rel,content,needles", BAD_DATA,
                         ids=[f"{n}-{i}" for i, (n, *_rest) in enumerate(BAD_DATA)])
def test_bad_dataset_file(tmp_path, capsys, name, rel, content, needles):
    root = write_dataset(tmp_path / "data", name, {rel: content})
    if rel.endswith(".tsv.gz"):                   # the gzip'd copy is read first
        (root / rel[:-3]).unlink()
    out = tmp_path / "out"
    code, _, err = run(capsys, "train", "--data", name, "--data-dir", root, "--out", out, *TINY)
    assert_clean_error(code, err, *[n.format(f=root / rel) for n in needles])
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["data"]   # nothing half-written


# --- files named on the command line: TSV data, config, embeddings, adjectives ---------

def _tsv_run(capsys, tmp_path, train, dev=None):
    f = tmp_path / "train.tsv"
    f.write_bytes(train if isinstance(train, bytes) else train.encode())
    args = ["train", "--corpus", "tsv", "--train-file", f, "--out", tmp_path / "o", *TINY]
    if dev is not None:
        (tmp_path / "dev.tsv").write_text(dev)
        args[5:5] = ["--dev-file", tmp_path / "dev.tsv"]
    return run(capsys, *args)


@pytest.mark.parametrize("train,dev,needles", [
    ("pos\tgood\nneg\tbad\nno tab here\n", None, ["train.tsv:3:", "label<TAB>text"]),
    ("pos\tgood\n\tbad\n", None, ["train.tsv:2:"]),
    (b"pos\tgood\nneg\t" + NON_UTF8 + b"\n", None, ["train.tsv", "not valid UTF-8"]),
    ("pos\tgood\nneg\tbad\n".encode("utf-16"), None, ["train.tsv", "UTF-8"]),
    ("", None, ["train.tsv", "no examples"]),
    ("\n\n", None, ["train.tsv", "no examples"]),
    ("pos\tgood\npos\tfine\n", None, ["train.tsv", "at least 2 labels"]),                 # a label missing from train
    ("pos\tgood\nneg\tbad\n", "pos\tfine\nmeh\tso so\n", ["dev.tsv", "meh", "training data"]),   # ... from dev
], ids=["malformed", "no-label", "latin1", "utf16", "empty", "blank", "one-label", "dev-label"])
def test_bad_tsv_file(tmp_path, capsys, train, dev, needles):
    assert_clean_error(*_tsv_run(capsys, tmp_path, train, dev)[::2], *needles)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("content,needles", [
    (b"", ["c.json", "not valid JSON"]),
    (b'{"model": {"cell": "gru",}}', ["c.json", "not valid JSON"]),
    (NON_UTF8, ["c.json"]),
    (b"[1, 2]", ["c.json", "mapping"]),
    (b'{"version": 2, "model": {}}', ["c.json", "config version 2", "version 1"]),     # from another version
    (b'{"modle": {}}', ["c.json", "unknown config section", "modle"]),
    (b'{"train": {"epochs": "many"}}', ["c.json", "train.epochs"]),
    (pickle.dumps({"model": {}}), ["c.json"]),
    (b"[" * 100_000, ["c.json", "not valid JSON"]),
    (b'{"data": {"corpus": "sst2"}, "data": {"corpus": "mpqa"}}', ["c.json", "'data' appears twice"]),
    (b'{"model": {"cell": "gru", "cell": "lstm"}}', ["c.json", "'cell' appears twice"]),
], ids=["empty", "syntax", "encoding", "not-mapping", "version", "section", "type", "pickle", "deep", "dup-section",
        "dup-field"])
def test_bad_config_file(tmp_path, capsys, content, needles):
    (tmp_path / "c.json").write_bytes(content)
    assert_clean_error(*run(capsys, "train", "--config", tmp_path / "c.json", "--out", tmp_path / "o", "--quiet")[::2],
                       *needles)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name,content,needles", [
    ("v.txt", "qqqq 1 2 3\nthe 0.1 0.2\n", ["v.txt:2:", "expected 8 values"]),
    ("v.txt", "the " + " ".join(["1"] * 8) + "\nfilm " + " ".join(["x"] * 8) + "\n", ["v.txt:2:", "not a number"]),
    ("v.txt", "film " + " ".join(["nan"] * 8) + "\n", ["v.txt:1:", "nan or inf"]),
    ("v.txt", "film " + " ".join(["1e60"] * 8) + "\n", ["v.txt:1:", "nan or inf"]),
    ("v.txt", "", ["v.txt", "empty"]),
    ("v.txt", "qqqq " + " ".join(["1"] * 8) + "\n\xe9\xe8 x y\n", ["v.txt", "no word of the vocabulary"]),
    ("v.txt.gz", gzip.compress(("film " + " ".join(["1"] * 8) + "\n").encode() * 40)[:30], ["v.txt.gz", "cannot read"]),
    ("v.vec", gzip.compress(("film " + " ".join(["1"] * 8) + "\n").encode() * 40)[:30], ["v.vec", "cannot read"]),
], ids=["dims", "number", "nan", "overflow", "empty", "no-word", "truncated-gz", "gz-by-content"])
def test_bad_embeddings_file(tmp_path, capsys, name, content, needles):
    f = tmp_path / name
    f.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert_clean_error(*run(capsys, "train", "--embeddings-file", f, "--out", tmp_path / "o", *TINY)[::2], *needles)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("content,needles", [
    (b"", ["adj.json"]),
    (NON_UTF8, ["adj.json"]),
    (b'{"positive": ["good"]', ["adj.json"]),
    (b'{"positive": "good", "negative": []}', ["adj.json", "'positive' and 'negative'"]),
    (b'{"positive": [], "negative": []}', ["adj.json", "empty"]),
    (b'{"positive": ["good", 3], "negative": []}', ["adj.json", "non-empty strings"]),
    (b'{"positive": ["good"], "negative": ["bad"], "neutral": ["x"]}', ["adj.json", "unknown key", "'neutral'"]),
    (b'{"positive": ["very good"], "negative": ["bad"]}', ["adj.json", "single words", "'very good'"]),
], ids=["empty", "encoding", "syntax", "shape", "no-words", "not-strings", "unknown-key", "phrase"])
def test_bad_adjectives_file(tmp_path, capsys, content, needles):
    (tmp_path / "adj.json").write_bytes(content)
    assert_clean_error(*run(capsys, "negation", "--model", tmp_path / "unused", "--adjectives", tmp_path / "adj.json")[::2],
                       *needles)


# --- checkpoints: untrained ones are enough (and take no training time) ----------------

WORDS = UNTRAINED_WORDS


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    torch.manual_seed(1)
    twin = untrained_checkpoint(root / "twin", words=WORDS[:-1] + ["other"])   # same shapes, other weights and words
    return {"clf": untrained_checkpoint(root / "clf"), "twin": twin,
            "clf3": untrained_checkpoint(root / "clf3", labels=("a", "b", "c"), words=WORDS + ["more"], hidden_size=6),
            "lm": untrained_checkpoint(root / "lm", task="lm", labels=None, data={"sentence_level": True},
                                       cell="lstm", memory="rm", memory_size=3)}


def _edit_config(d: Path, change):
    meta = json.loads((d / "config.json").read_text())
    change(meta)
    (d / "config.json").write_text(json.dumps(meta))


def _pickle_payload(marker: Path) -> bytes:
    """Bytes whose unpickling creates `marker` (pickle runs os.system on load)."""
    class Payload:
        def __reduce__(self):
            import os
            return (os.system, (f"touch {marker}",))
    return pickle.dumps(Payload())


ST, CJ, VJ = "model.safetensors", "config.json", "vocab.json"
# (damage(d, models), needles): the file named first in each message is d/<file>
BAD_CHECKPOINTS = {
    # truncated, empty or corrupt files
    "weights-truncated-in-header": (lambda d, m: (d / ST).write_bytes((d / ST).read_bytes()[:60]), [ST, "corrupt"]),
    "weights-truncated-in-data": (lambda d, m: (d / ST).write_bytes((d / ST).read_bytes()[:-7]), [ST, "corrupt"]),
    "weights-empty": (lambda d, m: (d / ST).write_bytes(b""), [ST, "corrupt"]),
    "config-empty": (lambda d, m: (d / CJ).write_bytes(b""), [CJ, "corrupt"]),
    "config-truncated": (lambda d, m: (d / CJ).write_bytes((d / CJ).read_bytes()[:-30]), [CJ, "corrupt"]),
    "config-nested-too-deeply": (lambda d, m: (d / CJ).write_bytes(b"[" * 100_000), [CJ, "corrupt"]),
    "vocab-nested-too-deeply": (lambda d, m: (d / VJ).write_bytes(b"{\"a\":" * 100_000), [VJ, "cannot read"]),
    "vocab-empty": (lambda d, m: (d / VJ).write_bytes(b""), [VJ, "cannot read vocabulary"]),
    "vocab-truncated": (lambda d, m: (d / VJ).write_bytes((d / VJ).read_bytes()[:-5]), [VJ, "cannot read vocabulary"]),
    "vocab-encoding": (lambda d, m: (d / VJ).write_bytes(NON_UTF8), [VJ, "cannot read vocabulary"]),
    "vocab-duplicates": (lambda d, m: (d / VJ).write_text(json.dumps(
        {"format": "rnnlens-vocab", "itos": ["<pad>", "<unk>", "a", "a"]})), [VJ, "duplicate"]),
    "weights-missing": (lambda d, m: (d / ST).unlink(), ["missing model.safetensors"]),
    "weights-a-folder": (lambda d, m: ((d / ST).unlink(), (d / ST).mkdir()), ["missing model.safetensors"]),
    # swapped files: one file of the folder taken from another model, or two files exchanged
    "vocab-of-another-model": (lambda d, m: shutil.copy(m["clf3"] / VJ, d / VJ), [VJ, "11 tokens", "says", "10"]),
    "weights-of-another-model": (lambda d, m: shutil.copy(m["clf3"] / ST, d / ST),
                                 [ST, "does not match config.json", "in the file", "different models"]),
    "config-of-another-model": (lambda d, m: shutil.copy(m["clf3"] / CJ, d / CJ),
                                [VJ, "10 tokens", "says the model has 11", "different models"]),
    "config-and-vocab-exchanged": (lambda d, m: ((d / "t").write_bytes((d / CJ).read_bytes()),
                                                 shutil.move(d / VJ, d / CJ), shutil.move(d / "t", d / VJ)),
                                   [CJ, "not an rnnlens checkpoint config"]),
    "weights-and-vocab-exchanged": (lambda d, m: ((d / "t").write_bytes((d / ST).read_bytes()),
                                                  shutil.move(d / VJ, d / ST), shutil.move(d / "t", d / VJ)),
                                    [VJ, "cannot read vocabulary"]),
    # a file of a model with the same sizes: only the hashes in config.json tell
    "weights-of-a-same-shape-model": (lambda d, m: shutil.copy(m["twin"] / ST, d / ST), [ST, "does not belong"]),
    "vocab-of-a-same-size-model": (lambda d, m: shutil.copy(m["twin"] / VJ, d / VJ), [VJ, "does not belong"]),
    # vocabulary / checkpoint mismatch within the folder
    "vocab-size-edited": (lambda d, m: _edit_config(d, lambda c: c.update(vocab_size=12)), [VJ, "10 tokens", "12"]),
    "labels-edited": (lambda d, m: _edit_config(d, lambda c: c.update(labels=["a", "b", "c"])),
                      [ST, "head", "[1, 4] in the file"]),
    "hidden-size-edited": (lambda d, m: _edit_config(d, lambda c: c["config"]["model"].update(hidden_size=5)),
                           [ST, "does not match config.json"]),
    # a config from another version, or not from rnnlens at all
    "config-version": (lambda d, m: _edit_config(d, lambda c: c["config"].update(version=2)),
                       [CJ, "config version 2 is not supported"]),
    "config-format": (lambda d, m: _edit_config(d, lambda c: c.update(format="other-tool")),
                      [CJ, "not an rnnlens checkpoint config"]),
    "config-unknown-key": (lambda d, m: _edit_config(d, lambda c: c["config"]["model"].update(hiden=3)),
                           [CJ, "model.hiden"]),
    "config-bad-tokenizer": (lambda d, m: _edit_config(d, lambda c: c.update(tokenizer={"lower": True})),
                             [CJ, "tokenizer"]),
    "config-bad-labels": (lambda d, m: _edit_config(d, lambda c: c.update(labels="ab")), [CJ, "labels"]),
    "config-repeated-labels": (lambda d, m: _edit_config(d, lambda c: c.update(labels=[c["labels"][0]] * len(c["labels"]))),
                               [CJ, "each label once"]),
    "config-bad-task": (lambda d, m: _edit_config(d, lambda c: c.update(task="poetry")), [CJ, "poetry"]),
    "config-bad-cell": (lambda d, m: _edit_config(d, lambda c: c["config"]["model"].update(cell="nope")),
                        [CJ, "nope"]),
    "config-no-vocab-size": (lambda d, m: _edit_config(d, lambda c: c.pop("vocab_size")), [CJ, "vocab_size"]),
    "config-bad-trained-in": (lambda d, m: _edit_config(d, lambda c: c.update(trained_in=5)), [CJ, "trained_in"]),
    "config-trained-in-a-list": (lambda d, m: _edit_config(d, lambda c: c.update(trained_in=["a"])),
                                 [CJ, "trained_in"]),
}


@pytest.mark.parametrize("kind", list(BAD_CHECKPOINTS))
def test_bad_model_directory(models, tmp_path, capsys, kind):
    damage, needles = BAD_CHECKPOINTS[kind]
    d = tmp_path / "model"
    shutil.copytree(models["clf"], d)
    damage(d, models)
    code, _, err = run(capsys, "explain", "--model", d, "the film was good")
    assert_clean_error(code, err, *needles)
    assert str(d) in err                                  # the message names the folder or a file in it


def test_model_directory_that_is_a_file(tmp_path, capsys):
    (tmp_path / "m").write_text("x")
    assert_clean_error(*run(capsys, "explain", "--model", tmp_path / "m", "good")[::2], "is a file, not a folder")


# --- nothing is ever unpickled -------------------------------------------------------------

@pytest.mark.parametrize("target", [ST, CJ, VJ, "metrics.jsonl"])
def test_pickle_payload_named_like_a_checkpoint_file_is_refused(models, tmp_path, capsys, target):
    d = tmp_path / "model"
    shutil.copytree(models["clf"], d)
    marker = tmp_path / "UNPICKLED"
    (d / target).write_bytes(_pickle_payload(marker))
    assert not marker.exists()
    for cmd in (["explain", "--model", d, "the film was good"],
                ["report", "--model", d, "--out", tmp_path / "r", "--no-negation", "--faithfulness-sentences", "0",
                 "--samples", "0", "--quiet"]):
        code, _, err = run(capsys, *cmd)
        if target == "metrics.jsonl":          # not needed to load a model; the report skips unreadable lines
            assert "Traceback" not in err
        else:
            assert_clean_error(code, err, str(d / target))
    assert not marker.exists()


@pytest.mark.parametrize("name", ["pytorch_model.bin", "model.pt", "checkpoint.pth", "model.pkl"])
def test_pickle_checkpoint_in_place_of_safetensors_is_refused(models, tmp_path, capsys, name):
    d = tmp_path / "model"
    shutil.copytree(models["clf"], d)
    (d / ST).unlink()
    marker = tmp_path / "UNPICKLED"
    (d / name).write_bytes(_pickle_payload(marker))
    assert_clean_error(*run(capsys, "explain", "--model", d, "good")[::2], "missing model.safetensors")
    assert not marker.exists()


def test_no_code_path_can_unpickle():
    """The package never calls an unpickler: no pickle/torch.load/numpy allow_pickle anywhere."""
    import re

    import rnnlens

    pat = re.compile(r"\bimport pickle\b|\bfrom pickle\b|\bpickle\.load|\btorch\.load\b|allow_pickle\s*=\s*True|"
                     r"\bjoblib\b|\bdill\b|\bcloudpickle\b|\bshelve\b|\bmarshal\.load|yaml\.load\(|\bunsafe_load\b")
    hits = [f"{p}:{no}: {line.strip()}" for p in Path(rnnlens.__file__).parent.rglob("*.py")
            for no, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if pat.search(line)]
    assert hits == [], hits


# --- readers behind the language-model commands: MSR questions/answers, CoNLL-U, text -------

QUESTIONS = "id,question,a),b),c),d),e)\n1,the film was _____ .,good,bad,not,very,the\n"


@pytest.mark.parametrize("questions,answers,needles", [
    ("id,question,a),b),c),d),e)\n1,the film _____ .,good,bad\n", None, ["q.csv:2:", "CSV fields"]),
    ("id,question,a),b),c),d),e)\n1,no gap here,good,bad,not,very,the\n", None, ["q.csv:2:", "gap"]),
    ("", None, ["q.csv", "no questions"]),
    (NON_UTF8, None, ["q.csv", "UTF-8"]),
    ("1a) the [film] was good\n", None, ["q.csv:1:", "expected 5 (a-e)"]),
    (QUESTIONS, "id,answer\n1,z\n", ["a.csv:2:", "not one of a, b"]),
    (QUESTIONS, "", ["a.csv", "no answers"]),
    (QUESTIONS, NON_UTF8, ["a.csv", "UTF-8"]),
    (QUESTIONS, "id,answer\n1,a\n7,b\n", ["a.csv", "not in", "e.g. 7"]),
], ids=["fields", "gap", "empty-q", "encoding-q", "machine-cut", "answer", "empty-a", "encoding-a", "extra-a"])
def test_bad_completion_files(models, tmp_path, capsys, questions, answers, needles):
    q = tmp_path / "q.csv"
    q.write_bytes(questions if isinstance(questions, bytes) else questions.encode())
    args = ["complete", "--model", models["lm"], "--questions", q]
    if answers is not None:
        (tmp_path / "a.csv").write_bytes(answers if isinstance(answers, bytes) else answers.encode())
        args += ["--answers", tmp_path / "a.csv"]
    assert_clean_error(*run(capsys, *args)[::2], *needles)


def _conllu_row(i, form, head, rel):
    return f"{i}\t{form}\t_\t_\t_\t_\t{head}\t{rel}\t_\t_\n"


GOOD_PARSE = _conllu_row(1, "the", 2, "det") + _conllu_row(2, "film", 0, "root")


@pytest.mark.parametrize("parses,needles", [
    (GOOD_PARSE + "3\tcut\n", ["p.conllu:3:", "10 tab-separated"]),
    (_conllu_row(1, "the", "x", "det"), ["p.conllu:1:", "HEAD"]),
    (_conllu_row(1, "the", 2, "det") + _conllu_row(2, "film", 1, "nsubj"), ["p.conllu:1:", "no root"]),
    (_conllu_row(1, "the", 5, "root"), ["p.conllu:1:", "past the end"]),
    ("", ["p.conllu", "no sentences"]),
    ("# only a comment\n\n", ["p.conllu", "no sentences"]),
    (GOOD_PARSE.encode() + NON_UTF8, ["p.conllu", "not valid UTF-8"]),
], ids=["columns", "head", "no-root", "head-range", "empty", "comment-only", "encoding"])
def test_bad_conllu_parses(models, tmp_path, capsys, parses, needles):
    p = tmp_path / "p.conllu"
    p.write_bytes(parses if isinstance(parses, bytes) else parses.encode())
    (tmp_path / "s.txt").write_text("the film\n")
    assert_clean_error(*run(capsys, "attention", "--model", models["lm"], "--data", tmp_path / "s.txt",
                            "--parses", p)[::2], *needles)


@pytest.mark.parametrize("content,needles", [
    (b"", ["s.txt", "no words"]),
    (b"\n  \n", ["s.txt", "no words"]),
    (b"the film\n" + NON_UTF8 + b"\n", ["s.txt", "not valid UTF-8"]),
], ids=["empty", "blank", "encoding"])
def test_bad_attention_text(models, tmp_path, capsys, content, needles):
    (tmp_path / "s.txt").write_bytes(content)
    assert_clean_error(*run(capsys, "attention", "--model", models["lm"], "--data", tmp_path / "s.txt")[::2], *needles)


@pytest.mark.parametrize("text,gold,needles", [
    ("the keys are here\n", "1\tare\tis\tx\n", ["t.gold:1:", "integers"]),
    ("the keys are here\n", "1\tare\n", ["t.gold:1:", "4 columns"]),
    ("the keys are here\n", "9\tare\tis\t0\n", ["t.gold:1:", "outside the sentence"]),
    ("the keys are here\nand more\n", "1\tare\tis\t0\n", ["t.text", "2 lines", "t.gold", "1"]),
    ("", "", ["t.text", "no items"]),
    (b"the keys " + NON_UTF8 + b"\n", "1\tare\tis\t0\n", ["t.text", "not valid UTF-8"]),
], ids=["integer", "columns", "index", "line-count", "empty", "encoding"])
def test_bad_agreement_test_set(tmp_path, text, gold, needles):
    """Read by `rnnlens repro` (agreement tables); the reader's own errors, checked directly."""
    from rnnlens.data.agreement import read_agreement_testset

    for name, content in (("t.text", text), ("t.gold", gold)):
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(RnnlensError) as e:
        read_agreement_testset(tmp_path / "t")
    msg = str(e.value)
    assert "\n" not in msg
    for n in needles:
        assert n in msg, msg


def test_eval_on_data_whose_labels_changed(tmp_path, capsys):
    """A model trained on label<TAB>text files, evaluated after the files changed: a label
    missing from a split, and a training file whose labels are no longer the model's."""
    rows = ["pos\ta fine film", "neg\ta dull film"] * 10
    (tmp_path / "train.tsv").write_text("\n".join(rows) + "\n")
    (tmp_path / "test.tsv").write_text("pos\tfine\nneg\tdull\n")
    m = tmp_path / "m"
    assert run(capsys, "train", "--corpus", "tsv", "--train-file", tmp_path / "train.tsv", "--test-file",
               tmp_path / "test.tsv", "--out", m, *TINY)[0] == 0
    (tmp_path / "test.tsv").write_text("pos\tfine\nmeh\tso so\n")
    assert_clean_error(*run(capsys, "eval", "--model", m)[::2], "test.tsv", "meh", "training data")
    (tmp_path / "train.tsv").write_text("\n".join(r.replace("neg\t", "bad\t") for r in rows) + "\n")
    (tmp_path / "test.tsv").write_text("pos\tfine\n")
    assert_clean_error(*run(capsys, "eval", "--model", m)[::2], "labels the model was trained on")
    (tmp_path / "train.tsv").write_text("")
    assert_clean_error(*run(capsys, "eval", "--model", m)[::2], "train.tsv", "no examples")


# --- HTML escapes data text ------------------------------------------------------------------

MARKUP = '<script>alert(1)</script><img src=x onerror=alert(2)>"&'


def test_report_escapes_labels_words_paths_and_text(tmp_path, capsys):
    """Every string from data (labels, vocabulary words, the model folder's name, --text)
    appears in report.html as text: no element or attribute comes from it."""
    d = untrained_checkpoint(tmp_path / "m<b>old</b>", labels=("<i>neg</i>", MARKUP),
                             words=WORDS + ["<script>", "<td>", "x\"onload=\"y"])
    out = tmp_path / "r"
    code, _, err = run(capsys, "report", "--model", d, "--out", out, "--text", MARKUP + " the film <td> was good",
                       "--no-negation", "--faithfulness-sentences", "0", "--quiet")
    assert code == 0, err
    page = (out / "report.html").read_text(encoding="utf-8")
    low = page.lower()
    assert "<script" not in low and "<img src=x" not in low and "<b>old" not in low and "<i>neg" not in low
    assert low.count("<img") == low.count('<img alt="') == low.count('src="data:image/png;base64,')  # figures only
    assert 'onload="' not in low and "<td>\"" not in low
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;i&gt;neg&lt;/i&gt;" in page


# --- names the tool makes never lead outside the output folder --------------------------------

def _files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.mark.parametrize("model_name", ["..", "../../escape", "a/../../b", "..\\..\\x", "m<>:|?*\"'", "/"])
def test_model_names_are_plain_file_names(model_name):
    from rnnlens.app.negation import model_names

    for name in model_names([model_name, model_name]):
        assert name and "/" not in name and "\\" not in name and name not in (".", "..")
        assert Path(name).name == name and not Path(name).is_absolute()


def test_negation_files_stay_in_out_whatever_the_model_path(models, tmp_path, capsys):
    """negation-<model>.png is named after --model; a path full of '..' and odd characters
    still writes only inside --out."""
    work = tmp_path / "work"
    odd = work / "deep" / "..%2F..%2Fx<y>"
    shutil.copytree(models["clf"], odd)
    (work / "adj.json").write_text(json.dumps({"positive": ["good"], "negative": ["bad"]}))
    before = _files_under(tmp_path)
    out = work / "out"
    code, _, err = run(capsys, "negation", "--model", work / "deep" / ".." / "deep" / odd.name,
                       "--model", odd, "--adjectives", work / "adj.json", "--out", out)
    assert code == 0, err
    assert _files_under(tmp_path) - before == {str(p.relative_to(tmp_path)) for p in [out, *out.iterdir()]}
    assert all(p.parent == out for p in out.iterdir()) and len(list(out.glob("negation-*.png"))) == 2


def test_links_planted_in_the_output_folder_are_not_followed(models, tmp_path, capsys):
    """--force over a folder whose entries are links (named like every file the tool writes)
    to files outside: the new folder replaces the links; the files outside are untouched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    names = ["config.json", "vocab.json", "model.safetensors", "metrics.jsonl", "report.html", "report.json"]
    for name in names:
        (outside / name).write_text("precious")
    for cmd in (["train", *TINY], ["report", "--model", models["clf"], "--no-negation", "--faithfulness-sentences", "0",
                                   "--samples", "0", "--quiet"]):
        out = tmp_path / cmd[0]
        out.mkdir()
        for name in names:
            (out / name).symlink_to(outside / name)
        code, _, err = run(capsys, *cmd, "--out", out, "--force")
        assert code == 0, err
        assert not any(p.is_symlink() for p in out.rglob("*"))
        assert all((outside / n).read_text() == "precious" for n in names)


def test_explain_png_does_not_follow_a_planted_temporary_name(models, tmp_path, capsys):
    """The PNG is written through a new temporary file, never through a name an attacker
    could have linked to a file elsewhere."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    png = tmp_path / "h.png"
    for guess in (f".{png.name}.tmp.png", f".{png.name}.tmp", f"{png.name}.tmp"):
        (tmp_path / guess).symlink_to(victim)
    code, _, err = run(capsys, "explain", "--model", models["clf"], "the film was good", "--png", png)
    assert code == 0, err
    assert png.read_bytes()[:4] == b"\x89PNG" and victim.read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir() if not p.is_symlink()) == ["h.png", "victim.txt"]


def test_text_the_terminal_cannot_encode_is_escaped(models, capsys):
    """A byte of argv that is not UTF-8 arrives as a lone surrogate; printing it back (the
    n-gram table, the unknown-word warning) must not end in a UnicodeEncodeError."""
    code, out, err = run(capsys, "explain", "--model", models["clf"], "the film \udcff was good")
    assert code == 0 and "Traceback" not in err
    assert "\ufffd" in out                     # the byte read as U+FFFD (rnnlens.data.tokenize.clean_text)


def test_model_names_never_repeat():
    """Three models in folders m, m and m-2 get three names (three figure files), not two."""
    from rnnlens.app.negation import model_names

    names = model_names(["a/m", "b/m", "c/m-2", "d/m"])
    assert len(set(names)) == 4 and names[:2] == ["m", "m-2"]


@pytest.mark.parametrize("extra,needle", [
    (["--cell", "gru", "--clamp", "1.5"], "model.clamp does nothing for the gru cell"),
    (["--cell", "lstm", "--window", "5"], "model.window does nothing for the lstm cell"),
    (["--cell", "gru", "--word-dropout", "matrix"], "model.word_dropout does nothing for the gru cell"),
    (["--cell", "rrnn-b", "--spectral-norm", "true"], "model.spectral_norm does nothing for the rrnn-b cell"),
    (["--cell", "gru", "--memory-size", "3"], "model.memory_size is for a memory block"),
    (["--cell", "gru", "--memory-composition", "linear"], "model.memory_composition is for a memory block"),
    (["--cell", "transformer", "--heads", "2", "--cell-bias", "false"], "model.cell_bias false does nothing"),
    (["--task", "dyck", "--cell", "lstm", "--pooling", "mean"], "model.pooling does nothing for the dyck task"),
    (["--task", "dyck", "--cell", "lstm", "--mlp-hidden", "4"], "model.mlp_hidden does nothing for the dyck task"),
])
def test_a_setting_the_model_would_ignore_is_refused(extra, needle, tmp_path, capsys):
    """A setting that would change nothing (a cell that does not read it, a head that does not
    pool) is one line and exit code 2, with nothing written, not a run that silently differs
    from what was asked."""
    out = tmp_path / "m"
    code, _, err = run(capsys, "train", "--out", out, *extra, *TINY, "--threads", "1", "--max-train-examples", "40")
    assert_clean_error(code, err, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="no /dev/zero here")
def test_endless_small_files_are_refused_not_read_without_bound(models, tmp_path, capsys):
    """A config or an adjectives list is small by nature: an endless file (/dev/zero) is a
    one-line error after SMALL_FILE_LIMIT bytes, not a read until memory runs out."""
    code, _, err = run(capsys, "train", "--config", "/dev/zero", "--out", tmp_path / "x")
    assert_clean_error(code, err, "config /dev/zero is larger than")
    code, _, err = run(capsys, "negation", "--model", models["clf"], "--adjectives", "/dev/zero", "--quiet")
    assert_clean_error(code, err, "adjectives file /dev/zero is larger than")
