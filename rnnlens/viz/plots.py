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



def cell_text(value: float, lim: float) -> str:
    """A heatmap cell's number with the decimals its scale needs (lim: the largest magnitude
    shown): two significant digits of lim, at most 4 decimals, and no "-0"."""
    import math

    decimals = min(4, max(0, 1 - math.floor(math.log10(lim)))) if lim > 0 and math.isfinite(lim) else 1
    text = f"{value:.{decimals}f}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text


def _upper_heatmap(s: np.ndarray, tokens: Sequence[str], path, title: str, xlabel: str, ylabel: str,
                   label: str) -> None:
    """The upper triangle of s[row, col] over the tokens (RdBu, symmetric limits, values
    written in the cells of sentences of at most 16 tokens)."""
    plt = _plt()
    T = len(tokens)
    masked = np.ma.masked_where(~np.triu(np.ones((T, T), dtype=bool)), s)
    lim = max(1e-9, float(np.abs(masked).max()))
    size = 0.55 * T + 2.2
    fig, ax = plt.subplots(figsize=(size + 1.0, size))
    im = ax.imshow(masked, cmap="RdBu", vmin=-lim, vmax=lim)
    ax.set_xticks(range(T), tokens, rotation=45, ha="right")
    ax.set_yticks(range(T), tokens)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if T <= 16:
        for i in range(T):
            for t in range(i, T):
                ax.text(t, i, cell_text(float(s[i, t]), lim), ha="center", va="center", fontsize=7)
    fig.colorbar(im, ax=ax, shrink=0.8, label=label)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)

def ngram_heatmap(tokens: Sequence[str], scores: np.ndarray, path: str | Path, title: str = "") -> Path:
    """Score of the n-gram from token i (row) to token t (column), as the implicit-ngrams
    paper's Figure 6; blue is positive and red negative, the colours of the bar plots.
    scores: [T(end), T(start)]."""
    s = np.asarray(scores, dtype=float).T                      # rows = start, cols = end
    _upper_heatmap(s, tokens, path, title, "n-gram ends at", "n-gram starts at", "polarity score")
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


def negation_boxes(groups: dict[str, dict[str, Sequence[float]]], path: str | Path, title: str = "") -> Path:
    """Box plots of polarity scores of adjectives and their negation / intensification
    phrases (implicit-ngrams Figures 2-5): one panel per adjective group (positive left,
    negative right, as Figure 3), one box per form, on a shared score axis.
    groups: polarity -> form -> scores (analysis.negation.score_groups); empty forms are
    left out. Boxes show quartiles and median, whiskers 1.5 IQR, circles outliers."""
    plt = _plt()
    panels = [(pol, {f: list(v) for f, v in forms.items() if len(v)}) for pol, forms in groups.items()]
    panels = [(pol, forms) for pol, forms in panels if forms] or [("no adjectives", {})]
    width = max(len(forms) for _, forms in panels) or 1
    fig, axes = plt.subplots(1, len(panels), figsize=(1.1 * width * len(panels) + 2.5, 4.2),
                             sharey=True, squeeze=False)
    for ax, (pol, forms) in zip(axes[0], panels):
        colour = NEG if pol == "negative" else POS
        names = list(forms)
        if names:
            box = ax.boxplot([forms[n] for n in names], patch_artist=True,
                             flierprops={"marker": "o", "markerfacecolor": "none", "markersize": 4})
            for patch in box["boxes"]:
                patch.set_facecolor(colour)
                patch.set_alpha(0.35)
            for med in box["medians"]:
                med.set_color("black")
            ax.set_xticks(range(1, len(names) + 1), [n.replace("X", "adj") for n in names],
                          rotation=20, ha="right")
        n = max((len(v) for v in forms.values()), default=0)
        ax.set_title(f"{pol} adjectives ({n})" if names else pol, fontsize=9)
        ax.axhline(0, color="black", lw=0.8)
    axes[0][0].set_ylabel("polarity score")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


