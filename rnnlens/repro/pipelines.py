"""The analysis kinds of the reproduction tables (registered into run.KINDS on import):
each trains (or reuses) the row's run, then computes what the table reports from it; and
`run_table`, which runs a table's rows through them."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ..errors import RnnlensError
from . import Row, Table
from .run import KINDS, Context, NotRun, RowResult, kind, missing_data, per_seed, recorded_seconds


def _load(run):
    """The trained run behind a row's Run record, loaded (rnnlens.app.run.Run)."""
    from ..app.run import Run as Trained

    return Trained.load(run.path)


# --- formal languages -------------------------------------------------------------------

def _errors(by: dict) -> dict:
    """{count: {n, correct, accuracy, ...}} -> {count: error}, counts in numeric order."""
    items = sorted(((int(k), v) for k, v in by.items()), key=lambda kv: kv[0])
    return {str(k): 1.0 - float(v["accuracy"]) for k, v in items if v.get("n")}


def no_upward_trend(errors: dict) -> bool:
    """Does the error not grow with the count? The least-squares slope of error against count
    (weighted equally per count) is <= 0, or the error stays within 0.01 of flat."""
    xs = [float(k) for k in errors]
    ys = list(errors.values())
    if len(xs) < 2:
        return True
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return slope <= 0 or slope * (max(xs) - min(xs)) <= 0.01


@kind("dyck-by-attractors")
def dyck_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """Closing-bracket error by number of attractors from the test record; the majority
    baseline row is computed from the data, not trained. Checks: the maximum and the trend of
    the row's curve (the mean over seeds at each count, the values its lines show)."""
    if row.config is None:
        return RowResult(row, status="no config", note=row.note)
    res = per_seed(ctx, row, lambda run: _errors(run.test["test_by_attractors"]), weights=False,
                   need="test_by_attractors")
    tol = row.extra.get("tolerance") or {}
    if tol.get("no_upward_trend") and res.values:
        # the row's curve, as its lines show it: the mean over seeds at each count
        keys = [k for k in res.values[0] if all(k in v for v in res.values)]
        curve = {k: sum(v[k] for v in res.values) / len(res.values) for k in keys}
        worst = max(curve.values())
        res.checks.append(("highest error over attractor counts", f"{worst:.3f}",
                           worst <= tol["max"] if tol.get("max") is not None else None))
        flat = no_upward_trend(curve)
        res.checks.append(("no upward trend as attractors grow", "none" if flat else "upward", flat))
    return res


def _dyck_majority(ctx: Context, row: Row) -> RowResult:
    """Always the most frequent closer of the training strings, scored on the test strings
    of the Dyck data the configs train on (seed 0; tiny: 64 strings each)."""
    from ..data import formal
    from ..data.formal import dyck_majority_baseline

    n = 64 if ctx.tiny else None
    corpus = formal.DyckCorpus(seed=0, train_size=n or formal.DYCK_TRAIN["size"],
                               train_depth=formal.DYCK_TRAIN["max_depth"], test_size=n or formal.DYCK_TEST["size"],
                               test_depth=formal.DYCK_TEST["max_depth"])
    train = [ex.tokens for ex in corpus.split("train")]
    test = [ex.tokens for ex in corpus.split("test")]
    base = dyck_majority_baseline(train, test)
    return RowResult(row, values=[base["error"]], budget=f"{len(train):,} / {len(test):,} strings, no training",
                     data_used="dyck (generated)", note=f"always {base['label']!r}")


def _ner_lookup(ctx: Context, row: Row) -> RowResult:
    """The CoNLL shared task's baseline on CoNLL-2003 (metrics.entity_lookup_baseline): the
    training set's unambiguous entities looked up in the test sentences; nothing trained."""
    from ..data.datasets import find_file
    from ..data.semeval_conll import read_conll2003
    from ..metrics import entity_lookup_baseline

    def read(name):
        rows = read_conll2003(find_file(ctx.data_dir, f"conll2003/{name}"), scheme="iobes")
        return rows[:64] if ctx.tiny else rows

    train, test = read("eng.train"), read("eng.testb")
    base = entity_lookup_baseline(train, test)
    return RowResult(row, values=[base["f1"] * 100], budget=f"{len(train):,} training sentences, no training",
                     data_used=f"conll2003 from {ctx.data_dir}",
                     note=f"{base['entities']:,} unambiguous training entities; precision {base['precision'] * 100:.1f}, "
                          f"recall {base['recall'] * 100:.1f}")


