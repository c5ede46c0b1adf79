"""Task metrics computed the way the official scorers compute them.

* `get_chunks` / `conll_f1`: chunk-level precision, recall and F1 as conlleval.pl
  (CoNLL-2000 shared task script, Erik Tjong Kim Sang, version 2004-01-26).
* `semeval_macro_f1`: the official SemEval-2010 Task 8 score, as
  semeval2010_task8_scorer-v1.2.pl (Preslav Nakov, 22 March 2010).
* `label_macro_f1`: the plain macro-F1 over labels (every label that is gold or predicted,
  each label's F1 averaged with equal weight; scikit-learn's f1_score(average="macro")).
* `perplexity`: exp of the mean per-token negative log-likelihood.

Precision, recall and F1 here are fractions in [0, 1]; both Perl scripts print them as
percentages (x 100).
"""
from __future__ import annotations

import math
import re
from collections import Counter

# ---------------------------------------------------------------------------------------
# CoNLL chunking / NER: conlleval.pl
# ---------------------------------------------------------------------------------------


def _split_tag(tag: str) -> tuple[str, str]:
    """conlleval's split, /^([^-]*)-(.*)$/: 'B-PER' -> ('B', 'PER'), 'B-a-b' -> ('B', 'a-b'),
    'O' -> ('O', ''). A tag without a hyphen is a bare prefix with the empty type."""
    prefix, sep, typ = tag.partition("-")
    return (prefix, typ) if sep else (tag, "")


# Pairs (previous prefix, current prefix) that always close / open a chunk. These are
# conlleval.pl's endOfChunk / startOfChunk tables, with the IOBES rows of the widely used
# IOBES-aware variant of the script (S- rows, and E- followed by B-). On tags that use only
# B/I/O (IOB1, BIO), or only I/E/O (IOE1, IOE2), the two tables are identical.
_END_PAIRS = {
    ("B", "B"), ("B", "O"), ("B", "S"),
    ("I", "B"), ("I", "O"), ("I", "S"),
    ("E", "E"), ("E", "I"), ("E", "O"), ("E", "S"), ("E", "B"),
    ("S", "E"), ("S", "I"), ("S", "O"), ("S", "S"), ("S", "B"),
}
_START_PAIRS = {
    ("B", "B"), ("I", "B"), ("O", "B"), ("S", "B"), ("E", "B"),
    ("B", "S"), ("I", "S"), ("O", "S"), ("S", "S"), ("E", "S"),
    ("O", "I"), ("S", "I"), ("E", "I"),
    ("S", "E"), ("E", "E"), ("O", "E"),
}


def _end_of_chunk(prev_tag: str, tag: str, prev_type: str, typ: str) -> bool:
    """conlleval endOfChunk: did a chunk end between the previous and the current token?"""
    return ((prev_tag, tag) in _END_PAIRS
            or (prev_tag not in ("O", ".") and prev_type != typ)
            or prev_tag in ("[", "]"))          # conlleval: bracket chunks have length 1


def _start_of_chunk(prev_tag: str, tag: str, prev_type: str, typ: str) -> bool:
    """conlleval startOfChunk: did a chunk start between the previous and the current token?"""
    return ((prev_tag, tag) in _START_PAIRS
            or (tag not in ("O", ".") and prev_type != typ)
            or tag in ("[", "]"))


def get_chunks(tags: list[str]) -> list[tuple[str, int, int]]:
    """Tag sequence -> chunks (type, start, end) with `end` inclusive, read as conlleval.pl.

    Works on IOB1, BIO (IOB2), IOE and IOBES tags. Scanning left to right with the
    previous token's (prefix, type), starting from ('O', '') and followed by an 'O' (the
    sentence boundary), a chunk
      * starts at B- and S-; at I- after O, E- or S-; at E- after O, E- or S-; and at any
        non-O tag whose type differs from the previous token's type;
      * ends before O, before B- or S-, after E- or S-, and wherever the type changes.
    So `O I-PER I-PER` is one chunk (0-1), `B-PER I-LOC` two, `I-PER B-PER` two (IOB1),
    `B-PER I-PER` one, and an ill-formed `O E-PER` is a chunk of length 1.

    The original CoNLL-2000 script knows no S- and does not split at `E-X B-X`; here those
    follow the IOBES-aware variant of conlleval (a chunk always starts at B-/S-). On inputs
    without S- and without B- mixed with E- both scripts read the same chunks.
    """
    chunks: list[tuple[str, int, int]] = []
    open_chunk: tuple[str, int] | None = None
    prev_tag, prev_type = "O", ""
    for i, raw in enumerate([*tags, "O"]):
        tag, typ = _split_tag(raw)
        end = _end_of_chunk(prev_tag, tag, prev_type, typ)
        start = _start_of_chunk(prev_tag, tag, prev_type, typ)
        if open_chunk is not None and (end or start):
            chunks.append((open_chunk[0], open_chunk[1], i - 1))
            open_chunk = None
        if start:
            open_chunk = (typ, i)
        prev_tag, prev_type = tag, typ
    return chunks


