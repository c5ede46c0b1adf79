"""Attention analysis of recurrent memory networks (analysis/attention.py and
analysis/attention_report.py): every function on small attention tensors whose answers are
worked out by hand in the comments."""
from collections import Counter

import pytest
import torch

from rnnlens.analysis import attention as A
from rnnlens.analysis import attention_report as AR
from rnnlens.data.conllu import DepSentence, read_conllu
from tests.support import FIXTURES as FIX, train_tiny, write_tiny_corpus


# Two rows, T = 4, memory of N = 3 words (slots k = 0, 1, 2 hold x_t, x_{t-1}, x_{t-2}).
# Row 0 has 4 positions, row 1 has 2 (then padding, where the block gives zeros).
ATTN = torch.tensor([
    [[1.0, 0.0, 0.0], [0.6, 0.4, 0.0], [0.5, 0.3, 0.2], [0.2, 0.2, 0.6]],
    [[1.0, 0.0, 0.0], [0.8, 0.2, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]],
])
MASK = torch.tensor([[True] * 4, [True, True, False, False]])
INPUTS = [["<eos>", "the", "dog", "barked"], ["<eos>", "woof"]]
TARGETS = [["the", "dog", "barked", "<eos>"], ["woof", "<eos>"]]


def test_offsets_and_distances():
    assert A.slot_offsets(3) == [0, -1, -2]
    assert A.slot_offsets(3, bidirectional=True) == [0, -1, -2, 2, 3, 4]
    assert A.distances([0, -1, -2, 2, 3, 4]) == [1, 2, 3, -1, -2, -3]


def test_slot_exists_by_hand():
    e = A.slot_exists(MASK, [0, -1, -2])
    assert e[0].tolist() == [[True, False, False], [True, True, False], [True, True, True], [True, True, True]]
    assert e[1].tolist() == [[True, False, False], [True, True, False], [False] * 3, [False] * 3]
    # bidirectional: slot 3 is t + 2; row 0 (length 4) has it at t = 0, 1 only
    e = A.slot_exists(MASK, [0, -1, -2, 2, 3, 4])
    assert e[0, :, 3].tolist() == [True, True, False, False]
    assert e[0, :, 4].tolist() == [True, False, False, False]
    assert not e[1, :, 3:].any()


def test_slot_exists_matches_the_memory_block():
    from rnnlens.cells.memory import MemoryBlock

    mask = torch.arange(9)[None, :] < torch.tensor([9, 5, 1, 3])[:, None]
    for bidi in (False, True):
        block = MemoryBlock(10, 4, size=3, bidirectional=bidi)
        _, valid = block.windows(mask)
        assert torch.equal(A.slot_exists(mask, A.slot_offsets(3, bidi)), valid)


def test_average_counts_only_existing_slots():
    avg = A.average_attention(ATTN, MASK)
    # slot 0: (1 + .6 + .5 + .2 + 1 + .8) / 6; slot 1: (.4 + .3 + .2 + .2) / 4; slot 2: (.2 + .6) / 2
    assert avg.counts.tolist() == [6, 4, 2]
    assert torch.allclose(avg.mean, torch.tensor([4.1 / 6, 1.1 / 4, 0.4], dtype=torch.float64))
    d = avg.to_dict()
    assert d["distance"] == [1, 2, 3] and d["count"] == [6, 4, 2]
    # a slot that never exists has no mean (not 0)
    avg = A.average_attention(ATTN[1:, :2], MASK[1:, :2])
    assert avg.counts.tolist() == [2, 1, 0] and avg.to_dict()["mean"][2] is None


def test_average_accumulates_over_batches():
    acc = A.PositionAverage.empty([0, -1, -2])
    acc.update(ATTN[:1], A.slot_exists(MASK[:1], [0, -1, -2]))
    acc.update(ATTN[1:], A.slot_exists(MASK[1:], [0, -1, -2]))
    whole = A.average_attention(ATTN, MASK)
    assert torch.equal(acc.counts, whole.counts) and torch.allclose(acc.sums, whole.sums)


