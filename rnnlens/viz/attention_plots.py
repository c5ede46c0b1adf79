"""Figures of a recurrent memory network's attention (recurrent-memory paper, Figures 3, 4
and 6), drawn from the results of analysis/attention.py and analysis/attention_report.py
(or their JSON form). matplotlib is imported lazily with the Agg backend, as in
viz/plots.py. Each function writes one PNG.

Memory slots are drawn oldest on the left and the current word on the right, as the
paper's Figure 3 ("rightmost positions represent most recent history"); a bidirectional
block's words after the one to predict follow further right.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .plots import POS, _plt


def slot_label(offset: int) -> str:
    """'t' for the current word, 't-3' three words back, 't+2' after the word to predict."""
    return "t" if offset == 0 else f"t{offset:+d}"


def _slot_order(offsets: Sequence[int]) -> list[int]:
    """Slot indices left to right: history oldest first, then the future in order."""
    return sorted(range(len(offsets)), key=lambda k: offsets[k])


def _mark_gap(ax, offsets: Sequence[int], order: list[int]) -> None:
    """A bidirectional memory has no slot for the word to predict: a line where it would be."""
    future = [j for j, k in enumerate(order) if offsets[k] > 0]
    if future:
        ax.axvline(future[0] - 0.5, color="#444444", lw=1.2, ls="--")


def _as_dict(x):
    return x.to_dict() if hasattr(x, "to_dict") else x


def attention_by_position(average, path: str | Path, title: str = "") -> Path:
    """Average attention per memory position (Figure 3) as bars, with the number of
    positions each average is over under the axis. average: attention.PositionAverage or
    its to_dict() ({"offsets", "mean", "count"}); slots that never existed are left empty."""
    plt = _plt()
    d = _as_dict(average)
    order = _slot_order(d["offsets"])
    means = [d["mean"][k] for k in order]
    labels = [slot_label(d["offsets"][k]) for k in order]
    counts = [d["count"][k] for k in order]
    vals = np.array([np.nan if m is None else m for m in means], dtype=float)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.42 * len(order) + 2.6), 3.6))
    x = np.arange(len(order))
    ax.bar(x, np.nan_to_num(vals), color=[POS if d["offsets"][k] <= 0 else "#805ad5" for k in order])
    ax.set_xticks(x, [f"{lab}\n{c}" for lab, c in zip(labels, counts)], fontsize=7)
    _mark_gap(ax, d["offsets"], order)
    ax.set_xlabel("memory position (under it: positions averaged over)")
    ax.set_ylabel("average attention")
    top = float(np.nanmax(vals)) if np.isfinite(vals).any() else 1.0
    for xi, v in zip(x, vals):
        if np.isfinite(v):
            ax.annotate(f"{v:.2f}", (xi, v), xytext=(0, 2), textcoords="offset points", ha="center",
                        fontsize=7)
    ax.set_ylim(0, max(top * 1.15, 1e-9))
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def attention_maps(rows: Sequence, offsets: Sequence[int], path: str | Path, title: str = "",
                   words_in_cells: int = 40) -> Path:
    """Attention of sampled positions (Figure 4) as a heatmap: one row per sample, labelled
    with the word to predict (and the current word), one column per memory slot; darker is
    more weight, white where the slot does not exist. With at most `words_in_cells` rows the
    word in each slot is written in its cell. rows: attention.AttentionRow or their dicts."""
    plt = _plt()
    rows = [_as_dict(r) for r in rows]
    order = _slot_order(offsets)
    n, K = len(rows), len(order)
    W = np.full((max(n, 1), K), np.nan)
    for i, r in enumerate(rows):
        for j, k in enumerate(order):
            if r["memory"][k] is not None:
                W[i, j] = r["weights"][k]
    height = 0.28 * max(n, 1) + 1.6
    fig, ax = plt.subplots(figsize=(0.75 * K + 3.5, height))
    im = ax.imshow(np.ma.masked_invalid(W), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(K), [slot_label(offsets[k]) for k in order], fontsize=8)
    ax.set_yticks(range(n), [f"{r['current']} → {r['target']}" for r in rows], fontsize=7)
    _mark_gap(ax, offsets, order)
    ax.set_xlabel("memory slot" + (" (the words in it written in the cells)" if n <= words_in_cells else ""))
    ax.set_ylabel("current word → word to predict")
    if n <= words_in_cells:
        for i, r in enumerate(rows):
            for j, k in enumerate(order):
                w = r["memory"][k]
                if w is not None:
                    dark = W[i, j] > 0.55
                    ax.text(j, i, w if len(w) <= 10 else w[:9] + "…", ha="center", va="center", fontsize=6,
                            color="white" if dark else "black")
    fig.colorbar(im, ax=ax, shrink=min(0.8, 4.0 / height), label="attention weight")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def dependency_attention_plot(binned: dict, totals: Sequence[dict], path: str | Path, title: str = "",
                              top: int = 15) -> Path:
    """Attention by dependency relation and direction (Figure 6). Left: the paper's table,
    the mean weight per relation (rows, ALL first) and memory-position bin (columns), white
    where a combination never occurs. Right: each relation's mean weight over all its
    positions, with how many (position, slot) pairs it is over.
    binned: DependencyAttention.binned(); totals: DependencyAttention.totals(); the `top`
    most frequent relations are drawn."""
    plt = _plt()
    from ..analysis.attention import relation_label

    rows = binned["rows"][: top + 1]
    bins = binned["bins"]
    M = np.array([[np.nan if v is None else v for v in r["mean"]] for r in rows], dtype=float)
    fig, (ax, bx) = plt.subplots(1, 2, figsize=(0.7 * len(bins) + 8.5, 0.36 * len(rows) + 1.9),
                                 gridspec_kw={"width_ratios": [max(len(bins), 1), 4]})
    hi = float(np.nanmax(M)) if np.isfinite(M).any() else 1.0
    im = ax.imshow(np.ma.masked_invalid(M), cmap="Blues", vmin=0, vmax=max(hi, 1e-9), aspect="auto")
    ax.set_xticks(range(len(bins)), bins, fontsize=8)
    ax.set_yticks(range(len(rows)), [r["label"] for r in rows], fontsize=8)
    ax.set_xlabel("distance from the word to predict (binned)")
    if len(rows) * len(bins) <= 400:
        for i in range(len(rows)):
            for j in range(len(bins)):
                if np.isfinite(M[i, j]):
                    ax.text(j, i, f"{M[i, j]:.2f}", ha="center", va="center", fontsize=6,
                            color="white" if M[i, j] > 0.6 * hi else "black")
    fig.colorbar(im, ax=ax, shrink=0.8, label="mean attention weight")
    ax.set_title("mean weight per position", fontsize=9)
    shown = list(totals)[:top]
    y = np.arange(len(shown))
    bx.barh(y, [t["mean"] for t in shown], color=POS)
    bx.set_yticks(y, [relation_label(t["relation"], t["direction"]) for t in shown], fontsize=8)
    bx.invert_yaxis()
    for yi, t in zip(y, shown):
        bx.annotate(f"n={t['count']}", (t["mean"], yi), xytext=(3, 0), textcoords="offset points",
                    va="center", fontsize=7)
    bx.set_xlabel("mean weight on the arc's other word")
    bx.set_xlim(0, max([1e-9, *(t["mean"] for t in shown)]) * 1.35)
    bx.set_title("all positions", fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
