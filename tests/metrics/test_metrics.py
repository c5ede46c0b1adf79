"""Task metrics against hand-worked cases of the official scorers' rules (conlleval.pl,
semeval2010_task8_scorer-v1.2.pl), plus conlleval's streaming count as an oracle."""
import math
import random

import pytest

from rnnlens.metrics import conll_f1, entity_lookup_baseline, get_chunks, perplexity, semeval_macro_f1


# -- get_chunks ----------------------------------------------------------------------------

def test_chunks_bio():
    tags = ["B-PER", "I-PER", "O", "B-LOC", "B-LOC", "I-LOC", "O", "B-ORG"]
    assert get_chunks(tags) == [("PER", 0, 1), ("LOC", 3, 3), ("LOC", 4, 5), ("ORG", 7, 7)]
    assert get_chunks([]) == [] and get_chunks(["O", "O"]) == []


def test_chunks_iob1():
    # IOB1: I- opens a chunk after O; B- only separates two adjacent chunks of one type
    tags = ["I-PER", "I-PER", "B-PER", "I-PER", "O", "I-LOC", "I-ORG"]
    assert get_chunks(tags) == [("PER", 0, 1), ("PER", 2, 3), ("LOC", 5, 5), ("ORG", 6, 6)]


def test_chunks_iobes():
    tags = ["S-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "O", "B-ORG", "E-ORG", "B-ORG", "E-ORG", "S-LOC"]
    assert get_chunks(tags) == [("PER", 0, 0), ("PER", 1, 1), ("LOC", 2, 4), ("ORG", 6, 7),
                                ("ORG", 8, 9), ("LOC", 10, 10)]


def test_chunk_edge_cases():
    assert get_chunks(["O", "I-PER", "I-PER"]) == [("PER", 1, 2)]                   # one chunk
    assert get_chunks(["B-PER", "I-LOC"]) == [("PER", 0, 0), ("LOC", 1, 1)]         # type change
    assert get_chunks(["I-PER", "B-PER"]) == [("PER", 0, 0), ("PER", 1, 1)]         # B- splits
    assert get_chunks(["B-PER", "I-PER"]) == [("PER", 0, 1)]
    assert get_chunks(["B-PER", "E-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 2, 2)]  # I- after E- opens
    assert get_chunks(["O", "E-PER"]) == [("PER", 1, 1)]                            # ill-formed, still a chunk
    assert get_chunks(["E-PER", "E-PER"]) == [("PER", 0, 0), ("PER", 1, 1)]
    assert get_chunks(["B-PER", "S-PER", "I-PER"]) == [("PER", 0, 0), ("PER", 1, 1), ("PER", 2, 2)]
    assert get_chunks(["B-PER", "I-PER", "E-PER", "B-PER"]) == [("PER", 0, 2), ("PER", 3, 3)]
    assert get_chunks(["B-a-b", "I-a-b", "I-a-c"]) == [("a-b", 0, 1), ("a-c", 2, 2)]  # hyphens in types
    assert get_chunks(["B-PER"]) == [("PER", 0, 0)]                                  # closes at the end


# -- conll_f1 ------------------------------------------------------------------------------

def test_conll_f1_hand_worked():
    gold = [["B-PER", "I-PER", "O", "B-LOC"],          # PER 0-1, LOC 3-3
            ["B-ORG", "O", "B-PER"]]                    # ORG 0-0, PER 2-2
    pred = [["B-PER", "I-PER", "O", "O"],              # PER 0-1 (right); LOC missed
            ["B-ORG", "I-ORG", "B-PER"]]                # ORG 0-1 (end wrong); PER 2-2 (right)
    # gold 4 chunks, predicted 3, correct 2: P = 2/3, R = 2/4, F1 = 2PR/(P+R) = (2/3)/(7/6) = 4/7
    # per type: PER 2/2 right -> 1, 1, 1; LOC P = 0 (none predicted), R = 0/1; ORG 0/1, 0/1
    # token accuracy: 3/4 + 2/3 -> 5/7
    r = conll_f1(gold, pred)
    assert (r["correct"], r["predicted"], r["gold"]) == (2, 3, 4)
    assert r["precision"] == pytest.approx(2 / 3) and r["recall"] == pytest.approx(0.5)
    assert r["f1"] == pytest.approx(4 / 7)
    assert r["accuracy"] == pytest.approx(5 / 7)
    assert set(r["per_type"]) == {"LOC", "ORG", "PER"}
    per = {t: (v["precision"], v["recall"], v["f1"]) for t, v in r["per_type"].items()}
    assert per == {"PER": (1.0, 1.0, 1.0), "LOC": (0.0, 0.0, 0.0), "ORG": (0.0, 0.0, 0.0)}
    assert (r["per_type"]["ORG"]["predicted"], r["per_type"]["LOC"]["gold"]) == (1, 1)


def test_conll_f1_empty_and_perfect():
    r = conll_f1([["O", "O"]], [["O", "O"]])
    assert (r["precision"], r["recall"], r["f1"], r["per_type"]) == (0.0, 0.0, 0.0, {})
    r = conll_f1([["B-X", "O"]], [["O", "O"]])
    assert r["f1"] == 0 and r["gold"] == 1 and r["predicted"] == 0
    g = [["S-X", "B-Y", "E-Y"], ["O"]]
    assert conll_f1(g, g)["f1"] == 1.0
    # chunks never cross sentences: the end of a sentence closes the chunk
    r = conll_f1([["B-X"], ["I-X"]], [["B-X"], ["B-X"]])
    assert (r["correct"], r["predicted"], r["gold"]) == (2, 2, 2)
    with pytest.raises(ValueError):
        conll_f1([["O"]], [["O", "O"]])


def _conlleval_stream(gold, pred):
    """conlleval.pl's own counting, token by token: a chunk is correct when both sides
    start one at the same token with the same type, and both end it at the same token
    with nothing differing in between. Start/end are read off get_chunks' boundaries."""
    def marks(tags):
        chunks = get_chunks(tags)
        starts = {s: t for t, s, _ in chunks}
        ends = {e for _, _, e in chunks}
        return starts, ends
    correct = found_guessed = found_correct = 0
    for g, p in zip(gold, pred):
        gs, ge = marks(g)
        ps, pe = marks(p)
        in_correct = False
        for i in range(len(g)):
            if i in gs and i in ps and gs[i] == ps[i]:
                in_correct = True
            elif i in gs or i in ps:
                in_correct = False
            found_correct += i in gs
            found_guessed += i in ps
            if in_correct and (i in ge) != (i in pe):
                in_correct = False
            if in_correct and i in ge and i in pe:
                correct += 1
                in_correct = False
    return correct, found_guessed, found_correct


def test_conll_f1_equals_streaming_count_on_random_tags():
    rng = random.Random(0)
    for _ in range(500):
        def tag():
            p = rng.choice("BIESO")
            return "O" if p == "O" else f"{p}-{rng.choice('XY')}"
        gold = [[tag() for _ in range(rng.randint(1, 6))] for _ in range(rng.randint(1, 3))]
        pred = [[tag() if rng.random() < 0.4 else t for t in s] for s in gold]
        r = conll_f1(gold, pred)
        assert (r["correct"], r["predicted"], r["gold"]) == _conlleval_stream(gold, pred)


# -- SemEval-2010 Task 8 -------------------------------------------------------------------

def test_semeval_hand_worked():
    gold = ["Cause-Effect(e1,e2)",        # 1 right
            "Cause-Effect(e2,e1)",        # 2 predicted CE(e1,e2): wrong direction
            "Cause-Effect(e1,e2)",        # 3 predicted Other
            "Component-Whole(e1,e2)",     # 4 predicted CE(e2,e1): wrong relation
            "Component-Whole(e2,e1)",     # 5 right
            "Other",                      # 6 predicted CW(e1,e2)
            "Other",                      # 7 right
            "Other"]                      # 8 predicted Message-Topic, a relation not in gold
    pred = ["Cause-Effect(e1,e2)", "Cause-Effect(e1,e2)", "Other", "Cause-Effect(e2,e1)",
            "Component-Whole(e2,e1)", "Component-Whole(e1,e2)", "Other", "Message-Topic(e1,e2)"]
    # Cause-Effect: correct 1 (ex 1); proposed 2 (ex 1, 4); wrong direction 1 (ex 2);
    #   P = 1 / (2 + 1) = 1/3, R = 1/3 (3 gold), F1 = 1/3
    # Component-Whole: correct 1 (ex 5); proposed 2 (ex 5, 6); P = 1/2, R = 1/2, F1 = 1/2
    # Other (reported, not averaged): correct 1, proposed 2 (ex 3, 7), gold 3: P 1/2, R 1/3, F1 0.4
    # Message-Topic: not in gold -> not in the average.
    # macro F1 = (1/3 + 1/2) / 2 = 5/12; micro: 2 correct / 5 proposed+wrong-dir / 5 gold -> 0.4
    # accuracy: exact labels right in ex 1, 5, 7 -> 3/8
    # (Checked against the v1.2 Perl scorer: MACRO 41.67, MICRO 40.00, accuracy 37.50.)
    r = semeval_macro_f1(gold, pred)
    assert r["macro_f1"] == pytest.approx(5 / 12)
    assert r["micro_f1"] == pytest.approx(0.4)
    assert r["accuracy"] == pytest.approx(3 / 8)
    ce = r["per_relation"]["Cause-Effect"]
    assert (ce["correct"], ce["predicted"], ce["wrong_direction"], ce["gold"]) == (1, 2, 1, 3)
    assert (ce["precision"], ce["recall"], ce["f1"]) == pytest.approx((1 / 3, 1 / 3, 1 / 3))
    assert r["per_relation"]["Component-Whole"]["f1"] == pytest.approx(0.5)
    assert r["per_relation"]["Other"]["f1"] == pytest.approx(0.4)
    assert set(r["per_relation"]) == {"Cause-Effect", "Component-Whole", "Other"}


def test_semeval_wrong_direction_only_hurts():
    gold = ["Message-Topic(e1,e2)", "Message-Topic(e2,e1)"]
    assert semeval_macro_f1(gold, gold)["macro_f1"] == 1.0
    flipped = semeval_macro_f1(gold, ["Message-Topic(e2,e1)", "Message-Topic(e2,e1)"])
    # one right, one wrong direction: P = 1 / (1 + 1), R = 1/2
    assert flipped["per_relation"]["Message-Topic"]["precision"] == 0.5
    assert flipped["macro_f1"] == pytest.approx(0.5) and flipped["accuracy"] == 0.5
    both = semeval_macro_f1(gold, ["Message-Topic(e2,e1)", "Message-Topic(e1,e2)"])
    assert both["macro_f1"] == 0.0                    # all wrong direction: nothing proposed, P = 0
    assert semeval_macro_f1(["Other"], ["Other"])["macro_f1"] == 0.0   # no relation to average
    with pytest.raises(ValueError):
        semeval_macro_f1(["Other"], [])


# -- perplexity ----------------------------------------------------------------------------

def test_perplexity():
    assert perplexity(0.0, 10) == 1.0
    assert perplexity(10 * math.log(50), 10) == pytest.approx(50.0)
    assert perplexity(4.0, 2) == pytest.approx(math.exp(2.0))
    assert perplexity(1e6, 1) == math.inf                     # overflow -> inf, not an error
    assert perplexity(math.inf, 3) == math.inf
    with pytest.raises(ValueError):
        perplexity(1.0, 0)


def test_label_macro_f1_by_hand_and_against_scikit_learn():
    """Every gold or predicted label counts with equal weight. gold A A B D, pred A B B C:
    A: 1 right, 1 predicted, 2 gold -> F1 2/3; B: 1 right, 2 predicted, 1 gold -> F1 2/3;
    C (predicted, never gold) and D (gold, never predicted) -> 0. Mean 1/3."""
    from rnnlens.metrics import label_macro_f1

    gold = ["A", "A", "B", "D"]
    pred = ["A", "B", "B", "C"]
    assert label_macro_f1(gold, pred) == pytest.approx(1 / 3)
    assert label_macro_f1(gold, gold) == 1.0 and label_macro_f1([], []) == 0.0
    sklearn = pytest.importorskip("sklearn.metrics")
    rng = __import__("random").Random(0)
    labels = ["Other", "Cause-Effect(e1,e2)", "Cause-Effect(e2,e1)", "Message-Topic(e1,e2)"]
    g = [rng.choice(labels) for _ in range(200)]
    p = [rng.choice(labels[:3]) for _ in range(200)]
    assert label_macro_f1(g, p) == pytest.approx(sklearn.f1_score(g, p, average="macro"))
    with pytest.raises(ValueError):
        label_macro_f1(["A"], [])


def test_entity_lookup_baseline_hand_worked():
    """Training entities of one type are looked up, longest first; an entity seen with two
    types (Jordan) is left out, and a token of a longer entity (John) is not one alone."""
    train = [(["John", "Smith", "visited", "New", "York"], ["B-PER", "I-PER", "O", "B-LOC", "I-LOC"]),
             (["Paris", "and", "Jordan"], ["B-LOC", "O", "B-PER"]),
             (["Jordan", "won"], ["B-LOC", "O"]),
             (["New", "York", "Times"], ["B-ORG", "I-ORG", "I-ORG"])]
    test = [(["New", "York", "and", "John", "Smith", "met", "Jordan", "in", "Paris", "John"],
             ["B-LOC", "E-LOC", "O", "B-PER", "E-PER", "O", "S-PER", "O", "S-LOC", "S-PER"]),
            (["the", "New", "York", "Times"], ["O", "B-ORG", "I-ORG", "E-ORG"])]
    res = entity_lookup_baseline(train, test)
    assert res["entities"] == 4
    assert (res["correct"], res["predicted"], res["gold"]) == (4, 4, 6)
    assert res["precision"] == 1.0 and math.isclose(res["f1"], 0.8)
    assert entity_lookup_baseline([], test)["f1"] == 0.0
