"""Formal languages of the unitary-networks paper (sections 11.5.1, 11.5.2): generators,
hand-counted annotations, and validity oracles checked against brute-force enumeration."""
import itertools
import random
from collections import Counter

import pytest

from rnnlens.data.batching import Example
from rnnlens.data.formal import (CLOSERS, OPENERS, START, STOP, Closing, CrossSerialCorpus, DyckCorpus,
                                 annotate_dyck, crossserial_correct, crossserial_corpus, crossserial_mn,
                                 crossserial_pairs, crossserial_string, crossserial_valid_next,
                                 crossserial_valid_sets, dyck_corpus, dyck_depth, dyck_string, dyck_symbols,
                                 dyck_valid_next, dyck_valid_sets)


def toks(s: str) -> list[str]:
    """'{()}' -> [START, '{', '(', ')', '}']"""
    return [START] + list(s)


def is_balanced(seq) -> bool:
    """An independent checker: a stack of expected closers."""
    match = dict(zip(OPENERS, CLOSERS))
    stack = []
    for s in seq:
        if s in match:
            stack.append(match[s])
        elif not stack or stack.pop() != s:
            return False
    return not stack


# --- Dyck generation ------------------------------------------------------------------

def test_dyck_corpus_strings_are_balanced_of_length_and_capped():
    for depth, n in ((3, 2000), (10, 2000), (1, 200)):
        corpus = dyck_corpus(n, length=20, max_depth=depth, seed=1)
        assert len(corpus) == n
        for s in corpus:
            assert s[0] == START and START not in s[1:]
            assert len(s) == 21
            assert is_balanced(s[1:])
            assert 1 <= dyck_depth(s) <= depth
    for s in dyck_corpus(50, max_depth=1):        # depth 1: open, close, open, close, ...
        assert all((c in OPENERS) == (i % 2 == 0) for i, c in enumerate(s[1:]))


def test_dyck_depth_distribution_train_vs_test():
    train = dyck_corpus(5120, max_depth=3, seed=0)
    test = dyck_corpus(5120, max_depth=10, seed=0)
    d_train = Counter(dyck_depth(s) for s in train)
    d_test = Counter(dyck_depth(s) for s in test)
    print("train depths", sorted(d_train.items()), "test depths", sorted(d_test.items()))
    assert max(d_train) == 3
    deep = sum(c for d, c in d_test.items() if d > 3) / len(test)
    assert 0.2 < deep < 0.9                      # depth-10 strings go past the training cap often
    assert max(d_test) >= 6
    assert train != test[: len(train)]           # the parameters enter the seed: not one stream


def test_dyck_walk_probabilities_match_hand_worked_values():
    """N = 3 pairs, uncapped. From the start the walk must open; then x and y steps have
    probability 1/2 each where both are allowed, so:
      OOOCCC 1/4, OOCOCC 1/8, OOCCOC 1/8, OCOOCC 1/4, OCOCOC 1/4.
    With max_depth 2 the third opener of OOO is barred, so OOC is forced and
      OOCOCC 1/4, OOCCOC 1/4, OCOOCC 1/4, OCOCOC 1/4."""
    rng = random.Random(0)
    n = 16000
    for cap, expected in ((None, {"OOOCCC": 1 / 4, "OOCOCC": 1 / 8, "OOCCOC": 1 / 8, "OCOOCC": 1 / 4, "OCOCOC": 1 / 4}),
                          (2, {"OOCOCC": 1 / 4, "OOCCOC": 1 / 4, "OCOOCC": 1 / 4, "OCOCOC": 1 / 4})):
        shapes = Counter("".join("O" if c in OPENERS else "C" for c in dyck_string(rng, 6, cap)) for _ in range(n))
        print(cap, {k: v / n for k, v in sorted(shapes.items())})
        assert set(shapes) == set(expected)
        for shape, p in expected.items():
            sd = (p * (1 - p) / n) ** 0.5
            assert abs(shapes[shape] / n - p) < 5 * sd