# rows computed from the data alone (a row's "key"), whatever the table's kind
BASELINES = {"majority_baseline": _dyck_majority, "ner_lookup_baseline": _ner_lookup}


@kind("crossserial-by-length")
def crossserial_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """Full-string error by length m+n from the test record. Checks: the mean over lengths,
    and the error over the whole test set against the row's "max_string_error" (the paper's
    "less than ten percent error rate on average on the test set") where it has one."""
    overall = []

    def read(run):
        overall.append(float(run.test["test_string_error"]))
        return _errors(run.test["test_by_length"])

    res = per_seed(ctx, row, read, weights=False, need="test_by_length")
    if res.values:
        mean = sum(sum(v.values()) / max(len(v), 1) for v in res.values) / len(res.values)
        res.checks.append(("mean error over lengths", f"{mean:.3f}", None))
        limit, whole = row.extra.get("max_string_error"), sum(overall) / len(overall)
        res.checks.append(("string error over the whole test set", f"{whole:.3f}",
                           None if limit is None else whole <= limit))
    return res


@kind("agreement-by-attractors")
def agreement_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """The supervised setup reads test_by_attractors; eval "lm-agreement" runs the
    language-model test on the row's test set (a path under --data-dir)."""
    if row.extra.get("eval") != "lm-agreement":
        return per_seed(ctx, row, lambda run: {k: float(v["accuracy"]) for k, v in
                                            sorted(run.test["test_by_attractors"].items(), key=lambda kv: int(kv[0]))
                                            if v.get("n")}, weights=False, need="test_by_attractors")

    def lm_eval(run):
        from ..analysis.agreement import agreement_lm_eval

        trained = _load(run)
        r = agreement_lm_eval(trained.model, trained.vocab, Path(ctx.data_dir) / row.extra["testset"])
        out = {"all": float(r["accuracy"])}
        out.update({k: float(v["accuracy"]) for k, v in sorted(r["by_attractors"].items(), key=lambda kv: int(kv[0]))
                    if v.get("n") and int(k) >= 0})
        return out

    return per_seed(ctx, row, lm_eval)


# --- the unitary analysis -------------------------------------------------------------------

_UNITARY: dict = {}


@kind("unitary-table")
def unitary_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """Average effect of the row's item (a word, or a matching pair Q(close) Q(open)) in the
    trained URN; computed once per run for the whole table. The item is the row's "item_name"
    (default: its label), so that rows of another model (an ablation's config) can name the
    same items. Check on pairs, on the last pair row of each model: the mean over its pairs."""
    from ..analysis.unitary_tables import dyck_pairs, item_tokens, urn_tables

    name = _item_name(row)
    analysed: set[str] = set()            # this row's runs: its pairs check reads only these

    def effect(run):
        key = (str(run.path), table.id)
        analysed.add(key[0])
        if key not in _UNITARY:
            trained = _load(run)
            model, vocab, task = trained.model, trained.vocab, trained.task
            chars = list(dict.fromkeys(_item_name(r) for r in table.rows
                                       if r.extra.get("item", "character") != "pair"))
            items = [(c, item_tokens(c, vocab, task)) for c in chars]
            pairs = dyck_pairs(vocab) if any(r.extra.get("item") == "pair" for r in table.rows) else None
            res = urn_tables(model, vocab, items, pairs)
            _UNITARY[key] = res
        res = _UNITARY[key]
        if row.extra.get("item") == "pair":
            found = [p for p in res.get("pairs") or [] if p["name"].replace(" ", "") == name]
        else:
            found = [i for i in res["items"] if i["name"] == name]
        if not found:
            raise RnnlensError(f"{table.id}: no {name!r} in the unitary analysis")
        return float(found[0]["average_effect"])

    res = per_seed(ctx, row, effect)
    limit = (table.tolerance or {}).get("max_pairs_mean_effect")
    if row.extra.get("item") == "pair" and limit is not None and row.label == _last_pair(table, row):
        means = [_UNITARY[(path, table.id)].get("pairs_mean_effect") for path in sorted(analysed)]
        means = [m for m in means if m is not None]
        if means:
            m = sum(means) / len(means)
            res.check_prefix = "matching pairs" + (f", {row.extra['model']}" if row.extra.get("model") else "")
            res.checks.append((f"mean average effect (target < {limit:g})", f"{m:.3f}", m < limit))
    return res


