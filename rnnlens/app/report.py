"""`rnnlens report`: one self-contained HTML page about a trained checkpoint.

Sections (each with an id, so a browser test can find it): the model card ("model-card"),
training curves ("training-curves"), per-sentence n-gram views ("samples": the heatmap of
implicit-ngrams Figure 6 and the bars of sequence-level Figures 2 and 4, both directions for
bidirectional models), t-SNE of the context representations ("tsne", implicit-ngrams
Figure 7), the negation / intensification study ("negation") and the faithfulness table
("faithfulness"). A section that does not apply, or whose analysis module is not installed,
says why. Figures are embedded as base64 PNG; the page loads nothing from anywhere (no
scripts, fonts, or links out), and every string that comes from data is escaped.

Writes out_dir/report.html and out_dir/report.json (the numbers), atomically.
"""
from __future__ import annotations

import json
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import RnnlensError
from ..outfiles import finite, json_text, metric_record
from ..viz import report as R
from .report_sections import (
    SENTENCE_TASKS, curves, explain_sentence, faithfulness_section, model_card, negation_section, note,
    sample_html, section, skipped, tsne_section)


# --- inputs ---------------------------------------------------------------------------------

def read_training_log(path: Path) -> tuple[list[dict], dict | None, list[str]]:
    """metrics.jsonl -> (epoch rows, the test row or None, notes on unreadable lines)."""
    rows, test, notes = [], None, []
    if not path.is_file():
        return rows, test, ["metrics.jsonl is missing"]
    for no, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
        except (json.JSONDecodeError, RecursionError):
            notes.append(f"metrics.jsonl line {no} is not JSON; skipped")
            continue
        if not isinstance(r, dict):
            continue
        r = metric_record(r)
        if r.get("split") == "test":
            test = r
        elif "epoch" in r:
            rows.append(r)
    return rows, test, notes


def _load_data(run, explicit: bool):
    """The run's dataset (all splits, no budget cap) or (None, reason); with explicit (a
    --data-dir was given) a failure is an error instead."""
    try:
        return run.data(), None
    except RnnlensError as e:
        if explicit:
            raise
        msg = str(e)
        if "task and labels" not in msg:
            msg = f"the training data could not be loaded ({e}); pass --data-dir"
        return None, msg


def _eval_split(data) -> str | None:
    for name in ("test", "dev", "valid"):
        if data.splits.get(name):
            return name
    return None


def _sample_sentences(data, split: str, task: str, n: int, seed: int = 0) -> list[list[str]]:
    """n readable sentences (4-20 tokens) of a split, a seeded sample in split order; where it
    has none, sentences of any length up to an explained sentence's limit (SENTENCE_TOKENS),
    and where it has none of those either, the first SENTENCE_TOKENS tokens of its texts."""
    from ..analysis.sentence import SENTENCE_TOKENS

    examples = data.splits[split]
    if task == "lm" and len(examples) > 1:       # sentence-level: one example a sentence
        pool = [[t for t in ex.tokens if t != "<eos>"] for ex in examples[:20_000]]
    elif task == "lm":                           # one stream, cut at <eos>
        stream, sents, cur = examples[0].tokens, [], []
        for tok in stream[:200_000]:
            if tok == "<eos>":
                if cur:
                    sents.append(cur)
                cur = []
            else:
                cur.append(tok)
        pool = sents + ([cur] if cur else [])
    else:
        pool = [ex.tokens for ex in examples]
    good = ([i for i, toks in enumerate(pool) if 4 <= len(toks) <= 20]
            or [i for i, t in enumerate(pool) if 0 < len(t) <= SENTENCE_TOKENS] or [i for i, t in enumerate(pool) if t])
    idx = sorted(random.Random(seed).sample(good, min(n, len(good))))
    return [list(pool[i][:SENTENCE_TOKENS]) for i in idx]


def _available(module: str) -> bool:
    """Whether an optional analysis module imports (it may not be part of this install)."""
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True



# --- the report ------------------------------------------------------------------------------

@dataclass
class _Context:
    """What every section step reads: the loaded run, its data (or why there is none), the
    split the data sections use, the figure folder and the progress line."""

    model: object
    cfg: object
    vocab: object
    meta: dict
    task: str
    data: object
    data_note: str | None
    split: str | None
    fig_dir: Path
    say: Callable[[str], None]
    view: str = "first-order"        # the n-gram view of the sample sentences

    @property
    def recurrent(self) -> bool:
        return self.cfg.model.cell != "transformer"