def test_attention_rows_by_hand():
    rows = A.attention_rows(ATTN, INPUTS, TARGETS, [(0, 3), (1, 1)], sentence_ids=[7, 8],
                            predicted=[["a"] * 4, ["b", "c"]])
    r = rows[0]
    assert (r.sentence, r.position, r.current, r.target, r.predicted) == (7, 3, "barked", "<eos>", "a")
    assert r.memory == ["barked", "dog", "the"]
    assert r.weights == pytest.approx([0.2, 0.2, 0.6])
    r = rows[1]
    assert (r.sentence, r.current, r.target, r.predicted) == (8, "woof", "<eos>", "c")
    assert r.memory == ["woof", "<eos>", None] and r.weights == pytest.approx([0.8, 0.2, 0.0])
    with pytest.raises(IndexError):
        A.attention_rows(ATTN, INPUTS, TARGETS, [(1, 2)])


def test_reservoir_is_seeded_and_uniform():
    def draw(seed, n=3, items=10):
        r = A.Reservoir(n, seed)
        for i in range(items):
            k = r.slot()
            if k is not None:
                r.items[k] = i
        return sorted(r.items)

    assert draw(0, n=20) == list(range(10))           # fewer items than n: all of them
    assert draw(5) == draw(5)
    hits = Counter(i for s in range(2000) for i in draw(s))
    # each of 10 items is kept with probability 3/10: 600 of 2000 draws
    assert all(500 < hits[i] < 700 for i in range(10)), hits


def test_long_distance_pairs_by_hand():
    # row 0, t = 3: the largest weight, 0.6, is on slot 2 ("the", d = 3); the word to
    # predict is "<eos>". Every other position's largest weight is on slot 0 (d = 1).
    assert A.long_distance_pairs(ATTN, MASK, INPUTS, TARGETS, min_distance=3) == Counter({("the", "<eos>", 3): 1})
    assert A.long_distance_pairs(ATTN, MASK, INPUTS, TARGETS, min_distance=2) == Counter({("the", "<eos>", 3): 1})
    assert A.long_distance_pairs(ATTN, MASK, INPUTS, TARGETS) == Counter()      # paper: d >= 7
    # padding and missing slots never win, even with weight there
    noisy = ATTN.clone()
    noisy[1, 2:] = 5.0
    noisy[0, 0, 2] = 0.9                                   # slot 2 does not exist at t = 0
    assert A.long_distance_pairs(noisy, MASK, INPUTS, TARGETS, min_distance=2) == Counter({("the", "<eos>", 3): 1})
    # a tie goes to the more recent word
    tie = ATTN.clone()
    tie[0, 3] = torch.tensor([0.4, 0.2, 0.4])
    assert A.long_distance_pairs(tie, MASK, INPUTS, TARGETS, min_distance=2) == Counter()


def test_long_distance_pairs_ignore_future_slots():
    attn = torch.zeros(1, 4, 6)
    attn[0, 0] = torch.tensor([0.1, 0, 0, 0.7, 0.2, 0])     # the largest is the word at t + 2: d = -1
    attn[0, 3] = torch.tensor([0.1, 0.1, 0.8, 0, 0, 0])
    mask = torch.ones(1, 4, dtype=torch.bool)
    got = A.long_distance_pairs(attn, mask, INPUTS[:1], TARGETS[:1], A.slot_offsets(3, True), min_distance=2)
    assert got == Counter({("the", "<eos>", 3): 1})


def test_cooccurrence_counts_by_hand():
    train = [["the", "dog", "barked"], ["a", "dog", "saw", "the", "cat"], ["the", "the"], ["dog", "the"]]
    got = A.cooccurrence_counts(train, [("the", "dog"), ("the", "the"), ("dog", "the"), ("cat", "zzz")])
    # the..dog: only sentence 1 has "the" before "dog"; the..the: sentence 3 (two of them);
    # dog..the: sentences 2 and 4
    assert got == {("the", "dog"): 1, ("the", "the"): 1, ("dog", "the"): 2, ("cat", "zzz"): 0}
    assert A.cooccurrence_counts(train, []) == {}