def test_dyck_bracket_types_uniform_and_pairs_configurable():
    corpus = dyck_corpus(4000, max_depth=10, seed=3)
    counts = Counter(c for s in corpus for c in s if c in OPENERS)
    total = sum(counts.values())                 # 40,000 openers
    assert set(counts) == set(OPENERS)
    for o in OPENERS:
        assert abs(counts[o] / total - 0.2) < 0.01
    two = dyck_corpus(200, max_depth=3, seed=3, pairs=2)
    assert {c for s in two for c in s[1:]} == {"(", ")", "[", "]"}
    assert dyck_symbols(2) == (START, "(", "[", ")", "]")
    with pytest.raises(ValueError):
        dyck_string(random.Random(0), 7)
    with pytest.raises(ValueError):
        dyck_string(random.Random(0), 6, pairs=6)


def test_dyck_determinism():
    assert dyck_corpus(300, seed=5) == dyck_corpus(300, seed=5)
    assert dyck_corpus(300, seed=5) != dyck_corpus(300, seed=6)
    a = DyckCorpus(seed=2, train_size=50, test_size=20, dev_size=10)
    b = DyckCorpus(seed=2, train_size=50, test_size=20, dev_size=10)
    assert a.splits() == b.splits()
    splits = a.splits()
    assert set(splits) == {"train", "dev", "test"}
    assert [len(v) for v in splits.values()] == [50, 10, 20]
    assert isinstance(splits["train"][0], Example) and splits["train"][0].label is None
    assert splits["train"][:10] != splits["dev"]
    assert set(DyckCorpus(train_size=5, test_size=5).splits()) == {"train", "test"}


def test_dyck_generator_steps_are_valid_under_the_oracle():
    for depth in (3, 10):
        for s in dyck_corpus(300, max_depth=depth, seed=9):
            for t in range(1, len(s)):
                assert s[t] in dyck_valid_next(s[:t], max_depth=depth, length=20)
            assert dyck_valid_next(s, max_depth=depth, length=20) == {STOP}


# --- Dyck annotations (hand-counted) -------------------------------------------------------

def test_annotate_dyck_hand_counted():
    # "{()}": the paper's own example, "(" is an attractor for "}".
    assert annotate_dyck(toks("{()}")) == [
        Closing(position=3, opener=2, pair=0, depth=2, distance=1, attractors=0),
        Closing(position=4, opener=1, pair=2, depth=1, distance=3, attractors=1),
    ]
    # "([]()<>)": for the final ")" the "[" and "<" are attractors, already closed when it is
    # due; the inner "(" is of the same type and is not.
    #  0   1 2 3 4 5 6 7 8
    # <s>  ( [ ] ( ) < > )
    assert annotate_dyck(toks("([]()<>)")) == [
        Closing(3, 2, 1, 2, 1, 0),
        Closing(5, 4, 0, 2, 1, 0),
        Closing(7, 6, 3, 2, 1, 0),
        Closing(8, 1, 0, 1, 7, 2),
    ]
    # "{([()]<>)}": the paper's depth-4 example.
    #  0   1 2 3 4 5 6 7 8 9 10
    # <s>  { ( [ ( ) ] < > ) }
    got = annotate_dyck(toks("{([()]<>)}"))
    assert [(c.position, c.opener, c.symbol, c.depth, c.distance, c.attractors) for c in got] == [
        (5, 4, ")", 4, 1, 0),
        (6, 3, "]", 3, 3, 1),       # "(" at 4
        (8, 7, ">", 3, 1, 0),
        (9, 2, ")", 2, 7, 2),       # "[" at 3 and "<" at 7; "(" at 4 is the same type
        (10, 1, "}", 1, 9, 4),      # ( [ ( <
    ]
    assert [c.predict_at for c in got] == [4, 5, 7, 8, 9]
    assert dyck_depth(toks("{([()]<>)}")) == 4 and dyck_depth(list("[{}]")) == 2
    assert max(c.depth for c in got) == dyck_depth(toks("{([()]<>)}"))
    # "+-" is the fifth pair; positions count without START when it is absent.
    assert annotate_dyck(list("+<>-")) == [Closing(2, 1, 3, 2, 1, 0), Closing(3, 0, 4, 1, 3, 1)]
    # A prefix with open brackets is annotated up to where it stops.
    assert annotate_dyck(toks("(([]")) == [Closing(4, 3, 1, 3, 1, 0)]
    with pytest.raises(ValueError):
        annotate_dyck(toks("(]"))
    with pytest.raises(ValueError):
        annotate_dyck(toks(")"))
    with pytest.raises(ValueError):
        annotate_dyck(toks("(x)"))


