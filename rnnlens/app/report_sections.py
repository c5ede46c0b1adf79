"""The sections of `rnnlens report` (rnnlens.app.report): each builder returns (html, the
section's numbers for report.json). The per-sentence n-gram view, the model card, training
curves, t-SNE, the negation study and the faithfulness table; figures go to a folder the
caller owns and are embedded as base64 PNG, every string from data is escaped."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import RnnlensError
from ..viz import plots
from ..viz import report as R

SENTENCE_TASKS = ("classify", "regress", "relation")
MAX_HEATMAP_TOKENS = 40
MAX_BAR_TOKENS = 60
TOP_K = 8


def _mpl(s: str) -> str:
    """Text for matplotlib: a "$" would start math mode (and can fail to parse)."""
    return str(s).replace("$", r"\$")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4f}"
    return str(v)


def section(sid: str, title: str, *parts: str) -> str:
    return f'<section id="{sid}"><h2>{R.esc(title)}</h2>{"".join(parts)}</section>'


def note(text: str, cls: str = "note") -> str:
    return f'<p class="{cls}">{R.esc(text)}</p>'


def skipped(sid: str, title: str, reason: str) -> tuple[str, dict]:
    return section(sid, title, note(f"skipped: {reason}", "note skipped")), {"skipped": reason}


# --- per-sentence decomposition --------------------------------------------------------------

@dataclass
class SentenceView:
    """grid[d, end, start]: contribution of each n-gram (d = 0 forward, 1 backward; backward
    n-grams have end <= start) toward `targets[end]` (sentence tasks: one target for all)."""

    tokens: list[str]
    unknown: list[str]
    grid: np.ndarray
    targets: list[str]
    explained: str
    prediction: str
    output: float | None
    offset: float | None
    remainder: float | None
    exact: bool
    focus: int                 # the token whose n-grams the bars show
    partial: bool = False      # tag/lm with stacked layers: only n-grams ending at each token
    polarity: np.ndarray | None = None   # [end, start] the paper's standalone scores w^T v_{i:t}
    outputs: list[dict] | None = None    # per token (tag/lm): output = offset + n-grams + remainder
    view: str = "first-order"            # the view asked for: "first-order" or "exact"

    def top(self, k: int = TOP_K) -> list[dict]:
        from ..analysis.sentence import top_of_grid

        return [{**r, "target": self.targets[r["end"]]} for r in top_of_grid(self.grid, self.tokens, k)]


def explain_sentence(model, vocab, tokens: list[str], view: str = "first-order") -> SentenceView:
    """The n-gram view of one sentence for any recurrent model: analysis.sentence.explain_text
    (the same explanation `rnnlens explain` prints) in `view`, laid out for the page."""
    from ..analysis.sentence import explain_text

    ex = explain_text(model, vocab, tokens, view=view)
    T = len(tokens)
    prediction = ex.prediction
    if ex.probabilities:
        prediction += " (" + ", ".join(f"p({lab}) = {p:.3f}" for lab, p in ex.probabilities.items()) + ")"
    if ex.sentence_level:
        p = ex.positions[0]
        return SentenceView(ex.tokens, ex.unknown, p.ngrams, [p.target] * T, ex.explained, prediction,
                            p.output, p.offset, p.remainder, ex.exact, T - 1, polarity=ex.polarity, view=view)
    grid = np.zeros((ex.directions, T, T))
    for t, p in enumerate(ex.positions):
        grid[:, t, :] = p.ngrams[:, t, :]
    names = [p.target for p in ex.positions]
    focus = next((t for t, n in enumerate(names) if n != "O"), T - 1) if ex.task == "tag" else T - 1
    outputs = [{"position": p.position, "token": ex.tokens[p.position], "target": p.target, "output": p.output,
                "offset": p.offset, "ngram_total": p.ngram_total, "remainder": p.remainder} for p in ex.positions]
    return SentenceView(ex.tokens, ex.unknown, grid, names, ex.explained, prediction, None, None, None,
                        ex.exact, focus, partial=ex.layers > 1 or ex.directions > 1, outputs=outputs, view=view)


def _sample_facts(k: int, text: str, v: SentenceView) -> list[str]:
    """The sentence, its prediction, the output's decomposition and the stacked-layers note."""
    T = len(v.tokens)
    parts = [f'<div class="sample" id="sample-{k}"><h3>Sentence {k + 1}</h3>',
             f'<p class="sentence">{R.esc(text)}</p>',
             f"<p>Tokens ({T}): <code>{R.esc(' | '.join(v.tokens))}</code></p>",
             f"<p>Prediction: <b>{R.esc(v.prediction)}</b>. Scores decompose {R.esc(v.explained)}.</p>"]
    if v.unknown:
        parts.append(note(f"read as <unk> (not in the vocabulary): {' '.join(sorted(set(v.unknown)))}"))
    if v.output is not None:
        kind = "exact" if v.exact else "first-order"
        parts.append(f"<p>Output {v.output:+.3f} = offset {v.offset:+.3f} + n-grams {v.grid.sum():+.3f} "
                     f"+ remainder {v.remainder:+.3f} ({kind} view of the first layer).</p>")
    if v.outputs is not None:
        kind = "exact" if v.exact else "first-order"
        rows = [[str(o["position"]), R.cell(o["token"], "text"), R.cell(o["target"], "text"),
                 R.score_cell(o["output"]), R.score_cell(o["offset"]), R.score_cell(o["ngram_total"]),
                 R.score_cell(o["remainder"])] for o in v.outputs]
        parts.append(f"<p>Each token's output = offset + n-grams + remainder ({kind} view of the first layer):</p>")
        parts.append(R.table(["#", "token", "toward", "output", "offset", "n-grams", "remainder"], rows,
                             ' class="outputs"'))
    if v.view == "exact":
        parts.append(note("exact view: each step linearised at the true states, so there is no remainder, "
                          "but each n-gram's contribution depends on its context"))
    if v.partial:
        parts.append(note("stacked or bidirectional layers: the figures show the n-grams ending at each token; "
                          "the table's totals count them all"))
    return parts