def test_pair_table_by_hand():
    pairs = Counter({("a", "b", 7): 3, ("c", "d", 7): 1, ("a", "e", 8): 2})
    t = A.pair_table(pairs, {("a", "b"): 10, ("c", "d"): 2, ("a", "e"): 5})
    assert [(r["attended"], r["predicted"], r["distance"], r["count"], r["frequency"]) for r in t["pairs"]] == \
           [("a", "b", 7, 3, 10), ("a", "e", 8, 2, 5), ("c", "d", 7, 1, 2)]
    # d = 7: 4 occurrences, mean over them (3 * 10 + 1 * 2) / 4 = 8; over the 2 pairs (10 + 2) / 2 = 6
    assert t["by_distance"][7] == {"occurrences": 4, "pairs": 2, "mean_frequency": 8.0,
                                   "mean_frequency_distinct": 6.0}
    assert t["by_distance"][8]["mean_frequency"] == 5.0
    t = A.pair_table(pairs, None)
    assert t["pairs"][0]["frequency"] is None and t["by_distance"][7]["mean_frequency"] is None


# --- Figure 6 ------------------------------------------------------------------------------

def _coded(T, offsets):
    """attn[0, t, k] = t + k / 10, so every accumulated weight says where it came from."""
    K = len(offsets)
    return (torch.arange(T)[:, None] + torch.arange(K)[None, :] / 10).float()[None]


def test_dependency_attention_by_hand():
    said = read_conllu(FIX / "deps.conllu")[1]       # she said that he would come
    # arcs (0-based): she->said nsubj, that->come mark, he->come nsubj, would->come aux,
    # come->said ccomp (the only head on the left). Input: <eos> she said that he would come.
    offsets = A.slot_offsets(5)
    mask = torch.ones(1, 7, dtype=torch.bool)
    dep = A.dependency_attention(_coded(7, offsets), mask, [said], 1, offsets)
    # predicting "said" (t = 1) with "she" in slot 0 -> 1.0; predicting "come" (t = 5):
    # "he" slot 1 -> 5.1, "that" slot 2 -> 5.2, "would" slot 0 -> 5.0, "said" slot 3 -> 5.3.
    # Each arc's other way round (predicting the left word from the right one) is no slot.
    assert set(dep.sums) == {("nsubj", A.HEAD_RIGHT), ("mark", A.HEAD_RIGHT), ("aux", A.HEAD_RIGHT),
                             ("ccomp", A.HEAD_LEFT)}
    assert dep.sums[("nsubj", A.HEAD_RIGHT)].tolist() == pytest.approx([1.0, 5.1, 0, 0, 0])
    assert dep.counts[("nsubj", A.HEAD_RIGHT)].tolist() == [1, 1, 0, 0, 0]
    assert dep.sums[("mark", A.HEAD_RIGHT)].tolist() == pytest.approx([0, 0, 5.2, 0, 0])
    assert dep.sums[("aux", A.HEAD_RIGHT)].tolist() == pytest.approx([5.0, 0, 0, 0, 0])
    assert dep.sums[("ccomp", A.HEAD_LEFT)].tolist() == pytest.approx([0, 0, 0, 5.3, 0])
    mean = dep.mean(("nsubj", A.HEAD_RIGHT))
    assert mean[:2].tolist() == pytest.approx([1.0, 5.1]) and mean[2:].isnan().all()
    tot = {(r["relation"], r["direction"]): r for r in dep.totals()}
    assert tot[("nsubj", A.HEAD_RIGHT)] == pytest.approx({"relation": "nsubj", "direction": A.HEAD_RIGHT,
                                                          "mass": 6.1, "count": 2, "mean": 3.05})
    assert dep.totals()[0]["relation"] == "nsubj"                          # most frequent first
    # ALL is the plain per-slot average over every existing slot
    assert torch.equal(dep.all.counts, A.average_attention(_coded(7, offsets), mask, offsets).counts)