def prf(correct: int, predicted: int, gold: int) -> dict:
    """Precision, recall and F1 from counts (0 where there is nothing to divide by)."""
    p = correct / predicted if predicted else 0.0
    r = correct / gold if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": p, "recall": r, "f1": f, "correct": correct, "predicted": predicted, "gold": gold}


def conll_f1(gold: list[list[str]], pred: list[list[str]]) -> dict:
    """Chunk precision / recall / F1 over sentences, as conlleval.pl.

    gold, pred: one tag list per sentence (same lengths). A predicted chunk is correct
    only if a gold chunk has the same type, start and end. Returns "precision", "recall",
    "f1" (fractions; 0 when there is nothing to divide by), "correct", "predicted",
    "gold" (chunk counts), "accuracy" (token tag accuracy, also printed by conlleval) and
    "per_type": {type: {precision, recall, f1, correct, predicted, gold}} for every type
    seen in gold or pred.
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold sentences but {len(pred)} predicted")
    gold_chunks: set = set()
    pred_chunks: set = set()
    tags_right = tokens = 0
    for s, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise ValueError(f"sentence {s}: {len(g)} gold tags but {len(p)} predicted")
        gold_chunks.update((s, *c) for c in get_chunks(g))
        pred_chunks.update((s, *c) for c in get_chunks(p))
        tags_right += sum(_split_tag(a) == _split_tag(b) for a, b in zip(g, p))
        tokens += len(g)
    right = gold_chunks & pred_chunks
    by_type = lambda chunks: Counter(c[1] for c in chunks)  # noqa: E731
    n_right, n_pred, n_gold = by_type(right), by_type(pred_chunks), by_type(gold_chunks)
    out = prf(len(right), len(pred_chunks), len(gold_chunks))
    out["accuracy"] = tags_right / tokens if tokens else 0.0
    out["per_type"] = {t: prf(n_right[t], n_pred[t], n_gold[t]) for t in sorted(set(n_pred) | set(n_gold))}
    return out


# ---------------------------------------------------------------------------------------
# SemEval-2010 Task 8: semeval2010_task8_scorer-v1.2.pl
# ---------------------------------------------------------------------------------------

OTHER = "Other"
_DIRECTION = re.compile(r"\(e[12],e[12]\)$")


def _relation(label: str) -> str:
    """'Cause-Effect(e2,e1)' -> 'Cause-Effect' (the scorer's s/\\(e[12],e[12]\\)$//)."""
    return _DIRECTION.sub("", label)


def semeval_macro_f1(gold: list[str], pred: list[str]) -> dict:
    """Official SemEval-2010 Task 8 score: macro-averaged F1 of the (9+1)-way evaluation
    with directionality taken into account, excluding Other.

    What semeval2010_task8_scorer-v1.2.pl computes for that number (its evaluation
    (iii), `confMatrix10wayWithDir`):
      * each example is scored on its relation with the direction stripped;
      * exact label match (relation and direction): correct for that relation;
      * same relation, wrong direction: a WRONG_DIR entry under the gold relation. It is
        NOT correct (not in the numerator of P or R), and it is NOT in the relation's
        own "proposed" count either; but P adds it back to the denominator:
            P(r) = correct(r) / (proposed(r) + wrong_dir(r)),
        with P(r) = 0 when proposed(r) = 0 (then correct(r) = 0 too). So a
        wrong-direction prediction costs the relation precision and recall, exactly like
        a prediction of r that is wrong (this was the v1.2 fix of (iii)'s precision);
      * different relation: proposed for the predicted relation, wrong for the gold one;
      * R(r) = correct(r) / gold(r); F1(r) = 2PR / (P + R), 0 when P + R = 0;
      * macro F1 = sum of F1(r) over the relations r that occur in the GOLD labels, other
        than Other, divided by their number. Relations that are only predicted add
        nothing and do not enter the average (the scorer's "examples classified as
        relations that do not exist in the key file" count like Other).
    The scorer prints percentages; the values here are fractions. It also dies on
    labels outside the 19 official ones; here any label is accepted, the direction
    being a trailing "(e1,e2)" / "(e2,e1)" and OTHER ("Other") the excluded class.

    Returns {"macro_f1", "micro_f1" (pooled counts, excluding Other, same rules),
    "accuracy" (exact 19-way label match; wrong direction is wrong),
    "per_relation": {relation: {precision, recall, f1, correct, predicted,
    wrong_direction, gold}}} with a row for every gold relation, Other included (it is
    printed by the scorer but left out of both averages).
    """
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels but {len(pred)} predicted")
    correct: Counter = Counter()
    proposed: Counter = Counter()
    wrong_dir: Counter = Counter()
    n_gold = Counter(_relation(g) for g in gold)
    for g, p in zip(gold, pred):
        rg, rp = _relation(g), _relation(p)
        if g == p:
            correct[rg] += 1
            proposed[rp] += 1
        elif rg == rp:
            wrong_dir[rg] += 1
        else:
            proposed[rp] += 1
    per_relation = {}
    for r in sorted(n_gold):
        p = correct[r] / (proposed[r] + wrong_dir[r]) if proposed[r] else 0.0
        rec = correct[r] / n_gold[r]
        f = 2 * p * rec / (p + rec) if p + rec else 0.0
        per_relation[r] = {"precision": p, "recall": rec, "f1": f, "correct": correct[r],
                           "predicted": proposed[r], "wrong_direction": wrong_dir[r], "gold": n_gold[r]}
    scored = [r for r in per_relation if r != OTHER]
    macro = sum(per_relation[r]["f1"] for r in scored) / len(scored) if scored else 0.0
    micro = prf(sum(correct[r] for r in scored),
                 sum(proposed[r] + wrong_dir[r] for r in scored),
                 sum(n_gold[r] for r in scored))["f1"]
    accuracy = sum(g == p for g, p in zip(gold, pred)) / len(gold) if gold else 0.0
    return {"macro_f1": macro, "micro_f1": micro, "accuracy": accuracy, "per_relation": per_relation}


# ---------------------------------------------------------------------------------------
# Language modelling
# ---------------------------------------------------------------------------------------


def perplexity(total_nll: float, tokens: int) -> float:
    """exp(total_nll / tokens), the NLL in nats summed over `tokens` tokens.

    Returns inf instead of overflowing (a mean NLL above ~709 nats, or an infinite
    total); raises ValueError when there are no tokens.
    """
    if tokens <= 0:
        raise ValueError("perplexity needs at least one token")
    mean = float(total_nll) / tokens
    try:
        return math.exp(mean)
    except OverflowError:
        return math.inf


# ---------------------------------------------------------------------------------------
# Accuracy broken down by a key (attractors, depth, length), with binomial intervals
# ---------------------------------------------------------------------------------------


def wilson_interval(k: float, n: float, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion: k successes in n trials.

    The interval holds the p with |k/n - p| <= z sqrt(p (1 - p) / n) (Wilson 1927):
      centre = (p^ + z^2 / 2n) / (1 + z^2 / n),
      half   = z / (1 + z^2 / n) * sqrt(p^ (1 - p^) / n + z^2 / 4n^2).
    z = 1.96 gives 95%. Unlike p^ +- z sqrt(p^(1-p^)/n) it stays inside [0, 1] and is not
    empty at k = 0 or k = n. k=8, n=10 -> (0.4902, 0.9433). n = 0 -> (0.0, 1.0).
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return 0.0, 1.0
    p = k / n
    z2 = z * z
    denom = 1.0 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z / denom * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def accuracy_by(correct, keys, interval: bool = False, z: float = 1.96) -> dict[str, dict]:
    """Group outcomes by key: {str(key): {"n", "correct", "accuracy", "error"[, "low", "high"]}}.

    correct: one bool (or 0/1) per item; keys: one int per item (e.g. its attractors).
    Keys come out in increasing order, as strings so the dict survives a JSON round trip
    unchanged. interval=True adds the Wilson interval of the accuracy (`wilson_interval`).
    """
    correct, keys = list(correct), list(keys)
    if len(correct) != len(keys):
        raise ValueError(f"{len(correct)} outcomes but {len(keys)} keys")
    n: dict = {}
    ok: dict = {}
    for c, key in zip(correct, keys):
        n[key] = n.get(key, 0) + 1
        ok[key] = ok.get(key, 0) + int(bool(c))
    out: dict[str, dict] = {}
    for key in sorted(n):
        row = {"n": n[key], "correct": ok[key], "accuracy": ok[key] / n[key], "error": 1 - ok[key] / n[key]}
        if interval:
            row["low"], row["high"] = wilson_interval(ok[key], n[key], z)
        out[str(key)] = row
    return out


def majority_baseline(train_labels, eval_labels, eval_keys=None, interval: bool = False) -> dict:
    """Always predict the most frequent training label: its accuracy on eval_labels.

    Ties go to the label seen first in train_labels. With eval_keys, also the accuracy by
    key (`accuracy_by`). -> {"label", "n", "accuracy", "error"[, "by_key"]}.
    """
    counts: dict = {}
    for lab in train_labels:
        counts[lab] = counts.get(lab, 0) + 1
    if not counts:
        raise ValueError("majority baseline: no training labels")
    label = max(counts, key=lambda lab: counts[lab])     # max keeps the first of equal counts
    hits = [lab == label for lab in eval_labels]
    acc = sum(hits) / len(hits) if hits else 0.0
    out = {"label": label, "n": len(hits), "accuracy": acc, "error": 1 - acc}
    if eval_keys is not None:
        out["by_key"] = accuracy_by(hits, eval_keys, interval)
    return out


def merge_metrics(into: dict, new: dict) -> None:
    """Numbers add up; lists (predictions for F1-style metrics) are concatenated."""
    for k, v in new.items():
        if isinstance(v, list):
            into.setdefault(k, []).extend(v)
        else:
            into[k] = into.get(k, 0.0) + v


def label_macro_f1(gold: list, pred: list) -> float:
    """Macro-F1 over every label that occurs in gold or pred, each label's F1 (0 where its
    precision and recall are both 0) weighted equally: scikit-learn's
    f1_score(gold, pred, average="macro"). For SemEval-2010 Task 8 this scores the 19
    directed labels, Other included, unlike the official score (`semeval_macro_f1`)."""
    if len(gold) != len(pred):
        raise ValueError(f"{len(gold)} gold labels but {len(pred)} predicted")
    if not gold:
        return 0.0
    hits = Counter(g for g, p in zip(gold, pred) if g == p)
    n_gold, n_pred = Counter(gold), Counter(pred)
    labels = set(n_gold) | set(n_pred)
    return sum(prf(hits[k], n_pred[k], n_gold[k])["f1"] for k in labels) / len(labels)


def entity_lookup_baseline(train: list[tuple[list[str], list[str]]],
                           test: list[tuple[list[str], list[str]]]) -> dict:
    """The CoNLL shared tasks' baseline tagger, scored as `conll_f1`: tag in each test
    sentence every token sequence that is an entity of the training data with one type
    there (an unambiguous entity), longest match first, left to right; everything else O.
    Needs no training, so it is the floor any tagger that can see the words should clear.

    train, test: (tokens, tags) per sentence, tags in any scheme `get_chunks` reads; the
    predictions are written in IOBES. -> conll_f1's dict plus "entities" (the lexicon size)."""
    types: dict[tuple, set] = {}
    for tokens, tags in train:
        for typ, s, e in get_chunks(tags):
            types.setdefault(tuple(tokens[s:e + 1]), set()).add(typ)
    lexicon = {words: next(iter(ts)) for words, ts in types.items() if len(ts) == 1}
    longest = max(map(len, lexicon), default=0)
    pred = []
    for tokens, _ in test:
        out, i = ["O"] * len(tokens), 0
        while i < len(tokens):
            for n in range(min(longest, len(tokens) - i), 0, -1):
                typ = lexicon.get(tuple(tokens[i:i + n]))
                if typ is not None:
                    out[i:i + n] = ([f"S-{typ}"] if n == 1 else
                                    [f"B-{typ}"] + [f"I-{typ}"] * (n - 2) + [f"E-{typ}"])
                    i += n
                    break
            else:
                i += 1
        pred.append(out)
    res = conll_f1([list(tags) for _, tags in test], pred)
    res["entities"] = len(lexicon)
    return res


COUNT_KEYS = ("closers", "strings")     # metrics that count items (the formal-language heads')


def scores_line(scores: dict, skip: tuple = ()) -> str:
    """The numbers of a metrics dict as `k=v` (4 decimals; counts as whole numbers, a split's
    prefix kept: dev_closers=5120), leaving out the keys in `skip` and breakdowns (dicts)."""
    def shown(k, v):
        return f"{int(v)}" if k.rsplit("_", 1)[-1] in COUNT_KEYS and float(v).is_integer() else f"{v:.4f}"
    return " ".join(f"{k}={shown(k, v)}" for k, v in scores.items()
                    if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in skip)
