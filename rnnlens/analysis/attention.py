"""What the memory block of a recurrent memory network attends to (Tran, Bisazza & Monz
2016, Section 5): average attention per memory position (Figure 3), attention rows of
sampled words (Figure 4), the (most-attended word, word to predict) pairs more than six
positions apart with their co-occurrence counts in the training data (Table 3), and the
attention mass per dependency relation and direction (Figure 6).

Pure functions of tensors and token lists; attention_report.analyse_attention runs them over
a corpus with a model. Nothing here plots or writes files (viz/attention_plots.py draws the
figures).

Conventions. attn[b, t, k] (shape [B,T,K]) is the block's weight at input position t on
slot k, which holds the input word at position t + offsets[k] (`slot_offsets`: 0, -1, ...,
-(N-1) for the N words up to and including x_t, then 2, ..., N+1 for a bidirectional
block's words after the one to predict). At position t a language model predicts the
next token, x_{t+1}: the "word to predict" of the paper. The distance of slot k from that
word is d = 1 - offsets[k]: the current word x_t is at d = 1, x_{t-k} at d = k + 1, and a
bidirectional block's future words at negative d. A slot exists where that word does: not
before the sentence start, not past its end, not at padding (`slot_exists`).
"""
from __future__ import annotations

import math
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch

from ..errors import RnnlensError

HEAD_LEFT, HEAD_RIGHT = "head-left", "head-right"


# --- memory layout ---------------------------------------------------------------------

def slot_offsets(size: int, bidirectional: bool = False) -> list[int]:
    """[K] ints: slot k holds the word at t + offsets[k]. K = size, or 2 * size when
    bidirectional (the memory block's own layout, cells.memory.memory_offsets)."""
    from ..cells.memory import memory_offsets

    return memory_offsets(size, bidirectional).tolist()


def distances(offsets: Sequence[int]) -> list[int]:
    """Distance of each slot from the word to predict, x_{t+1}: d = 1 - offset."""
    return [1 - o for o in offsets]


def slot_exists(mask: torch.Tensor, offsets: Sequence[int]) -> torch.Tensor:
    """mask[B,T] bool -> exists[B,T,K] bool: position t is real and so is the word it sees
    in slot k (t + offsets[k] inside the row and not padding)."""
    B, T = mask.shape
    off = torch.as_tensor(list(offsets), dtype=torch.long, device=mask.device)
    pos = torch.arange(T, device=mask.device)[:, None] + off[None]               # [T,K]
    inside = (pos >= 0) & (pos < T)
    seen = mask.gather(1, pos.clamp(0, T - 1).reshape(1, -1).expand(B, -1)).view(B, T, -1)
    return inside[None] & seen & mask[:, :, None]


def memory_layout(model) -> tuple[int, bool]:
    """(memory size N, bidirectional) of a model with a memory block; RnnlensError otherwise."""
    cfg = getattr(model, "cfg", None)
    if getattr(model, "task", None) != "lm":
        raise RnnlensError(f"attention analysis needs a language model with a memory block; this model's "
                           f"task is {getattr(model, 'task', None)!r}")
    if cfg is None or getattr(cfg, "memory", None) is None or not hasattr(model, "attention"):
        cell = getattr(cfg, "cell", "?")
        raise RnnlensError(f"this language model has no memory block (cell {cell}, model.memory null); "
                           "attention analysis needs an RM or RMR model (model.memory rm or rmr)")
    return int(cfg.memory_size), bool(cfg.memory_bidirectional)


# --- Figure 3: average attention per memory position ------------------------------------

@dataclass
class PositionAverage:
    """Attention summed and counted per slot over the positions where the slot exists, so
    the first words of short sentences (which have fewer slots) do not dilute the average.

    offsets: [K] slot offsets; sums: [K] float64; counts: [K] int64.
    """

    offsets: list[int]
    sums: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def empty(cls, offsets: Sequence[int]) -> "PositionAverage":
        K = len(offsets)
        return cls(list(offsets), torch.zeros(K, dtype=torch.float64), torch.zeros(K, dtype=torch.long))

    def update(self, attn: torch.Tensor, exists: torch.Tensor) -> "PositionAverage":
        a = attn.detach().to("cpu", torch.float64)
        e = exists.to("cpu")
        self.sums += (a * e).sum((0, 1))
        self.counts += e.sum((0, 1))
        return self

    @property
    def mean(self) -> torch.Tensor:
        """[K] float64, NaN where a slot never existed."""
        return torch.where(self.counts > 0, self.sums / self.counts.clamp(min=1),
                           torch.full_like(self.sums, float("nan")))

    def to_dict(self) -> dict:
        return {"offsets": self.offsets, "distance": distances(self.offsets),
                "mean": [None if math.isnan(v) else v for v in self.mean.tolist()],
                "count": self.counts.tolist()}