def test_dependency_attention_bidirectional_and_batches():
    sents = read_conllu(FIX / "deps.conllu")
    offsets = A.slot_offsets(3, bidirectional=True)           # 0 -1 -2 | +2 +3 +4
    mask = torch.ones(1, 7, dtype=torch.bool)
    dep = A.dependency_attention(_coded(7, offsets), mask, [sents[1]], [1], offsets)
    # predicting "she" (t = 0) with "said" at t + 2 (slot 3) -> 0.3; predicting "that" (t = 2)
    # with its head "come" at t + 4 (slot 5) -> 2.5; "he" (t = 3) with "come" at t + 3 -> 3.4;
    # "would" (t = 4) with "come" at t + 2 -> 4.3; history slots as with N = 3 above
    assert dep.sums[("nsubj", A.HEAD_RIGHT)].tolist() == pytest.approx([1.0, 5.1, 0, 0.3, 3.4, 0])
    assert dep.sums[("mark", A.HEAD_RIGHT)].tolist() == pytest.approx([0, 0, 5.2, 0, 0, 2.5])
    assert dep.sums[("aux", A.HEAD_RIGHT)].tolist() == pytest.approx([5.0, 0, 0, 4.3, 0, 0])
    assert ("ccomp", A.HEAD_LEFT) not in dep.sums          # said..come are 4 apart: no slot either way
    # two rows, one without a parse, padding, accumulating into an existing result
    attn = torch.zeros(2, 7, 3)
    attn[1, :4] = _coded(4, [0, -1, -2])[0]
    mask = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])
    acc = A.DependencyAttention([0, -1, -2])
    A.dependency_attention(attn, mask, [None, sents[0]], [1, 1], [0, -1, -2], into=acc)
    A.dependency_attention(attn[1:], mask[1:], [sents[0]], 1, [0, -1, -2], into=acc)
    # the dog barked: predicting "dog" (t = 1) with "the" in slot 0 -> 1.0, "barked" (t = 2)
    # with "dog" in slot 0 -> 2.0; twice
    assert acc.sums == {("det", A.HEAD_RIGHT): pytest.approx(torch.tensor([2.0, 0, 0], dtype=torch.float64)),
                        ("nsubj", A.HEAD_RIGHT): pytest.approx(torch.tensor([4.0, 0, 0], dtype=torch.float64))}
    assert acc.counts[("det", A.HEAD_RIGHT)].tolist() == [2, 0, 0]
    assert int(acc.all.counts.sum()) == 2 * (1 + 2 + 3 + 3) + (1 + 2 + 3 + 3 + 3 + 3 + 3)


def test_dependency_subtypes_can_be_merged():
    s = DepSentence(["a", "b", "c"], [2, 0, 2], ["nmod:poss", "root", "nmod"])
    offsets = [0, -1, -2]
    attn = _coded(4, offsets)
    mask = torch.ones(1, 4, dtype=torch.bool)
    assert set(A.dependency_attention(attn, mask, [s], 1, offsets).sums) == {("nmod:poss", A.HEAD_RIGHT),
                                                                            ("nmod", A.HEAD_LEFT)}
    merged = A.dependency_attention(attn, mask, [s], 1, offsets, strip_subtypes=True)
    assert set(merged.sums) == {("nmod", A.HEAD_RIGHT), ("nmod", A.HEAD_LEFT)}