def _item_name(row: Row) -> str:
    """The item a unitary-table row reads: its "item_name", or its label."""
    return row.extra.get("item_name", row.label)


def _last_pair(table: Table, row: Row) -> str | None:
    """The label of the last pair row of the table trained like `row` (same config, same
    starting weights): the row that carries that model's pairs check."""
    def model(r):
        return r.config, r.extra.get("init_from")

    pairs = [r.label for r in table.rows if r.extra.get("item") == "pair" and model(r) == model(row)]
    return pairs[-1] if pairs else None


# --- negation and polarity ------------------------------------------------------------------

@kind("negation")
def negation_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """Implicit-ngrams Figure 2: adjectives extracted from the training split (or, where the row
    says "adjectives": "paper-table9", the paper's Table 9 list), the median n-gram (or context)
    score of X and "not X" per polarity; check: "not" reverses both."""
    from ..analysis.negation import (
        PAPER_TABLE9,
        extract_adjectives,
        load_lexicon,
        negation_study,
        paper_table9_adjectives,
        sentiment_sides,
        summarize_study,
    )

    if row.config is None:
        return RowResult(row, status="no config", note=row.note)
    listed = row.extra.get("adjectives") == PAPER_TABLE9     # the paper's printed list, not extracted
    if row.extra.get("adjectives") not in (None, PAPER_TABLE9):
        raise RnnlensError(f"{table.id}: row {row.label!r} names adjectives {row.extra['adjectives']!r}; "
                           f"the only list built in is {PAPER_TABLE9!r}")

    def medians(run):
        trained = _load(run)
        model, cfg, vocab = trained.model, trained.config, trained.vocab
        sides = sentiment_sides(trained.task, trained.labels, cfg.data.corpus)
        if listed:
            adj = paper_table9_adjectives()
        else:
            adj = extract_adjectives(trained.split("train"), sides.is_positive, sides.is_negative, load_lexicon())
        kind_ = None if row.extra.get("score") in (None, "auto") else (
            "ngram" if row.extra["score"] == "n-gram" else "context")
        study = negation_study(model, vocab, adj.positive, adj.negative, forms=["X", "not X"], kind=kind_,
                               sides=sides)
        summ = summarize_study(study)
        out = {}
        for pol in ("positive", "negative"):
            for form in ("X", "not X"):
                s = summ["groups"].get(pol, {}).get(form)
                out[f"{pol} adjectives: {form} (median)"] = s["median"] if s and s["count"] else None
        out["_flips"] = summ["findings"]["not_reverses"]
        out["_counts"] = {"positive": len(adj.positive), "negative": len(adj.negative)}
        return out

    res = per_seed(ctx, row, medians)
    for v in res.values:
        flips, counts = v.pop("_flips"), v.pop("_counts")
        res.note = (f"{counts['positive']} positive / {counts['negative']} negative adjectives "
                    + ("of the paper's Table 9 (the examples it prints of its 73 / 47)"
                       if listed else "(the paper: 73 / 47)"))
        want = row.extra.get("paper_flips") or {}
        for pol in ("positive", "negative"):
            got = flips.get(pol)
            expect = want.get(pol)
            ok = None if got is None or expect is None else got == expect
            if (table.tolerance or {}).get("rows") and row.label in table.tolerance["rows"]:
                ok = got is True
            res.checks.append((f"'not' reverses the {pol} median (paper: "
                               f"{'yes' if expect else 'no' if expect is False else 'not said'})",
                               {True: "yes", False: "no", None: "--"}[got], ok))
    return res