def _heatmaps(k: int, v: SentenceView, toks: list[str], fig_dir: Path, cell: str, label: str) -> list[str]:
    T, D = len(v.tokens), v.grid.shape[0]
    if T > MAX_HEATMAP_TOKENS:
        return [note(f"{T} tokens: the heatmap is drawn for sentences of at most {MAX_HEATMAP_TOKENS}")]
    if v.polarity is not None:
        png = plots.ngram_heatmap(toks, v.polarity, fig_dir / f"heat-{k}.png", f"{cell}: n-gram polarity scores")
        return [R.figure(png, "Polarity score w^T v(i:t) of every n-gram, from the row's word to the "
                         "column's word, each n-gram read on its own (blue positive, red negative; the "
                         "implicit-ngrams paper's Figure 6, eq. 14). The table above gives each n-gram's "
                         "contribution to this sentence's output instead.")]
    png = plots.ngram_heatmap(toks, v.grid[0], fig_dir / f"heat-{k}.png",
                              f"{cell}: n-gram contributions" + (" (forward)" if D > 1 else ""))
    toward = "" if v.output is not None else ", toward the label predicted at the column's word"
    parts = [R.figure(png, "Contribution of the n-gram from the row's word to the column's word"
                      f"{toward} (blue positive, red negative; the implicit-ngrams paper's Figure 6).")]
    if D > 1:
        png = plots.ngram_heatmap_backward(toks, v.grid[1], fig_dir / f"heat-back-{k}.png",
                                           f"{cell}: n-gram contributions (backward)", label)
        parts.append(R.figure(png, "Backward direction: the n-gram read from the column's word back to "
                              "the row's word."))
    return parts


def _bars(k: int, v: SentenceView, toks: list[str], fig_dir: Path, cell: str, label: str) -> list[str]:
    T, D = len(v.tokens), v.grid.shape[0]
    if T > MAX_BAR_TOKENS:
        return [note(f"{T} tokens: the bars are drawn for sentences of at most {MAX_BAR_TOKENS}")]
    fe = v.focus
    if D > 1:
        be = 0 if v.output is not None else v.focus
        png = plots.ngram_bars_both(toks, v.grid[0, fe], v.grid[1, be], fig_dir / f"bars-{k}.png",
                                    forward_end=fe, backward_end=be, title=f"{cell}: n-grams ending at a token",
                                    xlabel=label)
        where = ("the final state reads the forward direction at the last token and the backward one at the "
                 "first" if v.output is not None else f"toward '{v.targets[fe]}' at '{v.tokens[fe]}'")
        return [R.figure(png, f"Every n-gram ending at a token, both directions ({where}; "
                         "the sequence-level paper's Figures 2 and 4).")]
    names = [plots._short(_mpl(" ".join(v.tokens[i: fe + 1]))) for i in range(fe + 1)]
    png = plots.ngram_bars(names, v.grid[0, fe, : fe + 1], fig_dir / f"bars-{k}.png",
                           f"{cell}: n-grams ending at '{toks[fe]}'")
    return [R.figure(png, f"Every n-gram ending at '{v.tokens[fe]}' (toward '{v.targets[fe]}'; "
                     "the sequence-level paper's Figures 2 and 4).")]