def test_default_bins():
    labels = [b for b, _ in A.default_bins(A.slot_offsets(15))]
    assert labels == ["1", "2", "3", "4", "5", "6", "7..9", "10..12", "13..15"]
    assert A.default_bins(A.slot_offsets(15))[6] == ("7..9", [6, 7, 8])
    assert [b for b, _ in A.default_bins(A.slot_offsets(8))] == ["1", "2", "3", "4", "5", "6", "7..8"]
    assert A.default_bins(A.slot_offsets(3, True)) == [("1", [0]), ("2", [1]), ("3", [2]),
                                                       ("-1", [3]), ("-2", [4]), ("-3", [5])]


def test_binned_table_by_hand():
    said = read_conllu(FIX / "deps.conllu")[1]
    offsets = A.slot_offsets(5)
    mask = torch.ones(1, 7, dtype=torch.bool)
    dep = A.dependency_attention(_coded(7, offsets), mask, [said], 1, offsets)
    tab = dep.binned([("1", [0]), ("2-3", [1, 2]), ("4-5", [3, 4])])
    assert tab["bins"] == ["1", "2-3", "4-5"]
    assert tab["rows"][0]["label"] == "ALL"
    nsubj = next(r for r in tab["rows"] if r["relation"] == "nsubj")
    assert nsubj["label"] == "nsubj (head right)"
    assert nsubj["mean"][:2] == pytest.approx([1.0, 5.1])
    assert nsubj["mean"][2] is None and nsubj["count"] == [1, 1, 0]
    mark = next(r for r in tab["rows"] if r["relation"] == "mark")
    assert mark["mean"][1] == pytest.approx(5.2)
    # ALL, bin 2-3: slot 1 exists at t = 1..6, slot 2 at t = 2..6 -> (sum of t + .1) + (sum of t + .2)
    all_row = tab["rows"][0]
    want = (sum(t + 0.1 for t in range(1, 7)) + sum(t + 0.2 for t in range(2, 7))) / 11
    assert all_row["count"][1] == 11 and all_row["mean"][1] == pytest.approx(want)
    d = dep.to_dict()
    assert d["binned"]["rows"][0]["label"] == "ALL" and d["totals"][0]["relation"] == "nsubj"


def test_check_parses():
    from rnnlens.errors import RnnlensError

    sents = read_conllu(FIX / "deps.conllu")
    A.check_parses([["a"] * 3, ["b"] * 6, ["c"] * 4], sents)
    with pytest.raises(RnnlensError, match="2 parse.*for 3 sentence"):
        A.check_parses([["a"] * 3] * 3, sents[:2])
    with pytest.raises(RnnlensError, match="sentence 2 has 5 words but its parse .*line 8.* has 6"):
        A.check_parses([["a"] * 3, ["b"] * 5, ["c"] * 4], sents)


# --- a model over a corpus (analyse_attention) -------------------------------------------

def tiny_model(bidirectional=False, memory="rm", size=3):
    from rnnlens.data.batching import EOS
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig

    words = sorted({w for s in read_conllu(FIX / "deps.conllu") for w in s.forms} | {"cat"})
    vocab = Vocab([EOS, *words])
    cfg = ModelConfig(cell="lstm", embedding_dim=6, hidden_size=5, memory=memory, memory_size=size,
                      memory_temporal=True, memory_bidirectional=bidirectional)
    return RNNModel(cfg, len(vocab), "lm", sentence_level=True).double().eval(), vocab