def test_annotations_agree_with_definitions_on_random_strings():
    for s in dyck_corpus(500, max_depth=10, seed=4):
        closings = annotate_dyck(s)
        assert len(closings) == 10
        for c in closings:
            assert s[c.position] == CLOSERS[c.pair] and s[c.opener] == OPENERS[c.pair]
            assert is_balanced(s[c.opener: c.position + 1])
            assert c.depth == sum(x in OPENERS for x in s[: c.position]) - sum(x in CLOSERS for x in s[: c.position])
            assert 0 <= c.attractors <= (c.distance - 1) // 2


# --- Dyck oracle vs brute force --------------------------------------------------------------

ALPHA2 = ["(", "[", ")", "]"]           # two pair types


def _brute_valid(prefix, complete: set, prefixes: set) -> set:
    out = {s for s in ALPHA2 if tuple(prefix) + (s,) in prefixes}
    if tuple(prefix) in complete:
        out.add(STOP)
    return out


@pytest.mark.parametrize("cap", [None, 2, 1])
def test_dyck_valid_next_fixed_length_matches_enumeration(cap):
    """Length 6, two pair types: every sequence over the 4 symbols, balanced and within the
    cap, is a complete string; the valid next symbols after ANY sequence of up to 6 symbols
    (valid prefix or not) are exactly those that extend it to a prefix of one."""
    complete = {w for w in itertools.product(ALPHA2, repeat=6)
                if is_balanced(w) and (cap is None or dyck_depth(list(w)) <= cap)}
    assert len(complete) == {None: 5 * 8, 2: 4 * 8, 1: 8}[cap]     # Catalan(3) shapes x 2^3 types
    prefixes = {w[:i] for w in complete for i in range(7)}
    checked = 0
    for n in range(7):
        for prefix in itertools.product(ALPHA2, repeat=n):
            want = _brute_valid(prefix, complete, prefixes)
            assert dyck_valid_next(list(prefix), max_depth=cap, length=6, pairs=2) == want, prefix
            assert dyck_valid_next([START, *prefix], max_depth=cap, length=6, pairs=2) == want
            checked += 1
    assert checked == sum(4 ** n for n in range(7))


def _grammar_strings(max_len: int) -> set:
    """Every string of E ::= eps | o E c E over two pair types, of length <= max_len."""
    by_len = {0: {()}}
    for n in range(2, max_len + 1, 2):
        out = set()
        for inner in range(0, n - 1, 2):
            for o, c in (("(", ")"), ("[", "]")):
                for a in by_len[inner]:
                    for b in by_len[n - 2 - inner]:
                        out.add((o,) + a + (c,) + b)
        by_len[n] = out
    return set().union(*by_len.values())


@pytest.mark.parametrize("cap", [None, 2])
def test_dyck_valid_next_any_length_matches_enumeration(cap):
    """No length: a prefix of up to 4 symbols plus one more is completed within 10 symbols,
    so all strings of the grammar up to length 10 decide the answer."""
    complete = {w for w in _grammar_strings(10) if cap is None or dyck_depth(list(w)) <= cap}
    prefixes = {w[:i] for w in complete for i in range(len(w) + 1)}
    for n in range(5):
        for prefix in itertools.product(ALPHA2, repeat=n):
            want = _brute_valid(prefix, complete, prefixes)
            assert dyck_valid_next([START, *prefix], max_depth=cap, pairs=2) == want, prefix