# --- the model report (rnnlens report) ------------------------------------------------------

def _bars_on(ax, labels: Sequence[str], scores: Sequence[float], lim: float, xlabel: str) -> None:
    """The bars of ngram_bars drawn on one axis, with a given symmetric x range."""
    scores = np.asarray(scores, dtype=float)
    y = np.arange(len(labels))
    ax.barh(y, scores, color=[POS if s >= 0 else NEG for s in scores])
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.axvline(0, color="black", lw=0.8)
    ax.set_xlabel(xlabel)
    for yi, s in zip(y, scores):
        ax.annotate(f"{s:+.2f}", (s, yi), xytext=(4 if s >= 0 else -4, 0), textcoords="offset points",
                    ha="left" if s >= 0 else "right", va="center", fontsize=8)
    ax.set_xlim(-lim, lim)


def _short(label: str, width: int = 44) -> str:
    """A long n-gram label with its middle elided, so the bars keep their room."""
    if len(label) <= width:
        return label
    half = (width - 3) // 2
    return label[:half] + " … " + label[-half:]


def _distinct_short(labels: Sequence[str], width: int) -> list[str]:
    """The labels, each with its middle elided to `width` characters, or wider where that
    would make two of them alike (SemEval's Entity-Destination(e1,e2) and
    Entity-Origin(e1,e2)), up to the labels in full."""
    longest = max((len(lab) for lab in labels), default=0)
    width = max(width, 5)                      # room for a character either side of " … "
    while True:
        short = [_short(lab, width) for lab in labels]
        if len(set(short)) == len(set(labels)) or width >= longest:
            return short
        width += 1


def ngram_bars_both(tokens: Sequence[str], forward: Sequence[float], backward: Sequence[float],
                    path: str | Path, forward_end: int | None = None, backward_end: int = 0,
                    title: str = "", xlabel: str = "contribution") -> Path:
    """The bars of every n-gram ending at a token, in both directions of a bidirectional
    model (sequence-level paper, Figures 2 and 4, one panel per direction).

    forward[i]:  score of x_i..x_te read left to right, for i <= te = forward_end (default
                 the last token); entries past te are ignored.
    backward[j]: score of x_tb..x_j read right to left (it ends at x_tb = backward_end), for
                 j >= tb; entries before tb are ignored.
    A final-state summary reads the forward direction at the last token and the backward one
    at the first, which are the defaults. One shared score axis."""
    plt = _plt()
    T = len(tokens)
    te = T - 1 if forward_end is None else forward_end
    tb = backward_end
    fwd = [(_short(" ".join(tokens[i: te + 1])), float(forward[i])) for i in range(te + 1)]
    bwd = [(_short(" ".join(tokens[tb: j + 1])), float(backward[j])) for j in range(T - 1, tb - 1, -1)]
    lim = max([1e-9, *(abs(s) for _, s in fwd + bwd)]) * 1.3
    rows = max(len(fwd), len(bwd))
    fig, axes = plt.subplots(1, 2, figsize=(12.5, 0.45 * rows + 1.6))
    for ax, items, name in ((axes[0], fwd, f"forward, ending at '{tokens[te]}'"),
                            (axes[1], bwd, f"backward, ending at '{tokens[tb]}'")):
        _bars_on(ax, [a for a, _ in items], [s for _, s in items], lim, xlabel)
        ax.set_title(name, fontsize=9)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def ngram_heatmap_backward(tokens: Sequence[str], scores: np.ndarray, path: str | Path, title: str = "",
                           label: str = "contribution") -> Path:
    """The backward direction's n-grams of a bidirectional model as ngram_heatmap shows the
    forward ones. scores: [T(end), T(start)] in reading positions with end <= start (the
    n-gram x_end..x_start is read from x_start back to x_end). Row: the word it ends at
    (leftmost), column: the word it starts at (rightmost)."""
    s = np.asarray(scores, dtype=float)                          # rows = end (left), cols = start (right)
    _upper_heatmap(s, tokens, path, title, "n-gram starts at (read right to left)", "n-gram ends at", label)
    return Path(path)


