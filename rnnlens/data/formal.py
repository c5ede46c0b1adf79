"""Formal languages of the unitary-networks paper (Bernardy & Lappin), with validity oracles.

Two synthetic tasks, both read as generative language models (loss on every next symbol):

- Generalised Dyck language D (section 11.5.2): matching bracket pairs `() [] {} <> +-`.
  Strings of exactly 20 symbols; train 102,400 strings of maximum depth 3, test 5,120 of
  maximum depth 10. Evaluation: wherever the next symbol is a closing bracket, the model's
  argmax over the closers must be the right one; error is broken down by attractors.
- Cross-serial C_k = { a^m b^n c^m d^n : m + n < k } (section 11.5.1): train 51,200 strings
  drawn uniformly from C_8, test 5,120 from C_10. A string is correct when every prediction
  up to and including the stop symbol is a valid continuation in C_10.

Everything is a pure function of its arguments; randomness comes from a `random.Random`
passed in or built from a seed, never from global state. Strings are lists of symbols
(str), ready for `Example(tokens)`; the start symbol START is prepended by the corpora.

Choices where the paper and the authors' notes are silent (see the functions for detail):
- Cross-serial m, n range over the natural numbers including 0 (the set-builder in the
  paper bounds only m + n), so C_8 has 36 strings, C_10 has 55, and <s> </s> (m = n = 0) is
  one of them. `min_count=1` gives the other reading (m, n >= 1: 21 and 36 strings).
- Dyck strings get no stop symbol (the notes prepend only a start symbol; with a fixed
  length every string ends at the same place). `dyck_valid_next` still offers STOP where a
  complete string could end, so it is a true oracle for the language.
"""
from __future__ import annotations

import random
from dataclasses import dataclass

from ..metrics import majority_baseline
from .batching import Example

START = "<s>"
STOP = "</s>"

# (opener, closer) for each bracket type, in the order of the notes; type i = BRACKETS[i].
BRACKETS = (("(", ")"), ("[", "]"), ("{", "}"), ("<", ">"), ("+", "-"))
OPENERS = tuple(o for o, _ in BRACKETS)
CLOSERS = tuple(c for _, c in BRACKETS)
_OPEN_TYPE = {o: i for i, o in enumerate(OPENERS)}
_CLOSE_TYPE = {c: i for i, c in enumerate(CLOSERS)}

CROSS_SYMBOLS = ("a", "b", "c", "d")

# Paper, sections 11.5.1 and 11.5.2 (and NOTES): split sizes and language parameters.
DYCK_LENGTH = 20
DYCK_TRAIN = {"size": 102_400, "max_depth": 3}
DYCK_TEST = {"size": 5_120, "max_depth": 10}
CROSS_TRAIN = {"size": 51_200, "k": 8}
CROSS_TEST = {"size": 5_120, "k": 10}


def symbol_tokens(text: str, vocab) -> list[str]:
    """A formal-language string as typed, in the corpora's symbols: each space-separated piece
    that is itself a token of `vocab` (a symbol, "<s>") is kept, any other read left to right
    as the longest token of `vocab` that starts there (so "<s>(()" is "<s>" and three
    brackets, not "<", "s", ">" and them), else one character: "aabbccdd", "a a b b" and
    "([])" all read as their single-character symbols. (Pieces that are not symbols stay
    unknown: the caller says so.)"""
    longer = sorted((t for t in getattr(vocab, "itos", ()) if len(t) > 1 and t in vocab), key=len, reverse=True)
    tokens: list[str] = []
    for piece in text.split():
        if piece in vocab:
            tokens.append(piece)
            continue
        i = 0
        while i < len(piece):
            tok = next((t for t in longer if piece.startswith(t, i)), piece[i])
            tokens.append(tok)
            i += len(tok)
    return tokens


def _check_pairs(pairs: int) -> int:
    if not 1 <= pairs <= len(BRACKETS):
        raise ValueError(f"pairs must be in 1..{len(BRACKETS)}, got {pairs}")
    return pairs


def dyck_symbols(pairs: int = 5) -> tuple[str, ...]:
    """The symbols of the Dyck corpora: START, the openers, the closers (1 + 2*pairs).
    STOP is left out: the corpora never contain it (fixed length, see the module doc)."""
    _check_pairs(pairs)
    return (START,) + OPENERS[:pairs] + CLOSERS[:pairs]


# --- Dyck: generation ------------------------------------------------------------------