def average_attention(attn: torch.Tensor, mask: torch.Tensor,
                      offsets: Sequence[int] | None = None) -> PositionAverage:
    """The paper's Figure 3: mean attention per memory position. attn [B,T,K], mask [B,T].
    offsets default to a one-direction block of K slots. -> PositionAverage (mean, count)."""
    offsets = list(offsets) if offsets is not None else slot_offsets(attn.shape[-1])
    return PositionAverage.empty(offsets).update(attn, slot_exists(mask, offsets))


# --- Figure 4: attention rows of sampled words -----------------------------------------

@dataclass
class AttentionRow:
    """The block's attention at one position: the words in its memory and their weights.

    sentence: index of the sentence; position: input position t; current: x_t;
    target: the word to predict (gold x_{t+1}); predicted: the model's argmax (or None);
    memory: [K] the word in each slot (None where the slot does not exist); weights: [K].
    """

    sentence: int
    position: int
    current: str
    target: str
    predicted: str | None
    memory: list[str | None]
    weights: list[float]

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def attention_rows(attn: torch.Tensor, inputs: Sequence[Sequence[str]], targets: Sequence[Sequence[str]],
                   picks: Iterable[tuple[int, int]], offsets: Sequence[int] | None = None,
                   predicted: Sequence[Sequence[str]] | None = None,
                   sentence_ids: Sequence[int] | None = None) -> list[AttentionRow]:
    """The paper's Figure 4 rows: for each (b, t) in picks, the words in memory at input
    position t of row b and the weights on them. attn [B,T,K]; inputs[b] / targets[b]: the
    row's input tokens and the tokens predicted from them (same length); sentence_ids[b]:
    the sentence index to report (default b)."""
    offsets = list(offsets) if offsets is not None else slot_offsets(attn.shape[-1])
    rows = []
    a = attn.detach().to("cpu", torch.float64)
    for b, t in picks:
        words = inputs[b]
        if not 0 <= t < len(words):
            raise IndexError(f"position {t} is outside row {b} ({len(words)} tokens)")
        memory = [words[t + o] if 0 <= t + o < len(words) else None for o in offsets]
        weights = [float(w) if m is not None else 0.0 for m, w in zip(memory, a[b, t].tolist())]
        rows.append(AttentionRow(sentence_ids[b] if sentence_ids is not None else b, t, words[t], targets[b][t],
                                 predicted[b][t] if predicted is not None else None, memory, weights))
    return rows


class Reservoir:
    """A uniform sample of n items from a stream of unknown length (Algorithm R), seeded:
    the same stream in the same order gives the same sample. For each item of the stream,
    `slot()` says where it goes in `items` (None: not kept), so only kept items are built."""

    def __init__(self, n: int, seed: int = 0):
        self.n, self.rng, self.seen, self.items = n, random.Random(seed), 0, []

    def slot(self) -> int | None:
        i = self.seen
        self.seen += 1
        if i < self.n:
            self.items.append(None)
            return i
        j = self.rng.randrange(i + 1)
        return j if j < self.n else None


# --- Table 3: long-distance (most-attended word, word to predict) pairs -----------------

def long_distance_pairs(attn: torch.Tensor, mask: torch.Tensor, inputs: Sequence[Sequence[str]],
                        targets: Sequence[Sequence[str]], offsets: Sequence[int] | None = None,
                        min_distance: int = 7) -> Counter:
    """Positions where the block's largest weight (over existing slots) is on a word at
    distance d >= min_distance from the word to predict (the paper: "more than six positions
    to the left", d = 7 .. N). -> Counter{(attended word, word to predict, d): occurrences}.

    targets[b][t] is what counts as the word to predict: pass the gold next words (the
    paper's "word to predict") or the model's argmax predictions. Ties go to the lower slot
    (the more recent word). Future slots of a bidirectional block have d < 0 and never count.
    """
    offsets = list(offsets) if offsets is not None else slot_offsets(attn.shape[-1])
    exists = slot_exists(mask, offsets).cpu()
    a = attn.detach().cpu().masked_fill(~exists, -1.0)
    best = a.argmax(-1)                                                      # [B,T]
    dist = torch.tensor(distances(offsets))[best]
    keep = exists.any(-1) & (dist >= min_distance)
    out: Counter = Counter()
    for b, t in keep.nonzero().tolist():
        d = int(dist[b, t])
        out[(inputs[b][t + offsets[int(best[b, t])]], targets[b][t], d)] += 1
    return out