@pytest.mark.parametrize("bidirectional", [False, True])
def test_analyse_attention_equals_the_pure_functions_on_one_batch(bidirectional):
    from rnnlens.analysis.lm import sentence_batch

    model, vocab = tiny_model(bidirectional)
    parses = read_conllu(FIX / "deps.conllu")
    sents = [p.forms for p in parses]
    train = [["the", "dog", "barked"], ["she", "said", "the", "cat", "would", "come"]]
    rep = AR.analyse_attention(model, vocab, sents, parses=parses, train_sentences=train, batch_size=2,
                              samples=4, min_distance=2)
    batch = sentence_batch(vocab, sents)
    attn = model.attention(batch)
    offsets = A.slot_offsets(3, bidirectional)
    assert rep.offsets == offsets and rep.size == 3 and rep.bidirectional == bidirectional
    assert rep.sentences == 3 and rep.positions == 4 + 7 + 5
    one = A.average_attention(attn, batch.mask, offsets)
    assert torch.equal(rep.average.counts, one.counts) and torch.allclose(rep.average.sums, one.sums)
    dep = A.dependency_attention(attn, batch.mask, parses, 1, offsets)
    assert set(rep.dependencies.sums) == set(dep.sums)
    for key in dep.sums:
        assert torch.allclose(rep.dependencies.sums[key], dep.sums[key])
        assert torch.equal(rep.dependencies.counts[key], dep.counts[key])
    inputs = [vocab.decode(r[:n]) for r, n in zip(batch.tokens.tolist(), batch.lengths.tolist())]
    targets = [vocab.decode(r[:n]) for r, n in zip(batch.targets.tolist(), batch.lengths.tolist())]
    pairs = A.long_distance_pairs(attn, batch.mask, inputs, targets, offsets, 2)
    assert {(r["attended"], r["predicted"], r["distance"]): r["count"] for r in rep.pairs["pairs"]} == dict(pairs)
    # co-occurrences are counted in <eos> w1 .. wn <eos>, as the model reads a sentence
    freq = A.cooccurrence_counts([["<eos>", *s, "<eos>"] for s in train], {(a, p) for a, p, _ in pairs})
    assert all(r["frequency"] == freq[(r["attended"], r["predicted"])] for r in rep.pairs["pairs"])
    assert len(rep.samples) == 4
    for r in rep.samples:              # each sampled row is the model's row, over its existing slots
        assert r.weights == pytest.approx(attn[r.sentence, r.position].tolist())
        assert sum(r.weights) == pytest.approx(1.0)
        assert r.current == inputs[r.sentence][r.position] and r.target == targets[r.sentence][r.position]
    import json
    json.dumps(rep.to_dict())
    assert "average attention by distance" in AR.format_summary(rep)


def test_analyse_attention_argmax_predictions_and_errors():
    from rnnlens.errors import RnnlensError
    from rnnlens.models import RNNModel
    from rnnlens.config import ModelConfig

    model, vocab = tiny_model(memory="rmr")
    sents = [p.forms for p in read_conllu(FIX / "deps.conllu")]
    rep = AR.analyse_attention(model, vocab, sents, samples=100, predicted="argmax", min_distance=1)
    assert rep.dependencies is None and rep.pairs["pairs"][0]["frequency"] is None
    assert len(rep.samples) == 16 and all(r.predicted in vocab for r in rep.samples)
    assert sum(r["count"] for r in rep.pairs["pairs"]) == 16          # d >= 1: every position
    with pytest.raises(RnnlensError, match="predicted must be"):
        AR.analyse_attention(model, vocab, sents, predicted="best")
    with pytest.raises(RnnlensError, match="2 parse"):
        AR.analyse_attention(model, vocab, sents, parses=read_conllu(FIX / "deps.conllu")[:2])
    lstm = RNNModel(ModelConfig(cell="lstm", embedding_dim=4, hidden_size=4), len(vocab), "lm")
    with pytest.raises(RnnlensError, match="no memory block"):
        A.memory_layout(lstm)
    clf = RNNModel(ModelConfig(cell="gru", embedding_dim=4, hidden_size=4), len(vocab), "classify", ["a", "b"])
    with pytest.raises(RnnlensError, match="needs a language model"):
        A.memory_layout(clf)