def training_curves(metrics_rows: Sequence[dict], path: str | Path, metric: str | None = None,
                    title: str = "") -> Path:
    """Loss (left) and the main metric (right) per epoch, train and dev, from the rows of a
    checkpoint's metrics.jsonl (rows without "epoch", such as the test line, are skipped).
    metric: e.g. "accuracy", "f1", "ppl"; default: the first dev_* metric that is not the
    loss. The best epoch (its "best_epoch") is marked."""
    plt = _plt()
    rows = [r for r in metrics_rows if isinstance(r, dict) and "epoch" in r]
    if metric is None:
        metric = next((k[4:] for r in rows for k in r if k.startswith("dev_") and k != "dev_loss"), None)
    panels = [("loss", "loss")] + ([(metric, metric)] if metric else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 3.6), squeeze=False)
    best = rows[-1].get("best_epoch") if rows else None
    for ax, (key, name) in zip(axes[0], panels):
        for split, colour, style in (("train", "#4a5568", "--"), ("dev", POS, "-")):
            pts = [(r["epoch"], r[f"{split}_{key}"]) for r in rows
                   if isinstance(r.get(f"{split}_{key}"), (int, float))]
            if pts:
                ax.plot(*zip(*pts), style, marker="o", ms=4, color=colour, label=split)
        if best is not None:
            ax.axvline(best, color="#999999", lw=0.8, ls=":", label=f"best epoch ({best})")
        ax.set_xlabel("epoch")
        ax.set_ylabel(name)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        if rows:
            ax.set_xticks(sorted({r["epoch"] for r in rows}))
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def tsne_scatter(points: np.ndarray, labels: Sequence, path: str | Path, title: str = "",
                 names: Sequence[str] | None = None) -> Path:
    """2-D points [N, 2] coloured by label with a legend (implicit-ngrams Figure 7).
    labels: class indices (shown as names[label] when names are given) or real values
    (regression targets: a continuous colour bar)."""
    plt = _plt()
    pts = np.asarray(points, dtype=float)
    lab = np.asarray(labels)
    fig, ax = plt.subplots(figsize=(6.8, 5.6))
    if lab.dtype.kind == "f" and not np.all(lab == np.round(lab)):
        sc = ax.scatter(pts[:, 0], pts[:, 1], c=lab, cmap="RdBu", s=9, alpha=0.8)
        fig.colorbar(sc, ax=ax, shrink=0.8, label="target")
    else:
        classes = sorted(set(lab.tolist()))
        two = len(classes) == 2
        cmap = plt.get_cmap("tab10" if len(classes) <= 10 else "tab20")
        for k, c in enumerate(classes):
            colour = (NEG, POS)[k] if two else cmap(k % cmap.N)
            name = names[int(c)] if names is not None and 0 <= int(c) < len(names) else str(c)
            sel = lab == c
            ax.scatter(pts[sel, 0], pts[sel, 1], s=9, alpha=0.75, color=colour, label=f"{name} ({int(sel.sum())})")
        ax.legend(fontsize=8, markerscale=1.8, loc="best")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


# --- unitary recurrent networks (rnnlens unitary) --------------------------------------------