def sample_html(k: int, text: str, v: SentenceView, fig_dir: Path, cell: str) -> tuple[str, dict]:
    """One sentence's block of the samples section, and its numbers."""
    D = v.grid.shape[0]
    toks = [_mpl(t) for t in v.tokens]
    parts = _sample_facts(k, text, v)
    top = v.top()
    header = (["direction"] if D > 1 else []) + ["n-gram", "toward", "score"]
    rows = [([t["direction"]] if D > 1 else []) + [R.cell(t["text"], "text"), R.cell(t["target"], "text"),
                                                    R.score_cell(t["score"])] for t in top]
    parts.append(R.table(header, rows, ' class="top-ngrams"'))
    label = "contribution"
    parts += _heatmaps(k, v, toks, fig_dir, cell, label)
    parts += _bars(k, v, toks, fig_dir, cell, label)
    parts.append("</div>")
    data = {"text": text, "tokens": v.tokens, "unknown": v.unknown, "prediction": v.prediction,
            "explained": v.explained, "exact": v.exact, "view": v.view, "top": top}
    if v.output is not None:
        data.update(output=v.output, offset=v.offset, ngram_total=float(v.grid.sum()), remainder=v.remainder)
    if v.outputs is not None:
        data["outputs"] = v.outputs
    return "".join(parts), data


# --- sections --------------------------------------------------------------------------------

def model_card(model_dir, model, cfg, meta, vocab, data, data_note, rows, test) -> tuple[str, dict]:
    m = cfg.model
    task = meta.get("task", "classify")
    n_params = sum(p.numel() for p in model.parameters())
    if m.cell == "transformer":
        arch = f"Transformer baseline, {m.layers} layer(s), {m.heads} heads"
    else:
        arch = (f"{m.cell} cell, {m.layers} layer(s), " + ("bidirectional" if m.bidirectional else "one direction"))
        if m.memory:
            arch += (f", then a memory block: {m.memory.upper()}{'(+tM' if m.memory_temporal else '(-tM'}-"
                     f"{m.memory_composition[0]}) over {m.memory_size} words"
                     + (" on both sides" if m.memory_bidirectional else ""))
    head = {"classify": "classifier", "regress": "regressor", "relation": "relation classifier",
            "tag": "BiRNN-CRF tagger" if m.bidirectional else "CRF tagger", "lm": "language model"}.get(task, task)
    desc = f"A {task} model ({head}): {arch}, embedding {m.embedding_dim}, hidden {m.hidden_size}"
    if task in SENTENCE_TASKS:
        desc += f", {m.pooling} pooling, " + (f"MLP head ({m.mlp_hidden})" if m.mlp_hidden else "linear head") + \
                (" with bias" if m.output_bias else " without bias")
    desc += "."
    best = (test or {}).get("best_epoch") or (rows[-1].get("best_epoch") if rows else None)
    best_row = next((r for r in rows if r.get("epoch") == best), None)
    dev = {k[4:]: v for k, v in (best_row or {}).items() if k.startswith("dev_")}
    tst = {k[5:]: v for k, v in (test or {}).items() if k.startswith("test_")}
    labels = meta.get("labels")
    # an LM split is one token stream, or (sentence-level) one example per sentence: count tokens
    sizes = {k: len(v) if task != "lm" else sum(len(e.tokens) for e in v) for k, v in data.splits.items()} if data else {}
    card = {"model_dir": str(model_dir), "task": task, "cell": m.cell, "layers": m.layers,
            "bidirectional": m.bidirectional, "embedding_dim": m.embedding_dim, "hidden_size": m.hidden_size,
            "parameters": n_params, "vocab_size": len(vocab), "labels": labels, "corpus": cfg.data.corpus,
            "split_sizes": sizes, "best_epoch": best, "dev": dev, "test": tst, "description": desc}
    facts = [["model folder", str(model_dir)], ["architecture", arch], ["task", task],
             ["parameters", f"{n_params:,}"], ["vocabulary", f"{len(vocab):,} tokens"]]
    if labels:
        shown = ", ".join(labels[:30]) + (f", ... ({len(labels)} in all)" if len(labels) > 30 else "")
        facts.append(["labels", shown])
    facts.append(["data", cfg.data.corpus + (f" ({cfg.data.data_dir})" if cfg.data.data_dir else "")])
    if sizes:
        unit = " tokens" if task == "lm" else ""
        facts.append(["splits", ", ".join(f"{k} {v:,}{unit}" for k, v in sizes.items())])
    facts.append(["best epoch", "-" if best is None else str(best)])
    names = sorted(set(dev) | set(tst))
    metrics_rows = [[f"dev (epoch {best})", *(_fmt(dev.get(k, "")) for k in names)]] if dev else []
    if tst:
        metrics_rows.append(["test", *(_fmt(tst.get(k, "")) for k in names)])
    parts = [f"<p>{R.esc(desc)}</p>", R.table(["", ""], facts, ' class="facts"')]
    if metrics_rows:
        parts += ["<h3>Metrics</h3>", R.table(["split", *names], metrics_rows)]
    else:
        parts.append(note("no dev or test metrics recorded in metrics.jsonl"))
    if data_note:
        parts.append(note(data_note))
    if meta.get("notes"):
        parts.append("<h3>Data notes</h3><ul>" + "".join(f"<li>{R.esc(n)}</li>" for n in meta["notes"]) + "</ul>")
    parts.append("<details><summary>Resolved configuration</summary><pre>"
                 f"{R.esc(json.dumps(cfg.to_dict(), indent=2))}</pre></details>")
    return section("model-card", "Model card", *parts), card