def test_plots_write_pngs(tmp_path):
    from rnnlens.viz.attention_plots import (attention_by_position, attention_maps,
                                             dependency_attention_plot, slot_label)

    assert [slot_label(o) for o in (0, -3, 2)] == ["t", "t-3", "t+2"]
    model, vocab = tiny_model(bidirectional=True)
    parses = read_conllu(FIX / "deps.conllu")
    rep = AR.analyse_attention(model, vocab, [p.forms for p in parses], parses=parses, samples=6)
    d = rep.to_dict()                                      # the plots also take the JSON form
    paths = [attention_by_position(rep.average, tmp_path / "a.png", "t"),
             attention_by_position(d["average"], tmp_path / "a2.png"),
             attention_maps(rep.samples, rep.offsets, tmp_path / "b.png"),
             attention_maps(d["samples"], d["offsets"], tmp_path / "b2.png", words_in_cells=0),
             dependency_attention_plot(rep.dependencies.binned(), rep.dependencies.totals(), tmp_path / "c.png")]
    for p in paths:
        assert p.read_bytes()[:4] == b"\x89PNG"


# --- the command line ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def rm_models(tmp_path_factory):
    root = write_tiny_corpus(tmp_path_factory.mktemp("corpus"))
    models = tmp_path_factory.mktemp("models")
    rm = train_tiny(root, models / "rm", "--memory", "rm", "--memory-size", "4", "--memory-temporal", "true")
    lstm = train_tiny(root, models / "lstm")
    return root, rm, lstm


PARSES = ("1\tthe\t_\t_\t_\t_\t2\tdet\t_\t_\n2\tdog\t_\t_\t_\t_\t3\tnsubj\t_\t_\n3\tsees\t_\t_\t_\t_\t0\troot\t_\t_\n"
          "4\tthe\t_\t_\t_\t_\t5\tdet\t_\t_\n5\tcat\t_\t_\t_\t_\t3\tobj\t_\t_\n\n"
          "1\tthe\t_\t_\t_\t_\t3\tdet\t_\t_\n2\tbig\t_\t_\t_\t_\t3\tamod\t_\t_\n3\tdog\t_\t_\t_\t_\t4\tnsubj\t_\t_\n"
          "4\tlikes\t_\t_\t_\t_\t0\troot\t_\t_\n5\tthe\t_\t_\t_\t_\t7\tdet\t_\t_\n6\told\t_\t_\t_\t_\t7\tamod\t_\t_\n"
          "7\tcat\t_\t_\t_\t_\t4\tobj\t_\t_\n")


def test_attention_command_end_to_end(rm_models, tmp_path, capsys):
    import json

    from tests.support import run_cli as run

    _, rm, _ = rm_models
    data = tmp_path / "sents.txt"
    data.write_text("the dog sees the cat\n\nthe big dog likes the old cat\n")
    parses = tmp_path / "p.conllu"
    parses.write_text(PARSES)
    out = tmp_path / "att"
    code, stdout, err = run(capsys, "attention", "--model", rm, "--data", data, "--parses", parses, "--out", out,
                            "--min-distance", "3", "--samples", "5")
    assert code == 0 and err == ""
    assert "average attention by distance" in stdout and "d=  4" in stdout and f"wrote {out}" in stdout
    assert "attention on dependency arcs" in stdout and "obj (head left)" in stdout
    assert sorted(p.name for p in out.iterdir()) == ["attention.json", "attention_by_position.png",
                                                     "attention_dependencies.png", "attention_maps.png"]
    d = json.loads((out / "attention.json").read_text())
    assert d["sentences"] == 2 and d["positions"] == 6 + 8 and d["memory_size"] == 4
    assert d["average"]["count"] == [14, 12, 10, 8] and len(d["samples"]) == 5
    assert d["pairs"]["training_sentences"] == 200 and d["dependencies"]["binned"]["rows"][0]["label"] == "ALL"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []      # no temporaries
    # a split of the model's own corpus, JSON on stdout, no output folder
    code, stdout, _ = run(capsys, "attention", "--model", rm, "--data", "test", "--json", "--max-sentences", "5")
    d = json.loads(stdout)
    assert d["sentences"] == 5 and d["dependencies"] is None and d["pairs"]["predicted"] == "gold"