def cooccurrence_counts(sentences: Iterable[Sequence[str]], pairs: Iterable[tuple[str, str]]) -> dict:
    """For each (a, b): the number of sentences in which a occurs before b (anywhere before:
    any distance; a pair of one word needs two occurrences). -> {(a, b): count}."""
    wanted: dict[str, set[str]] = defaultdict(set)
    for a, b in pairs:
        wanted[a].add(b)
    counts = {(a, b): 0 for a, bs in wanted.items() for b in bs}
    if not counts:
        return counts
    for sent in sentences:
        first: dict[str, int] = {}
        last: dict[str, int] = {}
        for i, w in enumerate(sent):
            first.setdefault(w, i)
            last[w] = i
        for a in wanted.keys() & first.keys():
            fa = first[a]
            for b in wanted[a]:
                if last.get(b, -1) > fa:
                    counts[(a, b)] += 1
    return counts


def pair_table(pairs: Counter, frequency: dict | None = None) -> dict:
    """Table 3 from long_distance_pairs' Counter and cooccurrence_counts' dict (or None).

    -> {"pairs": [{attended, predicted, distance, count, frequency}] most frequent first,
        "by_distance": {d: {"occurrences", "pairs" (distinct), "mean_frequency" (over the
        occurrences), "mean_frequency_distinct" (over the distinct pairs)}}}; frequencies
    are None when no training data was given.
    """
    rows = []
    for (a, p, d), n in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0][2], kv[0][0], kv[0][1])):
        f = None if frequency is None else int(frequency.get((a, p), 0))
        rows.append({"attended": a, "predicted": p, "distance": d, "count": n, "frequency": f})
    by: dict[int, dict] = {}
    for d in sorted({r["distance"] for r in rows}):
        group = [r for r in rows if r["distance"] == d]
        occ = sum(r["count"] for r in group)
        entry = {"occurrences": occ, "pairs": len(group), "mean_frequency": None, "mean_frequency_distinct": None}
        if frequency is not None:
            entry["mean_frequency"] = sum(r["count"] * r["frequency"] for r in group) / occ
            entry["mean_frequency_distinct"] = sum(r["frequency"] for r in group) / len(group)
        by[d] = entry
    return {"pairs": rows, "by_distance": by}


# --- Figure 6: attention per dependency relation and direction --------------------------

def default_bins(offsets: Sequence[int]) -> list[tuple[str, list[int]]]:
    """Bins of slots for Figure 6 ("more distant positions are binned"): distances 1..6 one
    by one, then groups of three (7-9, 10-12, 13-15, ...); future slots of a bidirectional
    block the same way on their side. -> [(label, slot indices)]."""
    def group(ds: list[tuple[int, int]]) -> list[tuple[str, list[int]]]:
        out = []
        near = [(d, k) for d, k in ds if abs(d) <= 6]
        far = [(d, k) for d, k in ds if abs(d) > 6]
        out += [(str(d), [k]) for d, k in near]
        for i in range(0, len(far), 3):
            chunk = far[i: i + 3]
            lo, hi = chunk[0][0], chunk[-1][0]
            out.append((str(lo) if lo == hi else f"{lo}..{hi}", [k for _, k in chunk]))
        return out

    ds = [(d, k) for k, d in enumerate(distances(offsets))]
    return group(sorted((x for x in ds if x[0] > 0), key=lambda x: x[0])) + \
        group(sorted((x for x in ds if x[0] < 0), key=lambda x: -x[0]))