@kind("polarity-table")
def polarity_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """Sequence-level Table 1: `rnnlens demo --cell CELL` per seed (reused from DIR/runs),
    the mean score of the row's polarity group and form; checks: the flip counts (GRU)."""
    from ..config import Config
    from ..demo import run_demo

    cell = row.extra.get("model", "GRU").lower()
    # the demo has one setting, the paper's corpus at the package's defaults, whatever --budget says
    res = RowResult(row, budget_name="tiny" if ctx.tiny else "full")
    epochs = 1 if ctx.tiny else Config().train.epochs
    for s in range(ctx.seeds):
        seed = ctx.seed0 + s
        # a tiny run has a name of its own: it never stands in for (or replaces) a full one
        path = ctx.out / "runs" / f"demo-{cell}{'-tiny' if ctx.tiny else ''}-seed{seed}"
        summary = _demo_summary(path, row, epochs)
        if summary is None and ctx.reuse_only:
            raise NotRun(path)
        if summary is None:
            if path.exists():
                ctx.log(f"{path} holds no readable demo summary: training it again")
            ctx.log(f"training the demo {cell} (seed {seed}) -> {path}")
            summary = run_demo(path, force=True, cell=cell, seed=seed, epochs=1 if ctx.tiny else None,
                               progress=ctx.progress)
        _record_demo(ctx, path, summary, seed)
        group, form = row.extra["group"], row.extra["form"]
        res.values.append(float(summary["table"][group][form]["mean"]))
        res.runs[str(path)] = round(recorded_seconds(summary.get("seconds")), 1)
        res.budget = (f"the demo: {epochs} epochs max (best {summary.get('best_epoch')}), 4,120 sentences, "
                      f"hidden {summary['model']['hidden_size']}")
        res.data_used = "built-in polarity corpus"
        tol = table.tolerance or {}
        last = [r for r in table.rows if r.extra.get("model") == row.extra.get("model")][-1]
        if row is last and row.extra.get("model") == "GRU" and "negation_flips_min" in tol:
            res.check_prefix = "GRU demo"
            n = len(summary["adjectives"])
            res.checks.append((f"negation flips the token's sign (of {n} adjectives)", str(summary["negation_flips"]),
                               summary["negation_flips"] >= tol["negation_flips_min"]))
            res.checks.append((f"double negation flips it back (of {n})", str(summary["double_negation_restores"]),
                               summary["double_negation_restores"] >= tol["double_negation_restores_min"]))
    return res


def _demo_summary(path: Path, row: Row, epochs: int) -> dict | None:
    """The demo run's summary.json when it is readable, holds what the table reads (the row's
    group and form, the flip counts) and ran for `epochs` at most (its config.json); None
    otherwise (no run, a damaged one, or one of another budget)."""
    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    try:
        summary = json.loads((path / "summary.json").read_text(encoding="utf-8"))
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        ok = (config["config"]["train"]["epochs"] == epochs
              and number(summary["table"][row.extra["group"]][row.extra["form"]]["mean"])
              and number(summary["negation_flips"]) and number(summary["double_negation_restores"])
              and isinstance(summary["adjectives"], (list, dict)) and isinstance(summary["model"], dict)
              and isinstance(summary.get("test") or {}, dict))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return summary if ok else None


def _record_demo(ctx: Context, path: Path, summary: dict, seed: int) -> None:
    """The record of a demo run under ctx.results (its config, test metrics and metrics.jsonl),
    as train_or_reuse writes one for a trained config."""
    if ctx.results is None or not (path / "config.json").is_file():
        return
    from . import records

    try:
        cfg = json.loads((path / "config.json").read_text(encoding="utf-8"))["config"]
        cfg["train"].get("threads")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        raise RnnlensError(f"{path / 'config.json'}: not the config of a demo run; remove {path} to train "
                           "it again") from None
    test = {"split": "test", **{f"test_{k}": v for k, v in (summary.get("test") or {}).items()}}
    records.write_run(ctx.results, path, config_file="rnnlens demo", cfg=cfg, seed=seed,
                      budget="tiny" if ctx.tiny else "full",
                      seconds=recorded_seconds(summary.get("seconds")), test=test, command=ctx.command,
                      threads=cfg["train"].get("threads"), device=cfg["train"].get("device", "cpu"))


@kind("completion")
def completion_row(ctx: Context, table: Table, row: Row) -> RowResult:
    return RowResult(row, status="no config", note=row.note or "no language model config for MSR")


# --- faithfulness of explanations --------------------------------------------------------------

OURS = ("ngram", "ngram-shared", "exact", "exact-ngram", "exact-deletion", "exact-greedy")   # rnnlens's own views
THEIRS = ("ig", "occlusion", "cd")                            # the best-known alternatives
FAITH_METRICS = (("AOPC", "aopc"), ("Spearman", "spearman"), ("comprehensiveness", "comprehensiveness"),
                 ("sufficiency", "sufficiency"), ("infidelity", "infidelity"))