def test_attention_command_errors(rm_models, tmp_path, capsys):
    from tests.support import assert_clean_error, run_cli as run

    _, rm, lstm = rm_models
    data = tmp_path / "s.txt"
    data.write_text("the dog sees the cat\n")
    assert_clean_error(*run(capsys, "attention", "--model", lstm, "--data", data)[::2], "no memory block")
    assert_clean_error(*run(capsys, "attention", "--model", rm, "--data", tmp_path / "nope.txt")[::2],
                       "no such text file")
    assert_clean_error(*run(capsys, "attention", "--model", rm, "--data", "valid")[::2], "split 'valid'")
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tthe\t_\t_\t_\t_\t0\troot\t_\n")
    assert_clean_error(*run(capsys, "attention", "--model", rm, "--data", data, "--parses", bad)[::2],
                       f"{bad}:1:", "10 tab-separated")
    two = tmp_path / "two.conllu"
    two.write_text(PARSES)
    assert_clean_error(*run(capsys, "attention", "--model", rm, "--data", data, "--parses", two)[::2],
                       "2 parse(s) for 1 sentence(s)")
    short = tmp_path / "short.conllu"
    short.write_text(PARSES.split("\n\n")[1])
    assert_clean_error(*run(capsys, "attention", "--model", rm, "--data", data, "--parses", short)[::2],
                       "sentence 1 has 5 words but its parse")
    out = tmp_path / "exists"
    out.mkdir()
    assert_clean_error(*run(capsys, "attention", "--model", rm, "--data", data, "--out", out)[::2], "--force")
    assert_clean_error(*run(capsys, "attention", "--model", rm, "--data", data, "--batch-size", "0")[::2],
                       "--batch-size must be >= 1")
    # the training data cannot be found: a warning, the pairs without counts
    moved = tmp_path / "gone"
    code, out_, err = run(capsys, "attention", "--model", rm, "--data", data, "--data-dir", moved)
    assert code == 0 and err.startswith("warning: no co-occurrence counts") and "--train FILE" in err
    code, out_, err = run(capsys, "attention", "--model", rm, "--data", data, "--data-dir", moved,
                          "--train", data, "--min-distance", "1")
    assert code == 0 and err == "" and "train co-occurrences 1" in out_


def test_argmax_predictions_through_an_adaptive_softmax():
    import dataclasses

    from rnnlens.analysis.lm import sentence_batch
    from rnnlens.models import RNNModel

    model, vocab = tiny_model()
    cfg = dataclasses.replace(model.cfg, hidden_size=16, adaptive_softmax=[4, 8])
    model = RNNModel(cfg, len(vocab), "lm", sentence_level=True).double().eval()
    sents = [p.forms for p in read_conllu(FIX / "deps.conllu")]
    rep = AR.analyse_attention(model, vocab, sents, samples=100, predicted="argmax")
    batch = sentence_batch(vocab, sents)
    with torch.no_grad():
        out = model(batch)                                 # the projected states, not logits
        logp = model.head.adaptive.log_prob(out.reshape(-1, out.shape[-1])).view(*out.shape[:2], -1)
    assert len(rep.samples) == 16
    for r in rep.samples:
        assert r.predicted == vocab.itos[int(logp[r.sentence, r.position].argmax())]


def test_report_of_a_memory_model(rm_models, tmp_path, capsys):
    """`rnnlens report` on an RM language model: the LSTM under the block is decomposed, the
    architecture names the block, split sizes count tokens (one example per sentence)."""
    import json

    from tests.support import run_cli as run

    root, rm, _ = rm_models
    out = tmp_path / "rep"
    code, _, err = run(capsys, "report", "--model", rm, "--out", out, "--samples", "2", "--quiet")
    assert code == 0, err
    d = json.loads((out / "report.json").read_text())
    assert d["samples"] and "explained" in d["samples"][0]
    sizes = d["model"]["split_sizes"]
    assert sizes["test"] > 50                       # tokens, not the first sentence's length
    assert "memory block: RM(+tM-g) over 4 words" in (out / "report.html").read_text()