def curves(rows, model, fig_dir) -> tuple[str, dict]:
    if not rows:
        return section("training-curves", "Training curves",
                        note("metrics.jsonl has no per-epoch rows: nothing to plot")), {"skipped": "no epochs"}
    metric = model.head.select[0]
    if not any(f"dev_{metric}" in r for r in rows):
        metric = None
    png = plots.training_curves(rows, fig_dir / "curves.png", metric, f"{len(rows)} epoch(s)")
    return (section("training-curves", "Training curves",
                     R.figure(png, "Loss and the model-selection metric per epoch, on the training and dev sets; "
                              "the dotted line marks the epoch kept.")),
            {"epochs": len(rows), "metric": metric})


def tsne_section(model, cfg, vocab, data, split, fig_dir, max_n: int = 2000) -> tuple[str, dict]:
    from ..analysis.context import context_representations, tsne
    from ..train.run import batches

    feats, labels = context_representations(model, batches(cfg, model.task, data.splits[split], vocab, False),
                                            max_n=max_n)
    if len(feats) < 3:
        raise RnnlensError(f"the {split} split has {len(feats)} sentences; t-SNE needs at least 3")
    pts = tsne(feats, seed=0)
    names = [_mpl(n) for n in model.labels] if model.labels else None
    png = plots.tsne_scatter(pts, labels, fig_dir / "tsne.png",
                             f"t-SNE of {len(feats)} {split} context representations", names)
    what = "the final state" if cfg.model.pooling == "final" else "the mean of the states"
    if cfg.model.bidirectional and cfg.model.pooling == "final":
        what = "the forward final state and the backward state at the first token, concatenated"
    return (section("tsne", "Context representations (t-SNE)",
                     R.figure(png, f"{len(feats)} {split} sentences: the vector the output layer reads ({what}, "
                              f"{feats.shape[1]} dimensions) projected with t-SNE, coloured by gold label "
                              "(the implicit-ngrams paper's Figure 7).")),
            {"split": split, "n": len(feats), "dim": int(feats.shape[1])})