def test_dyck_valid_next_edge_cases_and_per_position_sets():
    assert dyck_valid_next([START]) == set(OPENERS) | {STOP}
    assert dyck_valid_next([START], length=20) == set(OPENERS)
    assert dyck_valid_next(toks("((("), max_depth=3) == {")"}
    assert dyck_valid_next(toks("(()"), length=4) == {")"}           # no room for another pair
    assert dyck_valid_next(toks("(()"), length=6) == set(OPENERS) | {")"}
    assert dyck_valid_next(toks("()") + [STOP]) == set()
    assert dyck_valid_next(toks("(]")) == set()
    assert dyck_valid_next(toks("{"), pairs=2) == set()              # "{" is not among 2 pairs
    with pytest.raises(ValueError):
        dyck_valid_next(toks("x"))
    sets = dyck_valid_sets(toks("(<>)"), length=4)
    assert sets == [set(OPENERS), set(OPENERS) | {")"}, {">"}, {")"}, {STOP}]


# --- cross-serial -------------------------------------------------------------------------

def test_crossserial_language_sizes_and_strings():
    assert crossserial_string(2, 1) == list("aabccd")
    assert len(crossserial_pairs(8)) == 36 and len(crossserial_pairs(10)) == 55
    assert len(crossserial_pairs(8, min_count=1)) == 21 and len(crossserial_pairs(10, min_count=1)) == 36
    assert (0, 0) in crossserial_pairs(8) and (0, 0) not in crossserial_pairs(8, 1)
    assert max(m + n for m, n in crossserial_pairs(8)) == 7


def _brute_cross(k: int, lo: int):
    whole = {(START,) + tuple(crossserial_string(m, n)) + (STOP,) for m, n in crossserial_pairs(k, lo)}
    prefixes = {w[:i] for w in whole for i in range(len(w) + 1)}
    return prefixes


@pytest.mark.parametrize("k,lo", [(1, 0), (3, 0), (5, 0), (6, 0), (3, 1), (5, 1), (6, 1)])
def test_crossserial_oracle_matches_enumeration(k, lo):
    """For every sequence of up to 6 symbols over {a, b, c, d, STOP} after START, the oracle's
    set is exactly the symbols that keep it a prefix of some [START] + w + [STOP], w in C_k."""
    prefixes = _brute_cross(k, lo)
    symbols = ["a", "b", "c", "d", STOP]
    for n in range(7):
        for body in itertools.product(symbols, repeat=n):
            prefix = (START,) + body
            want = {s for s in symbols if prefix + (s,) in prefixes}
            assert crossserial_valid_next(list(prefix), k, lo) == want, prefix


def test_crossserial_oracle_on_c10_strings():
    prefixes = _brute_cross(10, 0)
    for m, n in crossserial_pairs(10):
        w = [START] + crossserial_string(m, n) + [STOP]
        sets = crossserial_valid_sets(w, 10)
        for t, got in enumerate(sets):
            want = {s for s in ("a", "b", "c", "d", STOP) if tuple(w[: t + 1]) + (s,) in prefixes}
            assert got == want
            if t + 1 < len(w):
                assert w[t + 1] in got
    # Hand-worked: in C_10 after a^5 b^4 the b's must stop (5 + 5 is not < 10).
    assert crossserial_valid_next([START] + list("aaaaabbbb"), 10) == {"c"}
    assert crossserial_valid_next([START] + list("aaaaabbbb"), 11) == {"b", "c"}
    assert crossserial_valid_next([START], 10) == {"a", "b", STOP}
    assert crossserial_valid_next([START], 10, min_count=1) == {"a"}
    assert crossserial_valid_next([START] + list("aac"), 10) == {"c"}
    assert crossserial_valid_next([START] + list("aacc"), 10) == {STOP}
    assert crossserial_valid_next([START] + list("bd"), 10) == {STOP}
    assert crossserial_valid_next([START] + list("aba"), 10) == set()
    with pytest.raises(ValueError):
        crossserial_valid_next([START, "e"], 10)


