"""Readers for public NLP datasets and the dataset registry.

Fixture tests pin exact outputs on small hand-written files in tests/fixtures/;
real-data tests (skipped without the shared data folder) pin published counts.
"""
import gzip
import shutil
from collections import Counter
from pathlib import Path

import pytest

from rnnlens.data import datasets as D
from rnnlens.data import agreement as AGR
from rnnlens.data import readers as R
from rnnlens.data import semeval_conll as SC
from rnnlens.data.batching import Example
from rnnlens.errors import RnnlensError
from tests.support import FIXTURES as FIX


def write(tmp_path, name, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8", newline="")
    return p


def raises_at(path, line: int):
    """Expect an RnnlensError naming `path:line`."""
    return pytest.raises(RnnlensError, match=f"^{str(path)}:{line}:")


# --- missing files ----------------------------------------------------------------

@pytest.mark.parametrize("reader", [R.read_sst_trees, R.read_glue_sst2, R.read_label_first, R.read_trec,
                                    R.read_ag_news, R.read_imdb, SC.read_semeval, SC.read_conll2003,
                                    R.read_lm_text])
def test_missing_file_is_a_clear_error(tmp_path, reader):
    missing = tmp_path / "nope.txt"
    with pytest.raises(RnnlensError, match=f"data file {missing} does not exist"):
        reader(missing)


# --- SST trees --------------------------------------------------------------------

def test_sst_sentences():
    assert R.read_sst_trees(FIX / "sst_trees.txt") == [
        (["The", "Rock", "is", "great", "."], 3),
        (["-LRB-", "bad", "-RRB-"], 1),  # PTB escapes left as written
    ]
    assert R.read_sst_trees(FIX / "sst_trees.txt", lowercase=True)[0][0] == ["the", "rock", "is", "great", "."]


def test_sst_phrases_every_node_in_preorder():
    got = R.read_sst_trees(FIX / "sst_trees.txt", phrases=True)
    assert got == [
        (["The", "Rock", "is", "great", "."], 3),
        (["The", "Rock"], 2), (["The"], 2), (["Rock"], 2),
        (["is", "great", "."], 4), (["is", "great"], 3), (["is"], 2), (["great"], 4), (["."], 2),
        (["-LRB-", "bad", "-RRB-"], 1), (["-LRB-"], 2), (["bad", "-RRB-"], 0), (["bad"], 0), (["-RRB-"], 2),
    ]


def test_parse_sst_tree_spans():
    leaves, nodes = R.parse_sst_tree("(3 (2 a) (4 (4 b) (2 c)))")
    assert leaves == ["a", "b", "c"]
    assert nodes == [(3, 0, 3), (2, 0, 1), (4, 1, 3), (4, 1, 2), (2, 2, 3)]
    # A no-break space is part of a token (SST has the leaf "8\u00a01\/2").
    assert R.parse_sst_tree("(2 8\u00a01\\/2)")[0] == ["8\u00a01\\/2"]


@pytest.mark.parametrize("bad, why", [
    ("(3 (2 a) (2 b)", "not closed"),
    ("(3 (2 a) (2 b)))", "without"),
    ("(x (2 a))", "not an integer"),
    ("(7 (2 a))", "not in 0..4"),
    ("(2 a (2 b))", "both a word"),
    ("(2 (2 b) a)", "both a word"),
    ("(2 a b)", "more than one word"),
    ("(2 a) (2 b)", "after the end"),
    ("(2 )", "empty node"),
    ("(2 (() a))", "not followed by a label"),
    ("a", "outside any node"),
])
def test_sst_malformed_tree_names_file_and_line(tmp_path, bad, why):
    p = write(tmp_path, "t.txt", "(2 (2 ok) (2 fine))\n" + bad + "\n")
    with raises_at(p, 2) as e:
        R.read_sst_trees(p)
    assert why in str(e.value)
    assert "\n" not in str(e.value)


def test_sst_label_schemes():
    assert [R.sst_label(f, "binary") for f in range(5)] == [0, 0, None, 1, 1]
    assert [R.sst_label(f, "fine") for f in range(5)] == [0, 1, 2, 3, 4]
    assert [R.sst_label(f, "regression") for f in range(5)] == [-2.0, -1.0, 0.0, 1.0, 2.0]
    assert isinstance(R.sst_label(4, "regression"), float)
    with pytest.raises(RnnlensError, match="binary, fine, regression"):
        R.sst_label(1, "ternary")
    with pytest.raises(RnnlensError, match="0..4"):
        R.sst_label(5, "fine")


# --- GLUE SST-2, label-first, TREC, AG News, IMDB ----------------------------------

def test_glue_sst2():
    assert R.read_glue_sst2(FIX / "glue_sst2.tsv") == [
        (["it", "'s", "a", "charming", "journey", "."], "1"),
        (["unflinchingly", "bleak"], "0"),
    ]


def test_glue_sst2_errors(tmp_path):
    no_header = write(tmp_path, "a.tsv", "good film\t1\n")
    with raises_at(no_header, 1):
        R.read_glue_sst2(no_header)
    no_tab = write(tmp_path, "b.tsv", "sentence\tlabel\nfine \t1\nno tab here\n")
    with raises_at(no_tab, 3):
        R.read_glue_sst2(no_tab)


def test_label_first_latin1_fallback():
    # 0xe9 is e-acute; 0x85 (cp1252 ellipsis) decodes to U+0085, which must NOT split
    # the line (str.splitlines would) and is whitespace to the tokenizer.
    assert R.read_label_first(FIX / "label_first_latin1.all") == [
        (["a", "caf\u00e9", ",", "nice", "really", "."], "1"),
        (["dull", ",", "isn't", "it", "?"], "0"),
        ([], "1"),  # a label with no sentence (as in custrev.all) is kept, empty
    ]


def test_label_first_utf8_keeps_case_when_asked():
    assert R.read_label_first(FIX / "label_first_utf8.all", lowercase=False) == [
        (["Caf\u00e9", "Au", "Lait", "!"], "1"), (["meh"], "0")]


def test_trec_coarse_label_and_latin1():
    assert R.read_trec(FIX / "trec.txt") == [
        (["how", "did", "serfdom", "develop", "?"], "DESC"),
        (["what", "is", "the", "capital", "of", "fr\u00f0nce", "?"], "LOC"),  # byte 0xf0 via Latin-1
    ]


def test_trec_malformed(tmp_path):
    p = write(tmp_path, "trec", "DESC:manner How ?\nno label here\n")
    with raises_at(p, 2):
        R.read_trec(p)


def test_ag_news_csv():
    assert R.read_ag_news(FIX / "ag_news.csv") == [
        (["fears", "for", "t", "n", "pension", "unions", "say", "they", "are", '"', "disappointed", '"',
          "after", "talks", "."], "3"),
        # backslash line continuations became spaces: "second\team" -> "second team"
        (["race", ",", "on", "a", "second", "team", "of", "rocketeers", ",", "the", "best", "."], "4"),
    ]


def test_ag_news_malformed(tmp_path):
    p = write(tmp_path, "ag.csv", '"1","t","d"\n"2","only two"\n')
    with raises_at(p, 2):
        R.read_ag_news(p)


def test_imdb_gzip_and_plain():
    want = [(["bad", ".", "really", "bad"], "0"), (["great", "film"], "1")]
    assert R.read_imdb(FIX / "imdb.jsonl.gz") == want
    assert R.read_imdb(FIX / "imdb.jsonl") == want


def test_imdb_errors(tmp_path):
    p = write(tmp_path, "i.jsonl", '{"label": 1, "text": "ok"}\n{"label": 1, "text": \n')
    with raises_at(p, 2):
        R.read_imdb(p)
    no_text = write(tmp_path, "j.jsonl", '{"label": 1}\n')
    with raises_at(no_text, 1):
        R.read_imdb(no_text)
    bad_gz = tmp_path / "k.jsonl.gz"
    bad_gz.write_bytes(gzip.compress(b'{"label": 1, "text": "ok"}\n')[:-8])
    with pytest.raises(RnnlensError, match="not a readable gzip"):
        R.read_imdb(bad_gz)


def test_utf8_required_where_no_fallback(tmp_path):
    p = tmp_path / "x.txt"
    p.write_bytes(b"caf\xe9\n")
    with pytest.raises(RnnlensError, match="not valid UTF-8"):
        R.read_lm_text(p)


# --- SemEval ----------------------------------------------------------------------

def test_semeval_keeps_entity_markers():
    got = SC.read_semeval(FIX / "semeval.txt")
    assert got == [
        (["the", "system", "has", "an", "arrayed", "<e1>", "configuration", "</e1>", "of", "antenna",
          "<e2>", "elements", "</e2>", "."], "Component-Whole(e2,e1)"),
        (["the", "<e1>", "child", "</e1>", "was", "wrapped", "into", "the", "<e2>", "cradle", "</e2>", "."],
         "Other"),
    ]


def test_semeval_key_overrides_and_checks():
    # id 1: undirected key agreeing with the block keeps the direction; id 2: a directed key replaces.
    got = SC.read_semeval(FIX / "semeval.txt", key_path=FIX / "semeval_key.txt")
    assert [lab for _, lab in got] == ["Component-Whole(e2,e1)", "Entity-Destination(e1,e2)"]


def test_semeval_key_disagreement_and_foreign_ids(tmp_path):
    key = write(tmp_path, "key.txt", "1\tMessage-Topic\n")
    with pytest.raises(RnnlensError, match=f"{key}:1: key says Message-Topic"):
        SC.read_semeval(FIX / "semeval.txt", key_path=key)
    key2 = write(tmp_path, "key2.txt", "99\tOther\n")
    with pytest.raises(RnnlensError, match="not in"):
        SC.read_semeval(FIX / "semeval.txt", key_path=key2)


def test_semeval_labels():
    assert len(SC.SEMEVAL_LABELS) == 19 == len(set(SC.SEMEVAL_LABELS))
    assert SC.SEMEVAL_LABELS[:3] == ["Other", "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)"]


@pytest.mark.parametrize("block, line", [
    ('1\t"a <e1>b</e1> c <e2>d</e2>"\nNot-A-Label\nComment:\n', 2),
    ('1\t"a <e1>b</e1> c d"\nOther\nComment:\n', 1),
    ('1\t"a <e1>b</e1> c <e2>d</e2>"\nOther\nno comment\n', 3),
    ('1 a b c\nOther\nComment:\n', 1),
])
def test_semeval_malformed(tmp_path, block, line):
    good = '7\t"x <e1>y</e1> <e2>z</e2>"\nOther\nComment:\n\n'
    p = write(tmp_path, "s.txt", good + block)
    with raises_at(p, 4 + line):
        SC.read_semeval(p)


# --- CoNLL-2003 ---------------------------------------------------------------------

def test_iob1_bio_iobes_hand_cases():
    iob1 = ["I-LOC", "I-LOC", "O", "I-PER", "B-PER"]
    bio = SC.iob1_to_bio(iob1)
    assert bio == ["B-LOC", "I-LOC", "O", "B-PER", "B-PER"]
    assert SC.bio_to_iobes(bio) == ["B-LOC", "E-LOC", "O", "S-PER", "S-PER"]
    assert SC.bio_to_iobes(["B-ORG", "I-ORG", "I-ORG", "I-MISC"]) == ["B-ORG", "I-ORG", "E-ORG", "S-MISC"]
    assert SC.iob1_to_bio(["I-ORG", "I-MISC", "B-MISC", "I-MISC"]) == ["B-ORG", "B-MISC", "B-MISC", "I-MISC"]
    assert SC.bio_to_iobes([]) == []
    with pytest.raises(RnnlensError, match="E-PER"):
        SC.iob1_to_bio(["E-PER"])


def test_conll_schemes_and_docstart():
    p = FIX / "conll.txt"
    toks = [["EU", "rejects", "German", "."], ["Peter", "Blackburn"], ["In", "Paris", "Lyon", "Nice"]]
    want = {
        "iob1": [["I-ORG", "O", "I-MISC", "O"], ["I-PER", "I-PER"], ["O", "I-LOC", "B-LOC", "I-LOC"]],
        "bio": [["B-ORG", "O", "B-MISC", "O"], ["B-PER", "I-PER"], ["O", "B-LOC", "B-LOC", "I-LOC"]],
        "iobes": [["S-ORG", "O", "S-MISC", "O"], ["B-PER", "E-PER"], ["O", "S-LOC", "B-LOC", "E-LOC"]],
    }
    for scheme, tags in want.items():
        assert SC.read_conll2003(p, scheme=scheme) == list(zip(toks, tags))
    assert SC.read_conll2003(p) == list(zip(toks, want["iobes"]))  # default scheme
    with pytest.raises(RnnlensError, match="iob1, bio, iobes"):
        SC.read_conll2003(p, scheme="bilou")


def test_conll_malformed(tmp_path):
    p = write(tmp_path, "c.txt", "EU NNP I-NP I-ORG\n\nthree columns only\n")
    with raises_at(p, 3):
        SC.read_conll2003(p)
    q = write(tmp_path, "d.txt", "EU NNP I-NP X-ORG\n")
    with raises_at(q, 1):
        SC.read_conll2003(q)


# --- LM text -----------------------------------------------------------------------------

def test_lm_text_eos_on_every_line():
    # empty lines get an <eos> too; only ASCII-or-Unicode whitespace splits (str.split)
    assert R.read_lm_text(FIX / "lm.txt") == ["the", "cat", "sat", "<eos>", "<eos>", "=", "Heading", "=",
                                              "<eos>", "a", "b", "<eos>"]


# --- registry helpers (no real data) ------------------------------------------------------

def test_random_split_is_deterministic_and_complete():
    items = list(range(103))
    a = D.random_split(items, (0.8, 0.1, 0.1), seed=3)
    assert [len(x) for x in a] == [83, 10, 10]
    assert sorted(sum(a, [])) == items
    assert all(x == sorted(x) for x in a)  # parts keep the original order
    assert a == D.random_split(items, (0.8, 0.1, 0.1), seed=3)
    assert a != D.random_split(items, (0.8, 0.1, 0.1), seed=4)
    rest, dev = D.carve_dev(items, seed=3)
    assert (len(rest), len(dev)) == (93, 10) and sorted(rest + dev) == items


def test_unknown_dataset_lists_valid_names(tmp_path):
    with pytest.raises(RnnlensError) as e:
        D.load_dataset("sst3", tmp_path)
    assert "unknown dataset 'sst3'" in str(e.value)
    for name in D.DATASETS:
        assert name in str(e.value)


def test_loader_missing_data_dir(tmp_path):
    with pytest.raises(RnnlensError, match="does not exist"):
        D.load_dataset("trec", tmp_path / "nowhere")


def test_loader_missing_file_names_path(tmp_path):
    with pytest.raises(RnnlensError, match=str(tmp_path / "trec" / "TREC.train")):
        D.load_dataset("trec", tmp_path)


def test_ag_news_with_train_present(tmp_path):
    folder = tmp_path / "ag_news"
    folder.mkdir()
    rows = "".join(f'"{1 + i % 4}","title {i}","text number {i}"\n' for i in range(40))
    (folder / "train.csv").write_text(rows)
    shutil.copy(FIX / "ag_news.csv", folder / "test.csv")
    ds = D.load_dataset("ag_news", tmp_path, seed=1)
    assert ds.task == "classify" and ds.labels == ["1", "2", "3", "4"]
    assert {k: len(v) for k, v in ds.splits.items()} == {"train": 36, "dev": 4, "test": 2}
    assert ds.splits["test"][0].label == 2  # class "3"
    assert any("seed 1" in n for n in ds.notes)


# --- real data ------------------------------------------------------------------------------

def test_real_sst_trees(shared_data):
    trees = shared_data / "sst" / "trees"
    counts = {s: len(R.read_sst_trees(trees / f"{s}.txt")) for s in ("train", "dev", "test")}
    assert counts == {"train": 8544, "dev": 1101, "test": 2210}
    train_nodes = R.read_sst_trees(trees / "train.txt", phrases=True)
    assert len(train_nodes) == 318_582
    binary = [R.sst_label(lab, "binary") for _, lab in train_nodes]
    assert Counter(binary) == {1: 56_187, 0: 42_607, None: 318_582 - 98_794}
    unique = {tuple(t) for t, lab in train_nodes if lab != 2}
    assert len(unique) == 77_616  # deduplicated (case kept): far from the paper's 98,794


def test_real_conll(shared_data):
    path = shared_data / "conll2003" / "eng.train"
    sents = SC.read_conll2003(path, scheme="iob1")
    assert len(sents) == 14_041
    assert sum(len(t) for t, _ in sents) == 203_621
    docstarts = sum(1 for line in path.read_text().split("\n") if line.startswith("-DOCSTART-"))
    assert docstarts == 946 and len(sents) + docstarts == 14_987
    assert Counter(t for _, tags in sents for t in tags)["B-MISC"] == 37
    assert sents[0] == (["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."],
                        ["I-ORG", "O", "I-MISC", "O", "O", "O", "I-MISC", "O", "O"])


def test_real_semeval(shared_data):
    d = shared_data / "semeval2010_task8"
    train = SC.read_semeval(d / "TRAIN_FILE.TXT")
    test = SC.read_semeval(d / "TEST_FILE_FULL.TXT", key_path=d / "TEST_FILE_KEY.TXT")
    assert (len(train), len(test)) == (8000, 2717)
    assert {lab for _, lab in train} == set(SC.SEMEVAL_LABELS)
    assert train[0][1] == "Component-Whole(e2,e1)"
    assert all(toks.count(m) == 1 for toks, _ in train + test for m in SC.SEMEVAL_MARKERS)


def test_real_lm_counts(shared_data):
    ptb = R.read_lm_text(shared_data / "ptb" / "ptb.train.txt")
    assert len(ptb) == 929_589
    assert len(ptb) - ptb.count("<eos>") == 887_521
    assert len(set(ptb)) == 10_000
    assert len(R.read_lm_text(shared_data / "wikitext-2" / "train.txt")) == 2_088_628


def test_real_small_readers(shared_data):
    glue = shared_data / "sst" / "sst2_glue"
    assert len(R.read_glue_sst2(glue / "train.tsv")) == 67_349
    assert len(R.read_glue_sst2(glue / "dev.tsv")) == 872
    mr = R.read_label_first(shared_data / "mr" / "rt-polarity.all")  # Latin-1 file
    assert len(mr) == 10_662 and Counter(lab for _, lab in mr) == {"0": 5331, "1": 5331}
    assert len(R.read_label_first(shared_data / "subj" / "subj.all")) == 10_000
    trec = R.read_trec(shared_data / "trec" / "TREC.train")
    assert len(trec) == 5452 and len(R.read_trec(shared_data / "trec" / "TREC.test")) == 500
    assert Counter(lab for _, lab in trec) == {"ENTY": 1250, "HUM": 1223, "DESC": 1162, "NUM": 896,
                                               "LOC": 835, "ABBR": 86}
    ag = R.read_ag_news(shared_data / "ag_news" / "test.csv")
    assert len(ag) == 7600 and Counter(lab for _, lab in ag) == {str(c): 1900 for c in range(1, 5)}


# Each real dataset is loaded once per test session (IMDB and the SST phrase sets take seconds).
_LOADED: dict = {}


@pytest.fixture
def loaded(shared_data, tmp_path_factory):
    """name -> Dataset loaded from the real data, cached for the session.

    IMDB is loaded with the real train file but the 2-review fixture as its test file:
    tokenising both 25,000-review files would take most of this module's time budget,
    and train alone exercises the reader at full scale.
    """
    def load(name):
        if name not in _LOADED:
            data_dir = shared_data
            if name == "imdb":
                data_dir = tmp_path_factory.mktemp("data")
                (data_dir / "imdb").mkdir()
                (data_dir / "imdb" / "train.jsonl.gz").symlink_to(shared_data / "imdb" / "train.jsonl.gz")
                shutil.copy(FIX / "imdb.jsonl.gz", data_dir / "imdb" / "test.jsonl.gz")
            _LOADED[name] = D.load_dataset(name, data_dir)
        return _LOADED[name]
    return load


def sizes(ds):
    return {k: len(v) for k, v in ds.splits.items()}


REAL = {
    "sst2": ("classify", {"train": 98_794, "dev": 872, "test": 1821}),
    "sst5": ("classify", {"train": 318_582, "dev": 1101, "test": 2210}),
    "sst5-regress": ("regress", {"train": 318_582, "dev": 1101, "test": 2210}),
    "sst2-sentences": ("classify", {"train": 6920, "dev": 872, "test": 1821}),
    "sst2-glue": ("classify", {"train": 67_349, "dev": 872}),
    "mr": ("classify", {"train": 8530, "dev": 1066, "test": 1066}),
    "subj": ("classify", {"train": 8000, "dev": 1000, "test": 1000}),
    "cr": ("classify", {"train": 3017, "dev": 377, "test": 377}),     # 3,775 minus 4 empty lines
    "mpqa": ("classify", {"train": 8483, "dev": 1060, "test": 1060}),  # 10,606 minus 3 empty lines
    "trec": ("classify", {"train": 4907, "dev": 545, "test": 500}),
    "imdb": ("classify", {"train": 22_500, "dev": 2500, "test": 2}),  # test: the fixture (see `loaded`)
    "semeval": ("relation", {"train": 7200, "dev": 800, "test": 2717}),
    "conll2003": ("tag", {"train": 14_041, "dev": 3250, "test": 3453}),
    "ptb": ("lm", {"train": 1, "dev": 1, "test": 1}),
    "wikitext2": ("lm", {"train": 1, "dev": 1, "test": 1}),
}


def test_registry_covers_every_name():
    # ag_news and agreement lack files in the shared data; dyck and crossserial are generated
    # (both tested in test_formal_tasks.py)
    assert set(REAL) | {"ag_news", "agreement"} | set(D.BUILT_IN) == set(D.DATASETS)


@pytest.mark.parametrize("name", sorted(REAL))
def test_load_real_dataset(loaded, name):
    ds = loaded(name)
    task, want = REAL[name]
    assert (ds.name, ds.task, sizes(ds)) == (name, task, want)
    assert ds.notes and all(isinstance(n, str) for n in ds.notes)
    for split in ds.splits.values():
        for ex in split[:50]:
            assert isinstance(ex, Example) and ex.tokens
            if task in ("classify", "relation"):
                assert isinstance(ex.label, int) and 0 <= ex.label < len(ds.labels)
            elif task == "regress":
                assert isinstance(ex.label, float) and -2 <= ex.label <= 2
            elif task == "tag":
                assert len(ex.label) == len(ex.tokens) and all(0 <= t < len(ds.labels) for t in ex.label)
            else:
                assert ex.label is None and ds.labels is None


def test_real_imdb_train(loaded):
    ds = loaded("imdb")
    labels = Counter(ex.label for split in ("train", "dev") for ex in ds.splits[split])
    assert labels == {0: 12_500, 1: 12_500}  # the 25,000 reviews of train.jsonl.gz
    assert not any(a == "<" and b == "br" for ex in ds.splits["train"] for a, b in zip(ex.tokens, ex.tokens[1:]))


def test_real_label_lists(loaded):
    assert loaded("sst2").labels == ["negative", "positive"]
    assert loaded("sst5").labels == ["very negative", "negative", "neutral", "positive",
                                                  "very positive"]
    assert loaded("sst5-regress").labels is None
    assert loaded("mr").labels == ["0", "1"]
    assert loaded("trec").labels == ["ABBR", "DESC", "ENTY", "HUM", "LOC", "NUM"]
    assert loaded("semeval").labels == SC.SEMEVAL_LABELS
    tags = loaded("conll2003").labels
    assert tags[0] == "O" and tags[1:] == sorted(tags[1:]) and len(tags) == 17  # 4 types x BIES + O


def test_real_sst2_notes_and_counts(loaded):
    ds = loaded("sst2")
    train = ds.splits["train"]
    assert Counter(ex.label for ex in train) == {1: 56_187, 0: 42_607}
    assert any("98,794" in n and "equal" in n for n in ds.notes)
    assert any("77,195 unique" in n for n in ds.notes)  # lowercased, deduplicated
    assert Counter(ex.label for ex in loaded("sst5-regress").splits["dev"])[0.0] == 229


def test_real_split_notes_and_seed(shared_data, loaded):
    assert any("80/10/10" in n and "seed 0" in n for n in loaded("mr").notes)
    assert any("10% of train" in n for n in loaded("trec").notes)
    assert any("no test split" in n for n in loaded("sst2-glue").notes)
    assert any("4 line(s)" in n for n in loaded("cr").notes)
    other = D.load_dataset("mr", shared_data, seed=1)
    assert sizes(other) == sizes(loaded("mr"))
    assert other.splits["test"] != loaded("mr").splits["test"]
    assert D.load_dataset("mr", shared_data, seed=0).splits == loaded("mr").splits


def test_real_lm_streams(loaded):
    ptb = loaded("ptb")
    assert [len(ptb.splits[s][0].tokens) for s in ("train", "dev", "test")] == [929_589, 73_760, 82_430]
    wt2 = loaded("wikitext2")
    assert [len(wt2.splits[s][0].tokens) for s in ("train", "dev", "test")] == [2_088_628, 217_646, 245_569]


def test_real_semeval_markers_and_conll_case(loaded):
    ex = loaded("semeval").splits["test"][0]
    assert ex.tokens[:6] == ["the", "most", "common", "<e1>", "audits", "</e1>"]
    assert SC.SEMEVAL_LABELS[ex.label] == "Message-Topic(e1,e2)"
    conll = loaded("conll2003")
    first = conll.splits["train"][0]
    assert first.tokens[0] == "EU" and conll.labels[first.label[0]] == "S-ORG"


def test_real_ag_news_missing_train(shared_data):
    with pytest.raises(RnnlensError, match="train.csv is missing") as e:
        D.load_dataset("ag_news", shared_data)
    assert "only test.csv" in str(e.value)


def test_real_dataset_folder_as_data_dir(shared_data):
    assert sizes(D.load_dataset("trec", shared_data / "trec")) == REAL["trec"][1]
    assert sizes(D.load_dataset("sst2-sentences", shared_data / "sst")) == REAL["sst2-sentences"][1]
    trees = shared_data / "sst" / "trees"
    assert D.find_file(trees, "sst/trees/train.txt") == trees / "train.txt"


# --- a UTF-8 byte-order mark (Notepad writes one) is not part of the first field ----------------

BOM = "\ufeff"


def test_bom_is_stripped_by_every_text_reader(tmp_path):
    from rnnlens.data.tokenize import Tokenizer
    from rnnlens.data.vectors import load_vectors
    from rnnlens.data.vocab import Vocab

    tsv = write(tmp_path, "train.tsv", BOM + "positive\tgood film\nnegative\tbad film\n")
    assert [lab for _, lab in R.read_labelled_tsv(tsv, Tokenizer())] == ["positive", "negative"]
    assert R.read_text(tsv).startswith("positive")
    lf = write(tmp_path, "label_first.txt", BOM + "1 good film\n0 bad film\n")
    assert [lab for _, lab in R.read_label_first(lf, labels=("0", "1"))] == ["1", "0"]
    lm = write(tmp_path, "lm.txt", BOM + "the cat\n")
    assert R.read_lm_text(lm) == ["the", "cat", "<eos>"]
    conll = write(tmp_path, "c.txt", BOM + "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n")
    assert SC.read_conll2003(conll, scheme="iob1")[0][0] == ["EU", "rejects"]
    vec = write(tmp_path, "v.txt", BOM + "good 1 2\nbad 3 4\n")
    vocab = Vocab.build([["good", "bad"]])
    vectors, found = load_vectors(vec, vocab, 2)
    assert found == 2 and vectors[vocab.stoi["good"]].tolist() == [1.0, 2.0]


def test_bom_in_a_tsv_corpus_gives_the_labels_without_it(tmp_path):
    from rnnlens.config import Config
    from rnnlens.train.run import load_data

    rows = "\n".join(["positive\tgood film", "negative\tbad film"] * 3) + "\n"
    train = write(tmp_path, "train.tsv", BOM + rows)
    test = write(tmp_path, "test.tsv", BOM + rows)
    data = load_data(Config.from_dict({"data": {"corpus": "tsv", "train_file": str(train), "test_file": str(test)}}))
    assert data.labels == ["negative", "positive"]
    assert [ex.label for ex in data.splits["test"]] == [1, 0] * 3


def test_bom_in_linzen_tsv_header(tmp_path):
    header = "\t".join(AGR.LINZEN_COLUMNS)
    p = write(tmp_path, "agr.tsv", BOM + header + "\n")
    try:                                 # no rows: fine either way, as long as the header is found
        AGR.read_linzen_tsv(p)
    except RnnlensError as e:
        assert "lacks" not in str(e), e


def test_labelled_tsv_lines_end_only_at_newlines(tmp_path):
    # U+2028, U+0085 (what cp1252's ellipsis byte becomes) and a form feed inside a text are
    # characters of that line, not line breaks (str.splitlines would split them)
    from rnnlens.data.tokenize import Tokenizer

    tsv = write(tmp_path, "t.tsv", "pos\tgreat film\u2028really good\nneg\tdull\u0085 and\x0cslow\r\n")
    rows = R.read_labelled_tsv(tsv, Tokenizer())
    assert [lab for _, lab in rows] == ["pos", "neg"]
    assert "good" in rows[0][0] and "slow" in rows[1][0]