def dyck_string(rng: random.Random, length: int = DYCK_LENGTH, max_depth: int | None = 3,
                pairs: int = 5) -> list[str]:
    """One random balanced string of exactly `length` symbols (no start symbol). Section 11.5.2.

    A string with N = length / 2 pairs is a monotone walk from (0, 0) to (N, N) that never
    crosses the diagonal: an x step opens a bracket, a y step closes the innermost open one.
    An x step is allowed while fewer than N brackets have been opened and fewer than
    max_depth are open (None: no cap); a y step while any bracket is open. Where both are
    allowed each has probability 1/2; otherwise the allowed one is taken. The type of each
    opener is uniform over the first `pairs` bracket types; closers match.
    """
    _check_pairs(pairs)
    if length < 0 or length % 2:
        raise ValueError(f"length must be even and >= 0, got {length}")
    if max_depth is not None and max_depth < 1 and length > 0:
        raise ValueError(f"max_depth must be >= 1 (or None), got {max_depth}")
    n_pairs = length // 2
    opened = 0
    stack: list[int] = []
    out: list[str] = []
    for _ in range(length):
        can_open = opened < n_pairs and (max_depth is None or len(stack) < max_depth)
        can_close = bool(stack)
        step_open = rng.random() < 0.5 if (can_open and can_close) else can_open
        if step_open:
            kind = rng.randrange(pairs)
            stack.append(kind)
            opened += 1
            out.append(OPENERS[kind])
        else:
            out.append(CLOSERS[stack.pop()])
    return out


def dyck_corpus(n: int, length: int = DYCK_LENGTH, max_depth: int | None = 3, seed: int | str = 0,
                pairs: int = 5) -> list[list[str]]:
    """n random Dyck strings, each [START] + dyck_string(...), so length + 1 symbols.

    The generator is random.Random seeded with the seed AND the language parameters, so
    a train and a test corpus built with the same seed are not copies of one stream.
    Paper: train = dyck_corpus(102_400, 20, 3), test = dyck_corpus(5_120, 20, 10).
    """
    rng = random.Random(f"dyck:{seed}:{length}:{max_depth}:{pairs}")
    return [[START] + dyck_string(rng, length, max_depth, pairs) for _ in range(n)]


# --- Dyck: annotations ------------------------------------------------------------------

@dataclass(frozen=True)
class Closing:
    """One closing bracket of a string, with the quantities the paper breaks errors down by.

    position:   index of the closer in the token list given (a leading START counts).
    opener:     index of its matching opening bracket.
    pair:       its bracket type, 0..pairs-1: the class among the closers that the model's
                argmax must pick at this point (section 11.5.2: accuracy over closers).
    depth:      the nesting level of this pair = the number of brackets open just before
                the closer, its own opener included (1 = an outermost pair). This is the
                paper's depth: the maximum over a string's closers is the string's depth
                ("[{}]" has depth 2, "{([()]<>)}" depth 4).
    distance:   position - opener (1 for an adjacent pair "()").
    attractors: opening brackets of a different type strictly between the opener and the
                closer (paper: "an opening parenthesis occurring within a matching pair, but
                of the wrong kind"; in "{()}" the "(" is an attractor for "}"). Everything
                between a matched pair is balanced, so every attractor has already been
                closed when the closer is due; all of them count, as in the authors' notes.
                Openers of the same type do not count.
    """

    position: int
    opener: int
    pair: int
    depth: int
    distance: int
    attractors: int

    @property
    def predict_at(self) -> int:
        """The input position whose state predicts this closer (next-symbol prediction)."""
        return self.position - 1

    @property
    def symbol(self) -> str:
        return CLOSERS[self.pair]


def annotate_dyck(tokens: list[str]) -> list[Closing]:
    """A Closing for every closing bracket of tokens (a Dyck string or prefix), in order.

    tokens may start with START (positions then count it) and may leave brackets open.
    Raises ValueError on a closer that does not match the innermost open bracket, a
    closer with nothing open, or a symbol that is not a bracket, START or STOP.
    """
    stack: list[int] = []           # positions of open brackets
    out: list[Closing] = []
    for pos, sym in enumerate(tokens):
        if sym in _OPEN_TYPE:
            stack.append(pos)
        elif sym in _CLOSE_TYPE:
            kind = _CLOSE_TYPE[sym]
            if not stack or _OPEN_TYPE[tokens[stack[-1]]] != kind:
                raise ValueError(f"unmatched closer {sym!r} at position {pos} in {' '.join(tokens)}")
            depth = len(stack)
            start = stack.pop()
            attractors = sum(1 for s in tokens[start + 1: pos] if s in _OPEN_TYPE and _OPEN_TYPE[s] != kind)
            out.append(Closing(pos, start, kind, depth, pos - start, attractors))
        elif sym not in (START, STOP):
            raise ValueError(f"{sym!r} at position {pos} is not a Dyck symbol")
    return out