def test_crossserial_correct():
    w = [START] + list("abcd") + [STOP]
    assert crossserial_correct(w, list("abcd") + [STOP])                   # exactly the string
    assert crossserial_correct(w, ["b", "c", "b", "d", STOP])              # other valid continuations
    assert crossserial_correct(w, list("abcd") + [STOP, "a", "a"])        # past the stop: ignored
    assert not crossserial_correct(w, ["a", "d", "c", "d", STOP])          # d after <s> a
    assert not crossserial_correct(w, list("abcd") + ["d"])                # misses the stop
    long = [START] + crossserial_string(5, 4) + [STOP]
    right = long[1:]
    assert crossserial_correct(long, right, k=10)
    wrong = right[:]
    wrong[9] = "b"                                  # predicted after <s> a^5 b^4: a 5th b leaves C_10
    assert not crossserial_correct(long, wrong, k=10)
    with pytest.raises(ValueError):
        crossserial_correct(w, ["a"])


def test_crossserial_corpus_uniform_over_strings_and_deterministic():
    n = 36 * 400
    corpus = crossserial_corpus(n, 8, seed=0)
    assert all(s[0] == START and s[-1] == STOP for s in corpus)
    counts = Counter(crossserial_mn(s) for s in corpus)
    for s in corpus[:200]:
        assert s == [START] + crossserial_string(*crossserial_mn(s)) + [STOP]
    print("min/max count per (m, n):", min(counts.values()), max(counts.values()))
    assert set(counts) == set(crossserial_pairs(8))
    sd = (400 * (1 - 1 / 36)) ** 0.5
    assert all(abs(c - 400) < 5 * sd for c in counts.values())
    test = crossserial_corpus(5120, 10, seed=0)
    assert {m + n for m, n in map(crossserial_mn, test)} == set(range(10))
    assert crossserial_corpus(100, 8, seed=1) == crossserial_corpus(100, 8, seed=1)
    assert crossserial_corpus(100, 8, seed=1) != crossserial_corpus(100, 8, seed=2)
    assert all(min(crossserial_mn(s)) >= 1 for s in crossserial_corpus(300, 8, seed=1, min_count=1))
    c = CrossSerialCorpus(train_size=30, test_size=20)
    splits = c.splits()
    assert set(splits) == {"train", "test"} and len(splits["train"]) == 30
    assert all(sum(crossserial_mn(ex.tokens)) < 8 for ex in splits["train"])
    assert splits == CrossSerialCorpus(train_size=30, test_size=20).splits()


def test_typed_strings_read_as_the_corpora_symbols_with_a_start_symbol_glued_on_or_not():
    from rnnlens.data.formal import START, crossserial_symbols, dyck_symbols, symbol_tokens
    from rnnlens.data.vocab import Vocab

    dyck = Vocab(dict.fromkeys([START, *dyck_symbols(5)]))
    for typed in ("<s>(()", "<s> ( ( )", "(()", "<s>( ()"):
        want = ([START] if typed.startswith(START) else []) + ["(", "(", ")"]
        assert symbol_tokens(typed, dyck) == want, typed
    assert symbol_tokens("<>", dyck) == ["<", ">"]                 # brackets of their own
    assert symbol_tokens("<s><s>(", dyck) == [START, START, "("]
    assert symbol_tokens("<pad>", dyck) == list("<pad>")            # not a token: each character
    cross = Vocab(dict.fromkeys([START, *crossserial_symbols()]))
    assert symbol_tokens("<s>aabbccdd", cross) == [START, *"aabbccdd"]
