"""Figures. matplotlib is imported lazily, with the non-interactive Agg backend, so the
library imports fast and works without a display. Each function writes one PNG."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

# Blue for positive scores and red for negative, as in the sequence-level paper's Figure 2.
POS, NEG = "#2b6cb0", "#c53030"


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def ngram_bars(labels: Sequence[str], scores: Sequence[float], path: str | Path, title: str = "") -> Path:
    """Horizontal bars, one per n-gram (sequence-level paper, Figures 2 and 4)."""
    plt = _plt()
    scores = np.asarray(scores, dtype=float)
    fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(labels) + 1.2))
    y = np.arange(len(labels))
    ax.barh(y, scores, color=[POS if s >= 0 else NEG for s in scores])
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel("polarity score  w^T v(i:t)")
    for yi, s in zip(y, scores):
        ax.annotate(f"{s:+.2f}", (s, yi), xytext=(4 if s >= 0 else -4, 0), textcoords="offset points",
                    ha="left" if s >= 0 else "right", va="center", fontsize=8)
    lim = max(1e-9, float(np.abs(scores).max())) * 1.3
    ax.set_xlim(-lim, lim)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def ngram_heatmap(tokens: Sequence[str], scores: np.ndarray, path: str | Path, title: str = "") -> Path:
    """Score of the n-gram from token i (row) to token t (column), as the implicit-ngrams
    paper's Figure 6; blue is positive and red negative, the colours of the bar plots.
    scores: [T(end), T(start)]."""
    plt = _plt()
    s = np.asarray(scores, dtype=float).T                      # rows = start, cols = end
    T = len(tokens)
    masked = np.ma.masked_where(~np.triu(np.ones((T, T), dtype=bool)), s)
    lim = max(1e-9, float(np.abs(masked).max()))
    size = 0.55 * T + 2.2
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    im = ax.imshow(masked, cmap="RdBu", vmin=-lim, vmax=lim)
    ax.set_xticks(range(T), tokens, rotation=45, ha="right")
    ax.set_yticks(range(T), tokens)
    ax.set_xlabel("n-gram ends at")
    ax.set_ylabel("n-gram starts at")
    if T <= 16:
        for i in range(T):
            for t in range(i, T):
                ax.text(t, i, f"{s[i, t]:.1f}", ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, shrink=0.8, label="polarity score")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def polarity_boxes(groups: dict[str, Sequence[float]], path: str | Path, title: str = "") -> Path:
    """Box plot of score distributions, one box per group (sequence-level Figure 1,
    implicit-ngrams Figure 2)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(1.2 * len(groups) + 2, 4))
    names = list(groups)
    ax.boxplot([list(groups[n]) for n in names])
    ax.set_xticks(range(1, len(names) + 1), names, rotation=20, ha="right")
    ax.axhline(0, color="black", lw=0.8)
    ax.set_ylabel("polarity score")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