@dataclass
class DependencyAttention:
    """Attention weight summed and counted per (relation, direction) and slot, over the
    (position, slot) pairs where a dependency arc joins the word to predict and the word in
    the slot; `all` is the same over every existing slot (the paper's ALL row).

    direction: HEAD_LEFT when the arc's head is the left of the two words (for the history
    slots: the word to predict depends on the attended word), HEAD_RIGHT when the head is
    the right one (the attended word depends on the word to predict).
    sums[(rel, dir)]: [K] float64; counts[(rel, dir)]: [K] int64.
    """

    offsets: list[int]
    sums: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)
    all: PositionAverage | None = None

    def __post_init__(self):
        if self.all is None:
            self.all = PositionAverage.empty(self.offsets)

    def _add(self, key, k: int, w: float) -> None:
        if key not in self.sums:
            K = len(self.offsets)
            self.sums[key] = torch.zeros(K, dtype=torch.float64)
            self.counts[key] = torch.zeros(K, dtype=torch.long)
        self.sums[key][k] += w
        self.counts[key][k] += 1

    def mean(self, key) -> torch.Tensor:
        """[K] mean weight of one (rel, dir) per slot (NaN where it never occurs)."""
        s, c = self.sums[key], self.counts[key]
        return torch.where(c > 0, s / c.clamp(min=1), torch.full_like(s, float("nan")))

    def totals(self) -> list[dict]:
        """Per (rel, dir) over all slots: mass (summed weight), count, mean; most frequent first."""
        rows = [{"relation": r, "direction": d, "mass": float(self.sums[(r, d)].sum()),
                 "count": int(self.counts[(r, d)].sum())} for r, d in self.sums]
        for row in rows:
            row["mean"] = row["mass"] / row["count"]
        return sorted(rows, key=lambda r: (-r["count"], r["relation"], r["direction"]))

    def binned(self, bins: list[tuple[str, list[int]]] | None = None) -> dict:
        """The paper's Figure 6 table: mean weight per (rel, dir) and bin of slots (summed
        weight over summed count within the bin), with the ALL row first.
        -> {"bins": [labels], "rows": [{"label", "relation", "direction", "mean": [..|None],
        "count": [..]}]}; rows after ALL most frequent first."""
        bins = bins or default_bins(self.offsets)

        def row(label, rel, d, sums, counts):
            m, c = [], []
            for _, ks in bins:
                n = int(sum(int(counts[k]) for k in ks))
                c.append(n)
                m.append(float(sum(float(sums[k]) for k in ks)) / n if n else None)
            return {"label": label, "relation": rel, "direction": d, "mean": m, "count": c}

        rows = [row("ALL", None, None, self.all.sums, self.all.counts)]
        for t in self.totals():
            key = (t["relation"], t["direction"])
            rows.append(row(relation_label(*key), *key, self.sums[key], self.counts[key]))
        return {"bins": [b for b, _ in bins], "rows": rows}

    def to_dict(self) -> dict:
        return {"offsets": self.offsets, "totals": self.totals(), "binned": self.binned(),
                "per_slot": [{"relation": r, "direction": d, "sum": self.sums[(r, d)].tolist(),
                              "count": self.counts[(r, d)].tolist()} for r, d in sorted(self.sums)]}


def relation_label(rel: str, direction: str) -> str:
    """`nsubj (head left)`-style label of a (relation, direction) key."""
    return f"{rel} ({'head left' if direction == HEAD_LEFT else 'head right'})"


def dependency_attention(attn: torch.Tensor, mask: torch.Tensor, parses: Sequence, leads: Sequence[int] | int = 1,
                         offsets: Sequence[int] | None = None, into: DependencyAttention | None = None,
                         strip_subtypes: bool = False) -> DependencyAttention:
    """The paper's Figure 6: for every arc (dependent, head, rel) of each row's parse and both
    ways round (each word of the arc once as the word to predict, the other as the memory
    word), the weight the block puts on the memory word at the position that predicts the
    other one, if that word is in an existing slot.

    attn [B,T,K], mask [B,T]; parses[b]: the row's conllu.DepSentence (or None: no parse);
    leads[b]: how many input tokens come before the sentence's first word (1 for the
    sentence-level LM's leading <eos>), so word i (0-based) is at input position i + lead
    and is predicted at position i + lead - 1. strip_subtypes: nmod:poss -> nmod.
    into: accumulate into an existing DependencyAttention (several batches).
    """
    offsets = list(offsets) if offsets is not None else slot_offsets(attn.shape[-1])
    acc = into if into is not None else DependencyAttention(offsets)
    exists = slot_exists(mask, offsets).cpu()
    acc.all.update(attn, exists)
    a = attn.detach().to("cpu", torch.float64)
    slot_of = {o: k for k, o in enumerate(offsets)}
    for b, parse in enumerate(parses):
        if parse is None:
            continue
        lead = leads if isinstance(leads, int) else leads[b]
        for dep, head, rel in parse.arcs():
            if strip_subtypes:
                rel = rel.split(":")[0]
            direction = HEAD_LEFT if head < dep else HEAD_RIGHT
            for pred, mem in ((dep, head), (head, dep)):
                t = pred + lead - 1
                k = slot_of.get(mem - pred + 1)            # memory word at t + offset
                if k is None or t < 0 or t >= exists.shape[1] or not exists[b, t, k]:
                    continue
                acc._add((rel, direction), k, float(a[b, t, k]))
    return acc


def check_parses(sentences: Sequence[Sequence[str]], parses: Sequence) -> None:
    """Parses must align with the sentences one to one, word for word (counts only: the
    text may have been normalised, e.g. rare words as <unk>)."""
    if len(parses) != len(sentences):
        raise RnnlensError(f"{len(parses)} parse(s) for {len(sentences)} sentence(s): the CoNLL-U file must "
                           "hold one parse per sentence, in order")
    for i, (s, p) in enumerate(zip(sentences, parses)):
        if len(p) != len(s):
            where = f" (its parse starts at line {p.line})" if getattr(p, "line", 0) else ""
            raise RnnlensError(f"sentence {i + 1} has {len(s)} words but its parse{where} has {len(p)}")