def dyck_depth(tokens: list[str]) -> int:
    """The depth of a string: the maximum nesting level reached (0 for no brackets)."""
    depth = best = 0
    for sym in tokens:
        if sym in _OPEN_TYPE:
            depth += 1
            best = max(best, depth)
        elif sym in _CLOSE_TYPE:
            depth -= 1
    return best


# --- Dyck: validity oracle --------------------------------------------------------------

def dyck_valid_next(prefix: list[str], max_depth: int | None = None, length: int | None = None,
                    pairs: int = 5) -> set[str]:
    """The symbols s such that prefix + [s] is a prefix of some string of the language.

    The language is the balanced strings over the first `pairs` bracket types, of depth
    <= max_depth (None: any), of exactly `length` symbols (None: any length), followed by
    STOP. A leading START in prefix is skipped and not counted in the length. With d
    brackets open and r = length - (symbols so far) positions left:

    - an opener, while d < max_depth and, with a length, d + 2 <= r: after opening, the
      d + 1 open brackets need d + 1 of the r - 1 positions left. This is exactly the grid
      walk's boundary (no more than N = length / 2 openers), so with length and max_depth
      set as in `dyck_string` the oracle allows exactly the steps the generator can take.
      With length None any opener is valid (the paper: openers "are always acceptable").
    - the closer of the innermost open bracket, when d > 0;
    - STOP, when d = 0 and (length None or r = 0).

    A prefix that no string extends (a mismatched closer, too deep, too long, a STOP or
    START inside) gives the empty set. A symbol outside the alphabet raises ValueError.
    """
    _check_pairs(pairs)
    body = prefix[1:] if prefix[:1] == [START] else prefix
    stack: list[int] = []
    for sym in body:
        if sym in _OPEN_TYPE:
            kind = _OPEN_TYPE[sym]
            if kind >= pairs:
                return set()
            stack.append(kind)
            if max_depth is not None and len(stack) > max_depth:
                return set()
        elif sym in _CLOSE_TYPE:
            if not stack or stack.pop() != _CLOSE_TYPE[sym]:
                return set()
        elif sym in (START, STOP):
            return set()
        else:
            raise ValueError(f"{sym!r} is not a Dyck symbol")
    d = len(stack)
    if length is not None:
        r = length - len(body)
        if r < d or (r - d) % 2:        # cannot close everything in exactly r symbols
            return set()
    out: set[str] = set()
    if (max_depth is None or d < max_depth) and (length is None or d + 2 <= r):
        out.update(OPENERS[:pairs])
    if d > 0:
        out.add(CLOSERS[stack[-1]])
    if d == 0 and (length is None or r == 0):
        out.add(STOP)
    return out


def dyck_valid_sets(tokens: list[str], max_depth: int | None = None, length: int | None = None,
                    pairs: int = 5) -> list[set[str]]:
    """Per-position targets [T]: element t is dyck_valid_next(tokens[: t + 1], ...)."""
    return [dyck_valid_next(tokens[: t + 1], max_depth, length, pairs) for t in range(len(tokens))]


# --- Cross-serial ------------------------------------------------------------------------

def crossserial_string(m: int, n: int) -> list[str]:
    """a^m b^n c^m d^n as a list of symbols (no start or stop symbol)."""
    if m < 0 or n < 0:
        raise ValueError(f"m and n must be >= 0, got {m}, {n}")
    return ["a"] * m + ["b"] * n + ["c"] * m + ["d"] * n


def crossserial_pairs(k: int, min_count: int = 0) -> list[tuple[int, int]]:
    """Every (m, n) with min_count <= m, n and m + n < k, in sorted order: one per string of C_k.

    min_count = 0 (the default) reads the paper's C_k = {a^m b^n c^m d^n | m + n < k} over
    the natural numbers with 0, as the set-builder bounds only m + n: |C_8| = 36,
    |C_10| = 55. min_count = 1 requires both dependencies (|C_8| = 21, |C_10| = 36).
    """
    return [(m, n) for m in range(min_count, k) for n in range(min_count, k) if m + n < k]