def negation_section(model, cfg, vocab, meta, data, fig_dir) -> tuple[str, dict]:
    from ..analysis import negation as N

    sides = N.sentiment_sides(meta.get("task", "classify"), meta.get("labels"), cfg.data.corpus)
    adj = N.corpus_adjectives(cfg.data.corpus)
    if adj is not None:
        source = "the built-in corpus's adjective lists"
    else:
        adj = N.extract_adjectives(data.splits["train"], sides.is_positive, sides.is_negative, N.load_lexicon())
        source = "the training split (implicit-ngrams Appendix E.1)"
    if not adj.positive and not adj.negative:
        raise RnnlensError("no polarity adjectives found in the training split")
    study = N.negation_study(model, vocab, adj.positive, adj.negative, sides=sides)
    if not study.rows:
        raise RnnlensError("none of the extracted adjectives is in the model's vocabulary")
    summary = N.summarize_study(study)
    forms = list(dict.fromkeys(r.form for r in study.rows))
    parts = [(f"<p>{len(adj.positive)} positive and {len(adj.negative)} negative adjectives from "
              f"{R.esc(source)}; each scored as a standalone phrase "
              f"({R.esc('full-span n-gram score' if study.kind == 'ngram' else 'context score')}; "
              f"w = {R.esc(study.readout)}).</p>")]
    rows = []
    for pol in N.POLARITIES:
        g = summary["groups"].get(pol, {})
        rows.append([f"{pol} ({max([s['count'] for s in g.values()] or [0])})",
                     *(R.score_cell(g[f]["median"]) if f in g and g[f]["count"] else "-" for f in forms)])
    parts.append(R.table(["median score", *forms], rows, ' class="negation-medians"'))
    yn = {True: "yes", False: "no", None: "n/a"}
    finding_rows = [[N.FINDING_LINES.get(key, key), *(R.cell(yn[f.get(p)], {True: "ok", False: "bad"}.get(f.get(p)))
                                                      for p in N.POLARITIES)]
                    for key, f in summary["findings"].items()]
    parts.append(R.table(["finding", *N.POLARITIES], finding_rows))
    if hasattr(plots, "negation_boxes"):
        png = plots.negation_boxes(N.score_groups(study), fig_dir / "negation.png",
                                   f"{cfg.model.cell}: polarity scores of adjectives and their phrases")
        parts.append(R.figure(png, "Scores of X, not X, very X and not not X per adjective group "
                              "(the implicit-ngrams paper's Figures 2-5)."))
    if study.skipped:
        parts.append(note(f"{len(study.skipped)} adjective(s) not in the vocabulary were skipped"))
    return (section("negation", "Negation and intensification", *parts),
            {"adjectives": {"positive": adj.positive, "negative": adj.negative}, "summary": summary,
             **{k: v for k, v in study.to_dict().items() if k != "rows"}})


def faithfulness_section(model, vocab, data, split, n, progress) -> tuple[str, dict]:
    from ..analysis.faithfulness import faithfulness

    res = faithfulness(model, data.splits[split], vocab, max_sentences=n, progress=progress)
    d = res.to_dict()

    def num(x, f="{:.4f}"):
        return "n/a" if x is None else f.format(x)

    rows = []
    for name, m in sorted(d["methods"].items(), key=lambda kv: -(kv[1]["aopc"] if kv[1]["aopc"] is not None
                                                                 else -1e300)):
        rows.append([name, num(m["aopc"]), num(m["aopc_se"]), num(m["spearman"], "{:.3f}"),
                     num(m.get("comprehensiveness")), num(m.get("sufficiency")), num(m.get("infidelity"), "{:.3g}"),
                     f"{m['spearman_n']}", f"{m['seconds']:.1f}"])
    first_order = d.get("first_order_error")
    if first_order == "exact":
        first_order_text = "exact (the cell is its linear view)"
    elif isinstance(first_order, dict):
        first_order_text = (f"one-step {num(first_order.get('one_step'))}, "
                            f"accumulated {num(first_order.get('accumulated'))}")
    else:
        first_order_text = "not measured"
    intro = (f"<p>Token attributions on {d['sentences']} {R.esc(split)} sentences ({d['skipped']} too short "
             f"left out), p = {R.esc(d['output'])} of the target; deleting up to {d['max_k']} tokens. AOPC: mean "
             "drop of p when the top-k tokens are deleted (higher is more faithful); Spearman: rank agreement with "
             "single-token deletion (higher is better); ERASER comprehensiveness (higher is better) and sufficiency "
             "(lower is better) over the top 1/5/10/20/50% of tokens; infidelity under random token dropping "
             "(captum; lower is better).</p>")
    error = (f"<p>First-order error of layer 1: {R.esc(first_order_text)}; n-gram |remainder| / |output|: "
             f"{R.esc(num(d.get('remainder_ratio')))}.</p>")
    parts = [intro, R.table(["method", "AOPC ^", "± se", "Spearman ^", "compr. ^", "suff. v", "infid. v",
                             "sentences", "seconds"], rows,
                            ' class="faithfulness-table"'), error]
    parts += [note(n) for n in d.get("notes", [])]
    return section("faithfulness", "Faithfulness", *parts), d