def _samples_step(c: _Context, items: list[tuple[str, list[str]]], from_text: bool,
                  n_samples: int) -> tuple[str, object]:
    title = "Sample sentences"
    if not c.recurrent:
        return skipped("samples", title, "a transformer has no linear view: the n-gram decomposition "
                                         "explains recurrent cells")
    parts, samples = [], []
    for k, (text, tokens) in enumerate(items):
        try:
            view = explain_sentence(c.model, c.vocab, tokens, view=c.view)
        except RnnlensError as e:           # e.g. a max-plus model: no real-semiring sum
            return skipped("samples", title, str(e))
        html, d = sample_html(k, text, view, c.fig_dir, c.cfg.model.cell.upper())
        parts.append(html)
        samples.append(d)
        c.say(f"sample {k + 1}/{len(items)}")
    if not items:
        reason = ("no sentences: pass --text or a dataset with a test split" if n_samples
                  else "--samples 0 and no --text")
        return skipped("samples", title, reason)
    intro = ("<p>Each n-gram's contribution to the model's output (rnnlens.analysis.attribution: the "
             "first layer's n-gram vectors v(i:t) read by the gradient of the output with respect to "
             "that layer's states; for a linear head on the final state these are the papers' scores "
             "w^T v(i:t)).</p>")
    intro += ("<p>View: exact, each step linearised at the true states (no remainder; an n-gram's vector "
              "depends on its context).</p>" if c.view == "exact" else
              "<p>View: first-order, each step linearised at the zero state (an n-gram's vector depends on "
              "its tokens alone; nonlinear cells leave a remainder).</p>")
    origin = "given with --text" if from_text else f"sampled from the {c.split} split"
    return section("samples", title, intro, f"<p>{len(items)} sentence(s) {R.esc(origin)}.</p>", *parts), samples


def _tsne_step(c: _Context) -> tuple[str, dict]:
    title = "Context representations (t-SNE)"
    if c.task not in SENTENCE_TASKS:
        return skipped("tsne", title, f"a {c.task} model has no sentence representation")
    if not c.data or not c.split:
        return skipped("tsne", title, c.data_note or "the data has no dev or test split")
    c.say("t-SNE ...")
    try:
        return tsne_section(c.model, c.cfg, c.vocab, c.data, c.split, c.fig_dir)
    except RnnlensError as e:
        return skipped("tsne", title, str(e))


def _negation_step(c: _Context, negation: bool) -> tuple[str, dict]:
    title = "Negation and intensification"
    if not negation:
        return skipped("negation", title, "turned off (--no-negation)")
    if c.task not in ("classify", "regress"):
        return skipped("negation", title, f"a {c.task} model is not a sentiment classifier or regressor")
    if not c.recurrent:
        return skipped("negation", title, "a transformer has no n-gram decomposition")
    if not c.data:
        return skipped("negation", title, c.data_note or "no data")
    if not _available("rnnlens.analysis.negation"):
        return skipped("negation", title, "negation study unavailable "
                                          "(rnnlens.analysis.negation is not installed)")
    c.say("negation study ...")
    try:
        return negation_section(c.model, c.cfg, c.vocab, c.meta, c.data, c.fig_dir)
    except RnnlensError as e:
        return skipped("negation", title, str(e))


def _faithfulness_step(c: _Context, n: int, progress: bool) -> tuple[str, dict]:
    title = "Faithfulness"
    if c.task not in SENTENCE_TASKS:
        return skipped("faithfulness", title,
                       f"the faithfulness table scores sentence-level models, not {c.task}")
    if not c.recurrent:
        return skipped("faithfulness", title, "a transformer has no n-gram attribution")
    if not c.data or not c.split:
        return skipped("faithfulness", title, c.data_note or "no dev or test split")
    if not n:
        return skipped("faithfulness", title, "--faithfulness-sentences 0")
    if not _available("rnnlens.analysis.faithfulness"):
        return skipped("faithfulness", title, "faithfulness evaluation unavailable "
                                              "(rnnlens.analysis.faithfulness is not installed)")
    c.say("faithfulness ...")
    try:
        return faithfulness_section(c.model, c.vocab, c.data, c.split, n, progress)
    except RnnlensError as e:
        return skipped("faithfulness", title, str(e))


def _sample_items(c: _Context, texts: list[str], tok, n_samples: int) -> list[tuple[str, list[str]]]:
    """(text, tokens) of the sentences to explain: the --text ones, or a sample of the split."""
    if texts:
        return [(s, tok(s)) for s in texts]
    if c.data and c.split and n_samples:
        return [(" ".join(t), t) for t in _sample_sentences(c.data, c.split, c.task, n_samples)]
    return []