def crossserial_corpus(n: int, k: int, seed: int | str = 0, min_count: int = 0) -> list[list[str]]:
    """n strings drawn uniformly (with replacement) from C_k, each [START] + w + [STOP].

    Section 11.5.1: "picked uniformly from C_8" -- uniform over the strings, i.e. over the
    (m, n) pairs of crossserial_pairs. Paper: train = crossserial_corpus(51_200, 8),
    test = crossserial_corpus(5_120, 10). Seeded with the seed and k (see dyck_corpus).
    """
    choices = crossserial_pairs(k, min_count)
    if not choices:
        raise ValueError(f"C_{k} with m, n >= {min_count} is empty")
    rng = random.Random(f"crossserial:{seed}:{k}:{min_count}")
    out = []
    for _ in range(n):
        m, nn = choices[rng.randrange(len(choices))]
        out.append([START] + crossserial_string(m, nn) + [STOP])
    return out


def crossserial_mn(tokens: list[str]) -> tuple[int, int]:
    """(m, n) of a cross-serial string: its numbers of a's and b's (START/STOP ignored)."""
    return tokens.count("a"), tokens.count("b")


def _cross_feasible(i: int, j: int, p: int, q: int, k: int, lo: int) -> bool:
    """Whether a^i b^j c^p d^q is a prefix of some a^m b^n c^m d^n with lo <= m, n, m + n < k.

    Until the first c or d, more a's (if no b yet) or more b's may follow, so m >= i and
    n >= j are free; after it, m = i and n = j are fixed, the c's count up to m, and the
    d's start only once all m c's are there.
    """
    if p == 0 and q == 0:
        if j == 0:                                   # a^i: m >= max(i, lo), n >= lo
            return max(i, lo) + lo < k
        return i >= lo and i + max(j, lo) < k        # a^i b^j: m = i, n >= j
    if i < lo or j < lo or i + j >= k or p > i or q > j:
        return False
    return q == 0 or p == i


def _cross_counts(body: list[str]) -> tuple[int, int, int, int] | None:
    """(#a, #b, #c, #d) if body has the shape a* b* c* d*, else None."""
    counts = [0, 0, 0, 0]
    last = 0
    for sym in body:
        if sym not in CROSS_SYMBOLS:
            return None
        idx = CROSS_SYMBOLS.index(sym)
        if idx < last:
            return None
        counts[idx] += 1
        last = idx
    return counts[0], counts[1], counts[2], counts[3]


def crossserial_valid_next(prefix: list[str], k: int, min_count: int = 0) -> set[str]:
    """The oracle of section 11.5.1: symbols s such that prefix + [s] is a prefix of some
    string [START] + w + [STOP] with w in C_k; STOP is valid exactly when prefix is a whole
    string of C_k. A leading START is skipped; a prefix that no string extends (wrong
    order, too many of a letter, a STOP inside, a START later on) gives the empty set.
    A symbol outside {a, b, c, d, START, STOP} raises ValueError.
    """
    body = prefix[1:] if prefix[:1] == [START] else prefix
    bad = [s for s in body if s not in CROSS_SYMBOLS and s not in (START, STOP)]
    if bad:
        raise ValueError(f"{bad[0]!r} is not a cross-serial symbol")
    counts = _cross_counts(body)
    if counts is None or not _cross_feasible(*counts, k, min_count):
        return set()
    i, j, p, q = counts
    out = set()
    for idx, sym in enumerate(CROSS_SYMBOLS):
        if idx < max((x for x, c in enumerate(counts) if c), default=0):
            continue                                  # would break the order a* b* c* d*
        nxt = list(counts)
        nxt[idx] += 1
        if _cross_feasible(*nxt, k, min_count):
            out.add(sym)
    if p == i and q == j and i >= min_count and j >= min_count and i + j < k:
        out.add(STOP)
    return out


def crossserial_valid_sets(tokens: list[str], k: int, min_count: int = 0) -> list[set[str]]:
    """Per-position targets [T]: element t is crossserial_valid_next(tokens[: t + 1], k)."""
    return [crossserial_valid_next(tokens[: t + 1], k, min_count) for t in range(len(tokens))]