def signature_dials(names: Sequence[str], signatures: Sequence, path: str | Path, title: str = "",
                    effects: Sequence[float] | None = None, columns: int = 6) -> Path:
    """One dial per item, a hand per rotation angle of its signature (unitary-networks paper,
    Sec. 11.4.5.1 and Table 11.2): angle 0 points up, pi (180 degrees) points down, so a word
    that barely moves the state has its hands near the top. The largest angle gets the
    longest, darkest hand. signatures: per item a Signature (its .degrees) or a sequence of
    angles in degrees. effects: optional average effects, shown under the names."""
    plt = _plt()
    angles = [list(s.degrees) if hasattr(s, "degrees") else [float(a) for a in s] for s in signatures]
    k = len(names)
    cols = max(1, min(columns, k))
    rows = max(1, -(-k // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(1.9 * cols, 2.2 * rows + 0.5),
                             subplot_kw={"projection": "polar"}, squeeze=False)
    cmap = plt.get_cmap("Blues")
    for idx, ax in enumerate(axes.flat):
        if idx >= k:
            ax.set_visible(False)
            continue
        ax.set_theta_zero_location("N")
        ax.set_theta_direction(-1)
        ax.set_ylim(0, 1.05)
        ax.set_yticks([])
        ax.set_xticks(np.radians([0, 90, 180, 270]), [])     # grid at 0/90/180: the suptitle says which
        ax.grid(alpha=0.25)
        deg = sorted(angles[idx], reverse=True)
        for j, a in enumerate(deg):
            length = 1.0 - 0.5 * j / max(1, len(deg))
            shade = cmap(0.95 - 0.55 * j / max(1, len(deg)))
            ax.plot([np.radians(a)] * 2, [0, length], color=shade, lw=2.2 - 1.2 * j / max(1, len(deg)),
                    solid_capstyle="round")
        ax.plot([0], [0], "o", color="black", ms=3)
        label = str(names[idx])
        if effects is not None:
            label += f"\neffect {float(effects[idx]):.2f}"
        if not deg:
            label += "\n(no rotation)"
        ax.set_title(label, fontsize=8, pad=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def distance_heatmap(names: Sequence[str], table, path: str | Path, title: str = "",
                     label: str = "||Q_i - Q_j||_F^2") -> Path:
    """A symmetric table of distances between items as a heatmap with its numbers
    (unitary-networks paper, Table 11.4). table: [k, k] array-like, or anything with a
    .values of that shape (analysis.unitary.FrobeniusTable). Darker = closer."""
    plt = _plt()
    D = np.asarray(getattr(table, "values", table), dtype=float)
    k = len(names)
    size = 0.5 * k + 2.4
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = ax.imshow(D, cmap="viridis", vmin=0, vmax=max(1e-9, float(D.max())))
    tilt = max((len(str(n)) for n in names), default=0) > 2
    ax.set_xticks(range(k), names, rotation=45 if tilt else 0, ha="right" if tilt else "center")
    ax.set_yticks(range(k), names)
    if k <= 20:
        hi = float(D.max()) or 1.0
        for i in range(k):
            for j in range(k):
                ax.text(j, i, f"{D[i, j]:.2f}", ha="center", va="center", fontsize=7,
                        color="white" if D[i, j] < 0.6 * hi else "black")
    fig.colorbar(im, ax=ax, shrink=0.8, label=label)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)


def confusion_matrix(labels: Sequence[str], counts, path: str | Path, title: str = "") -> Path:
    """A confusion matrix (rows: gold, columns: predicted) with its counts; each row shaded
    by its share of the gold class, so that classes of different sizes read alike."""
    plt = _plt()
    C = np.asarray(counts, dtype=float)
    share = C / np.maximum(C.sum(1, keepdims=True), 1.0)
    k = len(labels)
    size = 0.55 * k + 2.6
    fig, ax = plt.subplots(figsize=(size + 1.2, size))
    im = ax.imshow(share, cmap="Blues", vmin=0, vmax=1)
    short = _distinct_short([str(lab) for lab in labels], 26)
    tilt = max((len(s) for s in short), default=0) > 3
    ax.set_xticks(range(k), short, rotation=45 if tilt else 0, ha="right" if tilt else "center")
    ax.set_yticks(range(k), short)
    ax.set_xlabel("predicted")
    ax.set_ylabel("gold")
    if k <= 30:
        for i in range(k):
            for j in range(k):
                ax.text(j, i, f"{int(C[i, j])}", ha="center", va="center", fontsize=7,
                        color="white" if share[i, j] > 0.5 else "black")
    fig.colorbar(im, ax=ax, shrink=0.8, label="share of the gold class")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Path(path)
