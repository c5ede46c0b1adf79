"""`rnnlens demo`: train a GRU on the built-in polarity corpus and explain it.

Writes the checkpoint, summary.json, PNG figures and report.html: the polarity table of
the sequence-level paper's Table 1, the bars of every n-gram ending at "charming" in
"those filmmakings were not not charming" (its Figure 2), and an n-gram heatmap (the
implicit-ngrams paper's Figure 6).
"""
from __future__ import annotations

import time
from pathlib import Path

from .analysis.polarity import adjective_table, summarize
from .analysis.sentence import explain_text
from .data.synthetic import FORMS, NEGATIVE, POSITIVE
from .data.tokenize import Tokenizer
from .train.checkpoint import output_dir
from .config import Config
from .outfiles import json_text
from .train.run import train_run
from .viz import plots, report

BARS_SENTENCE = "those filmmakings were not not charming"
HEATMAP_SENTENCE = "the actors were really not dull but the plot was not interesting"
FORM_NAMES = {"token": "tokens", "negation": "negation phrases", "double_negation": "double negation phrases"}


def polarity_table_text(summary: dict) -> str:
    """The Table 1 layout as plain text for the terminal."""
    lines = [f"{'':24}{'':26}{'polarity score':>16}"]
    for pol in ("positive", "negative"):
        group = f"{pol} tokens ({summary[pol]['count']})"
        for form in FORMS:
            s = summary[pol][form]
            lines.append(f"{group:24}{FORM_NAMES[form]:26}{s['mean']:>+9.2f} ± {s['std']:.2f}")
            group = ""
    n = summary["adjectives"]
    lines.append(f"negation flips the sign of the token score for {summary['negation_flips']}/{n} adjectives; "
                 f"double negation flips it back for {summary['double_negation_restores']}/{n}")
    return "\n".join(lines)


def run_demo(out: str | Path, force: bool = False, cell: str = "gru", seed: int = 0,
             epochs: int | None = None, double_negation: bool = True, progress: bool = True) -> dict:
    t0 = time.perf_counter()
    cfg = Config.from_dict({"model": {"cell": cell},
                            "train": {"seed": seed, **({"epochs": epochs} if epochs else {})},
                            "data": {"corpus_seed": seed, "double_negation": double_negation}})
    with output_dir(out, force=force) as tmp:
        res = train_run(cfg, tmp, progress=progress)
        model, vocab = res.model, res.vocab
        adjectives = {w: "positive" for w in POSITIVE} | {w: "negative" for w in NEGATIVE}
        rows = adjective_table(model, vocab, adjectives)
        summary = summarize(rows)
        tok = Tokenizer()

        bars = explain_text(model, vocab, tok(BARS_SENTENCE), target="positive")
        T = len(bars.tokens)
        end = T - 1
        names = [" ".join(bars.tokens[i:]) for i in range(T)]
        plots.ngram_bars(names, [bars.polarity[end][i] for i in range(T)], tmp / "ngrams_charming.png",
                         f"n-grams ending at '{bars.tokens[end]}' ({cell.upper()})")
        heat = explain_text(model, vocab, tok(HEATMAP_SENTENCE), target="positive")
        plots.ngram_heatmap(heat.tokens, heat.polarity, tmp / "ngram_heatmap.png",
                            f"n-gram polarity scores ({cell.upper()})")
        groups = {}
        for pol, short in (("positive", "p-adj"), ("negative", "n-adj")):
            for form, prefix in zip(FORMS, ("", "not ", "not not ")):
                groups[prefix + short] = [getattr(r, form) for r in rows if r.polarity == pol]
        plots.polarity_boxes(groups, tmp / "polarity_boxes.png", f"polarity scores ({cell.upper()})")

        result = {
            "model": {"cell": cell, "hidden_size": cfg.model.hidden_size,
                      "embedding_dim": cfg.model.embedding_dim, "seed": seed},
            "test": res.test,
            "best_epoch": res.history[-1]["best_epoch"],
            "table": {k: summary[k] for k in ("positive", "negative")},
            "negation_flips": summary["negation_flips"],
            "double_negation_restores": summary["double_negation_restores"],
            "adjectives": [{"word": r.word, "polarity": r.polarity, "token": r.token,
                            "negation": r.negation, "double_negation": r.double_negation}
                           for r in rows],
            "bars": {"sentence": BARS_SENTENCE, "ngrams": names, "scores": [float(bars.polarity[end][i]) for i in range(T)]},
            "seconds": round(time.perf_counter() - t0, 2),
        }
        (tmp / "summary.json").write_text(json_text(result, indent=2), encoding="utf-8")
        (tmp / "report.html").write_text(_report_html(result, rows, tmp), encoding="utf-8")
    return result


def _report_html(result: dict, rows, folder: Path) -> str:
    r = report
    table1 = []
    for pol in ("positive", "negative"):
        for k, form in enumerate(FORMS):
            s = result["table"][pol][form]
            group = f"{pol} tokens ({result['table'][pol]['count']})" if k == 0 else ""
            table1.append([group, FORM_NAMES[form], r.score_cell(s["mean"]), f"{s['std']:.2f}"])
    per_adj = [[a.word, a.polarity, r.score_cell(a.token), r.score_cell(a.negation),
                r.score_cell(a.double_negation),
                r.cell("yes" if a.negation_flips else "no", "ok" if a.negation_flips else "bad"),
                r.cell("yes" if a.double_negation_restores else "no",
                       "ok" if a.double_negation_restores else "bad")] for a in rows]
    n = len(rows)
    test = result["test"] or {}
    m = result["model"]
    return r.page("rnnlens demo: how a recurrent network negates", [
        f"<p>A {m['cell'].upper()} (embedding {m['embedding_dim']}, hidden {m['hidden_size']}, seed {m['seed']}) "
        f"trained on the built-in polarity corpus of the sequence-level paper (Appendix A.2): "
        f"test accuracy <b>{test.get('accuracy', float('nan')):.3f}</b>. Scores are "
        f"<code>w^T v(i:t)</code> of the first-order n-gram vectors against the bias-free output row "
        f"(eq. 19-20): token-level for <i>X</i>, sequence-level for <i>not X</i> and <i>not not X</i>.</p>",
        "<h2>Polarity scores (the paper's Table 1)</h2>",
        r.table(["", "type", "mean", "std"], table1),
        f"<p>Negation flips the sign of the token score for <b>{result['negation_flips']}/{n}</b> adjectives; "
        f"double negation flips it back for <b>{result['double_negation_restores']}/{n}</b>.</p>",
        r.figure(folder / "polarity_boxes.png", "Score distributions by group (the paper's Figure 1 layout)."),
        "<h2>Every n-gram ending at 'charming'</h2>",
        r.figure(folder / "ngrams_charming.png",
                 f"'{result['bars']['sentence']}': each bar is the n-gram from that word to 'charming' "
                 "(the sequence-level paper's Figure 2)."),
        "<h2>N-gram heatmap</h2>",
        r.figure(folder / "ngram_heatmap.png", f"'{HEATMAP_SENTENCE}': score of the n-gram from the row's word to "
                 "the column's word; blue is positive, red negative (the implicit-ngrams paper's Figure 6)."),
        "<h2>Per adjective</h2>",
        r.table(["word", "polarity", "X", "not X", "not not X", "negation flips", "double negation restores"],
                per_adj),
    ])
