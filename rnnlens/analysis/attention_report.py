"""A recurrent memory network's attention studies run over a corpus (Tran, Bisazza & Monz
2016, Section 5): `analyse_attention` feeds the sentences through a memory-network language
model batch by batch and measures, in one pass, Figures 3, 4 and 6 and Table 3 with the pure
functions of attention.py (whose docstring has the slot and distance conventions);
`AttentionReport` holds the results and `format_summary` prints them for the terminal.
Nothing here plots or writes files (viz/attention_plots.py draws the figures).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch

from ..errors import RnnlensError
from .attention import (
    AttentionRow,
    DependencyAttention,
    PositionAverage,
    Reservoir,
    attention_rows,
    check_parses,
    cooccurrence_counts,
    dependency_attention,
    distances,
    long_distance_pairs,
    memory_layout,
    pair_table,
    relation_label,
    slot_exists,
    slot_offsets,
)


@dataclass
class AttentionReport:
    """Everything `analyse_attention` measured; `to_dict()` is JSON-ready."""

    size: int
    bidirectional: bool
    offsets: list[int]
    sentences: int
    positions: int
    average: PositionAverage
    samples: list[AttentionRow]
    pairs: dict
    predicted: str
    min_distance: int
    dependencies: DependencyAttention | None = None
    cooccurrence_sentences: int | None = None

    def to_dict(self) -> dict:
        return {"memory_size": self.size, "bidirectional": self.bidirectional, "offsets": self.offsets,
                "distance": distances(self.offsets), "sentences": self.sentences, "positions": self.positions,
                "average": self.average.to_dict(), "samples": [r.to_dict() for r in self.samples],
                "pairs": {"predicted": self.predicted, "min_distance": self.min_distance,
                          "training_sentences": self.cooccurrence_sentences,
                          "by_distance": {str(d): v for d, v in self.pairs["by_distance"].items()},
                          "pairs": self.pairs["pairs"]},
                "dependencies": None if self.dependencies is None else self.dependencies.to_dict()}


def analyse_attention(model, vocab, sentences: Sequence[Sequence[str]], parses: Sequence | None = None,
                      train_sentences: Iterable[Sequence[str]] | None = None, batch_size: int = 64,
                      samples: int = 100, seed: int = 0, min_distance: int = 7,
                      predicted: str = "gold", strip_subtypes: bool = False) -> AttentionReport:
    """Run a memory-network LM over sentences (token lists) and measure Figures 3, 4, 6 and
    Table 3 in one pass, batch by batch (analysis.lm.sentence_batch, model.attention).

    parses: one conllu.DepSentence per sentence, with as many words (Figure 6; None: skip).
    train_sentences: token lists (no <eos>) for the co-occurrence counts of Table 3 (None: no
    counts). They are counted as the model reads a sentence, [<eos>, w1..wn, <eos>], with
    words outside the vocabulary as <unk>, so pairs with the sentence boundary count too.
    samples: how many positions to sample for Figure 4 (uniformly over all positions, seeded).
    predicted: what "the word to predict" is in Table 3 and the rows: "gold" (the next word
    of the text, the paper's word-to-predict) or "argmax" (the model's most probable word).
    """
    from .lm import sentence_batch

    if predicted not in ("gold", "argmax"):
        raise RnnlensError(f"predicted must be 'gold' or 'argmax', not {predicted!r}")
    size, bidirectional = memory_layout(model)
    offsets = slot_offsets(size, bidirectional)
    if parses is not None:
        check_parses(sentences, parses)
    sentences = [list(s) for s in sentences]
    if not sentences:
        raise RnnlensError("no sentences to analyse")
    average = PositionAverage.empty(offsets)
    deps = DependencyAttention(offsets) if parses is not None else None
    pairs: Counter = Counter()
    reservoir = Reservoir(samples, seed)
    positions = 0
    device = next(model.parameters()).device
    model.eval()
    for start in range(0, len(sentences), batch_size):
        chunk = sentences[start: start + batch_size]
        batch = sentence_batch(vocab, chunk).to(device)
        with torch.no_grad():
            attn = model.attention(batch).cpu()
            guess = _argmax_words(model, batch) if predicted == "argmax" else None
        mask = batch.mask.cpu()
        if attn.shape[:2] != mask.shape or attn.shape[-1] != len(offsets):
            raise RnnlensError(f"the model's attention has shape {tuple(attn.shape)}; expected "
                               f"[{mask.shape[0]}, {mask.shape[1]}, {len(offsets)}]")
        lengths = mask.sum(1).tolist()
        tokens, targets = batch.tokens.cpu().tolist(), batch.targets.cpu().tolist()
        inputs = [vocab.decode(row[:n]) for row, n in zip(tokens, lengths)]
        gold = [vocab.decode(row[:n]) for row, n in zip(targets, lengths)]
        best = [vocab.decode(row[:n]) for row, n in zip(guess.tolist(), lengths)] if guess is not None else None
        leads = [n - len(s) for n, s in zip(lengths, chunk)]
        exists = slot_exists(mask, offsets)
        average.update(attn, exists)
        positions += int(mask.sum())
        pairs.update(long_distance_pairs(attn, mask, inputs, best if best is not None else gold, offsets,
                                         min_distance))
        if deps is not None:
            dependency_attention(attn, mask, parses[start: start + len(chunk)], leads, offsets, into=deps,
                                 strip_subtypes=strip_subtypes)
        ids = list(range(start, start + len(chunk)))
        for b, n in enumerate(lengths):
            for t in range(n):
                k = reservoir.slot()
                if k is not None:
                    reservoir.items[k] = attention_rows(attn, inputs, gold, [(b, t)], offsets, best, ids)[0]
    freq, n_train = None, None
    if train_sentences is not None:
        # as the model reads them: <eos> starts and ends every sentence, rare words are <unk>
        unk, eos = "<unk>", "<eos>"
        mapped = [[eos, *(w if w in vocab else unk for w in s), eos] for s in train_sentences]
        n_train = len(mapped)
        freq = cooccurrence_counts(mapped, {(a, p) for a, p, _ in pairs})
    rows = sorted(reservoir.items, key=lambda r: (r.sentence, r.position))
    return AttentionReport(size, bidirectional, offsets, len(sentences), positions, average, rows,
                           pair_table(pairs, freq), predicted, min_distance, deps, n_train)


def _argmax_words(model, batch) -> torch.Tensor:
    """[B,T] the model's most probable next token (an adaptive softmax head outputs the
    projected states; its own predict() gives the argmax)."""
    out = model(batch)
    adaptive = model.head.adaptive
    if adaptive is not None:
        B, T, D = out.shape
        return adaptive.predict(out.reshape(B * T, D)).view(B, T).cpu()
    return out.argmax(-1).cpu()


def format_summary(report: AttentionReport, top: int = 10) -> str:
    """A few lines for the terminal: average attention by distance, the long-distance
    pairs by distance and the most frequent ones, the most attended relations."""
    lines = [f"{report.sentences} sentences, {report.positions} positions; memory of {report.size} words"
             + (" on each side (bidirectional)" if report.bidirectional else "")]
    lines.append("average attention by distance from the word to predict (d=1: the current word):")
    avg = report.average.to_dict()
    for d, m, c in zip(avg["distance"], avg["mean"], avg["count"]):
        bar = "#" * round((m or 0.0) * 50)
        lines.append(f"  d={d:>3}  {'-' if m is None else f'{m:.4f}':>7}  n={c:<8} {bar}")
    by = report.pairs["by_distance"]
    what = "gold next word" if report.predicted == "gold" else "model's argmax"
    lines.append(f"most-attended word at d >= {report.min_distance} (word to predict: {what}): "
                 f"{sum(v['occurrences'] for v in by.values())} positions")
    for d, v in by.items():
        mf = "" if v["mean_frequency"] is None else f"  mean co-occurrence frequency {v['mean_frequency']:.1f}"
        lines.append(f"  d={d:>3}  {v['occurrences']:>6} positions, {v['pairs']:>5} distinct pairs{mf}")
    for r in report.pairs["pairs"][:top]:
        f = "" if r["frequency"] is None else f"  train co-occurrences {r['frequency']}"
        lines.append(f"  {r['attended']} ... {r['predicted']}  d={r['distance']}  x{r['count']}{f}")
    if report.dependencies is not None:
        tot = report.dependencies.totals()
        lines.append(f"attention on dependency arcs ({len(tot)} relation/direction kinds), most frequent:")
        for r in tot[:top]:
            lines.append(f"  {relation_label(r['relation'], r['direction']):<28} n={r['count']:<7} "
                         f"mean weight {r['mean']:.4f}")
    return "\n".join(lines)