def crossserial_correct(tokens: list[str], predictions: list[str], k: int = CROSS_TEST["k"],
                        min_count: int = 0) -> bool:
    """Whether a model got a whole string right (section 11.5.1's full-string criterion).

    tokens: the string as given to the model, [START] + w + [STOP] (length T).
    predictions: the model's predicted symbol after each prefix tokens[: t + 1] (teacher
        forcing), at least T - 1 of them; those past the one that predicts STOP (index
        T - 2, e.g. from padding) are ignored.
    Correct when every prediction up to and including the stop symbol is a valid
    continuation in C_k (by default C_10), not necessarily the symbol that came next.
    """
    if len(tokens) < 2 or tokens[-1] != STOP:
        raise ValueError("tokens must be a whole string ending in STOP")
    if len(predictions) < len(tokens) - 1:
        raise ValueError(f"{len(predictions)} predictions for a string that needs {len(tokens) - 1}")
    return all(predictions[t] in crossserial_valid_next(tokens[: t + 1], k, min_count)
               for t in range(len(tokens) - 1))


def crossserial_symbols() -> tuple[str, ...]:
    """The vocabulary of the cross-serial task: START, a, b, c, d, STOP."""
    return (START,) + CROSS_SYMBOLS + (STOP,)


# --- corpora as splits of Examples --------------------------------------------------------

@dataclass(frozen=True)
class DyckCorpus:
    """The paper's Dyck splits as Examples (tokens = [START] + 20 brackets, label None: the
    targets are the next symbols). The paper has no dev split; dev_size > 0 adds one drawn
    like train. Each split has its own stream, from the seed and the split name."""

    seed: int = 0
    length: int = DYCK_LENGTH
    pairs: int = 5
    train_size: int = DYCK_TRAIN["size"]
    train_depth: int | None = DYCK_TRAIN["max_depth"]
    test_size: int = DYCK_TEST["size"]
    test_depth: int | None = DYCK_TEST["max_depth"]
    dev_size: int = 0

    def split(self, name: str) -> list[Example]:
        sizes = {"train": (self.train_size, self.train_depth), "dev": (self.dev_size, self.train_depth),
                 "test": (self.test_size, self.test_depth)}
        if name not in sizes:
            raise KeyError(f"unknown split {name!r}; choose from {sorted(sizes)}")
        size, depth = sizes[name]
        return [Example(s) for s in dyck_corpus(size, self.length, depth, f"{self.seed}:{name}", self.pairs)]

    def splits(self) -> dict[str, list[Example]]:
        names = ("train", "dev", "test") if self.dev_size else ("train", "test")
        return {name: self.split(name) for name in names}


@dataclass(frozen=True)
class CrossSerialCorpus:
    """The paper's cross-serial splits as Examples (tokens = [START] + w + [STOP], label None).
    train (and dev, when dev_size > 0: the paper has none) from C_train_k, test from C_test_k."""

    seed: int = 0
    min_count: int = 0
    train_size: int = CROSS_TRAIN["size"]
    train_k: int = CROSS_TRAIN["k"]
    test_size: int = CROSS_TEST["size"]
    test_k: int = CROSS_TEST["k"]
    dev_size: int = 0

    def split(self, name: str) -> list[Example]:
        sizes = {"train": (self.train_size, self.train_k), "dev": (self.dev_size, self.train_k),
                 "test": (self.test_size, self.test_k)}
        if name not in sizes:
            raise KeyError(f"unknown split {name!r}; choose from {sorted(sizes)}")
        size, k = sizes[name]
        return [Example(s) for s in crossserial_corpus(size, k, f"{self.seed}:{name}", self.min_count)]

    def splits(self) -> dict[str, list[Example]]:
        names = ("train", "dev", "test") if self.dev_size else ("train", "test")
        return {name: self.split(name) for name in names}


def dyck_majority_baseline(train: list[list[str]], strings: list[list[str]]) -> dict:
    """Always predict the closer most frequent in the training strings; its closing-bracket
    accuracy on `strings`. -> {"label", "n", "accuracy", "error", "by_attractors"}.

    This is the paper's "majority class baseline" (section 11.5.2: an 80% error rate, i.e.
    one of five uniformly drawn bracket types is right one time in five).
    """
    train_closers = [s for toks in train for s in toks if s in CLOSERS]
    due = [(c.symbol, c.attractors) for toks in strings for c in annotate_dyck(toks)]
    out = majority_baseline(train_closers, [sym for sym, _ in due], [a for _, a in due])
    out["by_attractors"] = out.pop("by_key")
    return out