@kind("faithfulness")
def faithfulness_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """`rnnlens faithfulness` on the row's trained model: every method it can run on the same
    test sentences (the row's `sentences`, default 200, seeded); one line per method and
    metric. Checks, where the row asks (`compare`): the best of rnnlens's views by AOPC
    against the best of integrated gradients, occlusion and contextual decomposition."""
    from ..analysis.faithfulness import faithfulness

    if row.config is None:
        return RowResult(row, status="no config", note=row.note)
    n = int(row.extra.get("sentences", 200))
    notes: list[str] = []

    def scores(run):
        trained = _load(run)
        res = faithfulness(trained.model, trained.split("test"), trained.vocab, max_sentences=n,
                           seed=0, progress=ctx.progress)
        notes[:] = [f"{res.sentences} test sentences"] + list(res.notes)
        return {f"{m}: {label}": getattr(sc, attr) for m, sc in res.methods.items() for label, attr in FAITH_METRICS}

    res = per_seed(ctx, row, scores)
    res.note = "; ".join(notes)
    if row.extra.get("compare") and res.values:
        res.checks += _faithfulness_checks(res.values[0], float(row.extra.get("aopc_ratio", 1.05)))
    return res


def _faithfulness_checks(v: dict, ratio: float) -> list[tuple]:
    aopc = {m: v.get(f"{m}: AOPC") for m in OURS + THEIRS}
    ours = [m for m in OURS if aopc[m] is not None]
    theirs = [m for m in THEIRS if aopc[m] is not None]
    if not ours or not theirs:
        return [("rnnlens's best view against IG, occlusion and CD", "not measured", None)]
    best = max(ours, key=lambda m: aopc[m])
    rival = max(theirs, key=lambda m: aopc[m])
    sp = {m: v.get(f"{m}: Spearman") for m in ours + theirs}
    top_sp = max((sp[m] for m in theirs if sp[m] is not None), default=None)
    r = aopc[best] / aopc[rival] if aopc[rival] else float("inf")
    return [(f"AOPC of the best rnnlens view ({best}) / the best of IG, occlusion, CD ({rival}) >= {ratio}",
             f"{r:.3f}", r >= ratio),
            (f"Spearman of {best} >= the best of IG, occlusion, CD", f"{sp[best]:.3f} vs {top_sp:.3f}"
             if sp[best] is not None and top_sp is not None else "--",
             None if sp[best] is None or top_sp is None else sp[best] >= top_sp)]


# --- running a table ----------------------------------------------------------------------

def run_row(ctx: Context, table: Table, row: Row) -> RowResult:
    if row.extra.get("missing"):
        return RowResult(row, status="missing data", note="missing: " + "; ".join(row.extra["missing"]))
    if row.config is None and not row.extra.get("base_config") and table.kind == "train" \
            and row.key not in BASELINES:
        return RowResult(row, status="no config", note=row.note)
    gone = missing_data(ctx, row)
    if gone:
        if row.key in BASELINES and ctx.reuse_only:
            raise NotRun(row.label)        # a baseline left out of --rows, its data not here
        where = f"under {ctx.data_dir}" if ctx.data_dir else "(no --data-dir)"
        return RowResult(row, status="missing data", note=f"missing: {', '.join(gone)} {where}")
    if row.key in BASELINES:
        return BASELINES[row.key](ctx, row)
    fn = KINDS.get(table.kind)
    if fn is None:
        return RowResult(row, status="not built", note=f"no pipeline for kind {table.kind!r}")
    return fn(ctx, table, row)


def run_table(ctx: Context, table: Table, selected: set[str] | None = None) -> list[RowResult]:
    """Every row's result. With `selected` (labels: --rows), the other rows are kept only
    where DIR/runs already has their runs (nothing is trained for them), so a table rerun
    for one row keeps the rows done before it."""
    ctx = replace(ctx, table=table.id)
    results = []
    for k, row in enumerate(table.rows, 1):
        if selected is None or row.label in selected:
            ctx.log(f"{table.id}: row {k}/{len(table.rows)}: {row.label}")
            results.append(run_row(ctx, table, row))
            continue
        try:
            res = run_row(replace(ctx, reuse_only=True), table, row)
        except NotRun:
            continue
        if res.runs:
            ctx.log(f"{table.id}: row {k}/{len(table.rows)}: {row.label}: kept (not in --rows; its runs are there)")
        results.append(res)
    return results