def _write(out_dir: Path, force: bool, page: str, result: dict) -> None:
    from ..train.checkpoint import output_dir

    with output_dir(out_dir, force=force) as tmp:
        (tmp / "report.html").write_text(page, encoding="utf-8")
        (tmp / "report.json").write_text(json_text(result, indent=2, default=_json_default), encoding="utf-8")


def build_report(model_dir, out_dir, data_dir=None, sentences=None, n_samples: int = 4,
                 faithfulness_sentences: int = 100, negation: bool = True, progress: bool = True,
                 force: bool = False, view: str = "first-order") -> dict:
    """Write out_dir/report.html and out_dir/report.json for the checkpoint in model_dir.

    data_dir: where the training data is now (default: where it was in training); the
    data sections are skipped, with the reason, when it cannot be loaded and no data_dir
    was given. sentences: texts to explain instead of n_samples sentences of the test
    split. view: the n-gram view of the sample sentences, "first-order" or "exact"
    (analysis.attribution). Returns the report.json dict. Bad input is an RnnlensError."""
    from ..outfiles import check_not_an_input
    from .run import Run

    t0 = time.perf_counter()
    out_dir = Path(out_dir)
    check_not_an_input(out_dir, [model_dir, data_dir])
    if out_dir.exists() and not force:           # refuse before doing any work
        raise RnnlensError(f"output folder {out_dir} exists; use --force to replace it")
    if n_samples < 0 or faithfulness_sentences < 0:
        raise RnnlensError("--samples and --faithfulness-sentences must be >= 0")
    model_dir = Path(model_dir)
    run = Run.load(model_dir, data_dir=data_dir)
    texts = list(sentences or [])
    from ..analysis.sentence import SENTENCE_TOKENS

    for s in texts:
        n = len(run.tokenize(s))
        if not n:
            raise RnnlensError(f"--text {s!r} has no tokens: nothing to explain")
        if n > SENTENCE_TOKENS:
            raise RnnlensError(f"a --text has {n:,} tokens, more than the {SENTENCE_TOKENS} a sentence is explained "
                               "up to (every n-gram of it); explain a long document with `rnnlens explain --file`")

    def say(msg: str) -> None:
        if progress:
            print(f"report: {msg} ({time.perf_counter() - t0:.1f}s)", file=sys.stderr, flush=True)

    say(f"loaded {model_dir}")
    data, data_note = _load_data(run, explicit=data_dir is not None)
    say("data loaded" if data else "data not available")
    rows, test, metric_notes = read_training_log(model_dir / "metrics.jsonl")
    result: dict = {"model": None, "view": view}
    with tempfile.TemporaryDirectory(prefix="rnnlens-report-") as figs:
        c = _Context(run.model, run.config, run.vocab, run.meta, run.task, data, data_note,
                     _eval_split(data) if data else None, Path(figs), say, view)
        html, result["model"] = model_card(model_dir, c.model, c.cfg, c.meta, c.vocab, data, data_note, rows, test)
        sections = [html + "".join(note(n) for n in metric_notes)]
        say("model card")
        html, result["training_curves"] = curves(rows, c.model, c.fig_dir)
        sections.append(html)
        say("training curves")
        items = _sample_items(c, texts, lambda s: run.reads(run.tokenize(s)), n_samples) if c.recurrent else []
        html, result["samples"] = _samples_step(c, items, bool(texts), n_samples)
        sections.append(html)
        html, result["tsne"] = _tsne_step(c)
        sections.append(html)
        say("t-SNE")
        html, result["negation"] = _negation_step(c, negation)
        sections.append(html)
        say("negation")
        html, result["faithfulness"] = _faithfulness_step(c, faithfulness_sentences, progress)
        sections.append(html)
        say("faithfulness")
        result["seconds"] = round(time.perf_counter() - t0, 2)
        page = R.page(f"rnnlens report: {model_dir.resolve().name}", [_toc(), *sections])
    _write(out_dir, force, page, result)
    say(f"wrote {out_dir / 'report.html'}")
    return result


def _toc() -> str:
    items = [("model-card", "Model card"), ("training-curves", "Training curves"), ("samples", "Sample sentences"),
             ("tsne", "t-SNE"), ("negation", "Negation"), ("faithfulness", "Faithfulness")]
    return '<nav id="toc">' + " · ".join(f'<a href="#{i}">{t}</a>' for i, t in items) + "</nav>"


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return finite(o.item())
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return str(o)
