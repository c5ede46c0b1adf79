"""Figures of a reproduction table, from plain numbers (what `rnnlens repro --render` draws
beside each table of REPRODUCTION.md): how far each row lands from the paper, against the
table's tolerance, and the curves of the rows whose result is one number per attractor count
or length. Each function writes one PNG."""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from .plots import _plt, _short

# verdict -> colour: green within, red missed, orange above the paper, grey unjudged
COLOURS = {"reproduced": "#2f855a", "within-quick": "#9ae6b4", "missed": "#c53030", "above": "#dd6b20", "": "#a0aec0"}
NAMES = {"reproduced": "reproduced", "within-quick": "within (quick budget)", "missed": "missed",
         "above": "above the paper", "": "no verdict"}


def _finish(plt, fig, ax, path, title: str, outside: bool = False) -> Path:
    if outside:                                  # beside the axes: the points use all of them
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.legend(fontsize=7, loc="best")
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return Path(path)


def gap_plot(rows: Sequence[dict], path: str | Path, title: str = "", band: float | None = None,
             relative: bool = False, unit: str = "points") -> Path:
    """One dot per row at ours - paper (or, relative, (ours - paper) / paper in %), its
    standard deviation over seeds as a bar, coloured by verdict; the band is the tolerance;
    unit names the difference on the axis (points of a percentage, or the metric).
    rows: {"label", "diff", "std" (or None), "verdict", "paper"} in table order."""
    plt = _plt()
    n = len(rows)
    fig, ax = plt.subplots(figsize=(7.5, 0.3 * n + 1.4))
    y = np.arange(n)
    scale = [100.0 / abs(r["paper"]) if relative and r.get("paper") else 1.0 for r in rows]
    x = np.array([r["diff"] * s for r, s in zip(rows, scale)], dtype=float)
    err = np.array([(r.get("std") or 0.0) * s for r, s in zip(rows, scale)], dtype=float)
    if band:
        ax.axvspan(-band, band, color="#c6f6d5", alpha=0.6, lw=0, label=f"tolerance ±{band:g}{'%' if relative else ''}")
    ax.axvline(0, color="black", lw=0.8)
    seen = set()
    for yi, xi, ei, r in zip(y, x, err, rows):
        v = r.get("verdict", "")
        ax.errorbar(xi, yi, xerr=ei if ei else None, fmt="o", color=COLOURS.get(v, COLOURS[""]), ms=5, capsize=2,
                    label=None if v in seen else NAMES.get(v, v))
        seen.add(v)
    ax.set_yticks(y, [_short(r["label"], 40) for r in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("(ours - paper) / paper, %" if relative else f"ours - paper ({unit})")
    return _finish(plt, fig, ax, path, title)


def curve_plot(series: dict[str, dict[str, float]], path: str | Path, title: str = "", xlabel: str = "",
               ylabel: str = "", bound: float | None = None, paper: dict[str, dict[str, float]] | None = None) -> Path:
    """One line per row over its keys (attractor counts, lengths: numeric strings, drawn in
    numeric order), the bound a dashed line, and the paper's points where it printed them.
    series: {row label: {key: value}}."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7.0, 4.0))
    for label, values in series.items():
        keys = sorted(values, key=float)
        ax.plot([float(k) for k in keys], [values[k] for k in keys], marker="o", ms=3, label=_short(label, 48))
    for label, values in (paper or {}).items():
        keys = sorted(values, key=float)
        ax.plot([float(k) for k in keys], [values[k] for k in keys], "k^", ms=4, label=f"paper: {_short(label, 40)}")
    if bound is not None:
        ax.axhline(bound, color="#c53030", ls="--", lw=1, label=f"bound {bound:g}")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _finish(plt, fig, ax, path, title)


def search_plot(rows: Sequence[dict], path: str | Path, title: str = "", xlabel: str = "dev score") -> Path:
    """A tuned row's random search: one line per row, a dot per trial at its development
    score, the chosen trial a star, and the row's test mean over its seeds and the paper's
    number beside them where given. rows: {"label", "trials": [dev, ...], "best": index,
    "test" (or None), "paper" (or None)}, on one scale."""
    plt = _plt()
    n = len(rows)
    fig, ax = plt.subplots(figsize=(9.0, 0.5 * n + 1.4))
    seen = set()

    def mark(x, y, style, label, **kw):
        ax.plot(x, y, style, label=None if label in seen else label, **kw)
        seen.add(label)

    for y, r in enumerate(rows):
        devs = np.asarray(r["trials"], dtype=float)
        mark(devs, np.full(len(devs), y), "o", "trial (dev)", color="#a0aec0", ms=4, alpha=0.8)
        mark([devs[r["best"]]], [y], "*", "chosen trial (dev)", color="#2b6cb0", ms=11)
        if r.get("test") is not None:
            mark([r["test"]], [y + 0.2], "D", "its seeds' test mean", color="#2f855a", ms=5)
        if r.get("paper") is not None:
            mark([r["paper"]], [y + 0.2], "|", "paper (test)", color="black", ms=10, mew=2)
    ax.set_yticks(np.arange(n), [_short(r["label"], 40) for r in rows], fontsize=8)
    ax.set_ylim(n - 0.5, -0.5)
    ax.set_xlabel(xlabel)
    return _finish(plt, fig, ax, path, title, outside=True)
