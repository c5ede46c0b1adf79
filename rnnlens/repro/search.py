"""Random hyper-parameter search for a reproduction row, as a paper that tunes each model
does it (the rational paper's Appendix E.3: "20 epochs of random search" over its Table 6,
the best development configuration then trained with five seeds).

A table's "search" names the space and the number of trials:

    "search": {"trials": 20, "select": "accuracy", "source": "Table 6",
               "space": {"model.hidden_size": {"int": [100, 300]},
                         "train.lr": {"log": [1e-4, 1e-2]},
                         "model.layer_dropout": {"uniform": [0.0, 0.5]}, ...}}

and a row with "search": true is tuned over it: trial t trains the row's config with the
t-th draw of the space (the same draws for every row of the table, so every model is tried
at the same 20 settings), at the first seed, as the run <config stem>-trial<tt>; the trial
with the best development score (the dev_<select> of its best epoch; ties go to the earlier
trial) is the row's setting, and its seeds are the runs <config stem>-trial<tt>-...-seed<k>
(the first seed's is the trial itself). Every trial is a normal run: recorded under
results/runs, reused from there, resumed when killed.
"""
from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path

from ..errors import RnnlensError
from ..outfiles import metric_record

RANGES = ("int", "uniform", "log")
TINY_TRIALS = 2                       # --tiny: the smoke test tries this many


def check_search(table, where: str) -> None:
    """A clear error for a malformed search: a space of known config settings, each with a
    range of a known kind and lo <= hi (lo > 0 for "log"), trials >= 1; rows that ask for it
    need the table's search and a config of their own."""
    from ..config import flat_fields

    spec = table.search
    rows = [r.label for r in table.rows if r.extra.get("search")]
    if spec is None:
        raise RnnlensError(f"{where}: rows {', '.join(rows)} ask for a search but the table has no \"search\"")
    if not isinstance(spec, dict) or not isinstance(spec.get("space"), dict) or not spec["space"]:
        raise RnnlensError(f"{where}: \"search\" needs a non-empty \"space\"")
    trials = spec.get("trials")
    if not isinstance(trials, int) or isinstance(trials, bool) or trials < 1:
        raise RnnlensError(f"{where}: search \"trials\" must be an integer >= 1")
    known = {f"{section}.{key}" for key, (section, _) in flat_fields().items()}
    for name, rng in spec["space"].items():
        if name not in known:
            raise RnnlensError(f"{where}: search space setting {name!r} is not a config setting")
        if not (isinstance(rng, dict) and len(rng) == 1 and next(iter(rng)) in RANGES):
            raise RnnlensError(f"{where}: search space {name}: give one of {', '.join(RANGES)}: [lo, hi]")
        kind, bounds = next(iter(rng.items()))
        if not (isinstance(bounds, list) and len(bounds) == 2
                and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in bounds)
                and bounds[0] <= bounds[1] and (kind != "log" or bounds[0] > 0)):
            raise RnnlensError(f"{where}: search space {name}: {kind} needs [lo, hi] with lo <= hi"
                               + (" and lo > 0" if kind == "log" else ""))
    for r in table.rows:
        if r.extra.get("search") and not r.config:
            raise RnnlensError(f"{where}: row {r.label!r} asks for a search but names no config")
        if r.extra.get("search") and r.extra.get("init_from"):
            raise RnnlensError(f"{where}: row {r.label!r}: a search row cannot start from another run (init_from)")


def draw(space: dict, trial: int, salt: str) -> dict[str, dict]:
    """The trial-th setting of the space, {section: {key: value}}: deterministic in (salt,
    trial), independent of the other trials and of the order the space is written in. Ints
    are whole, uniform draws are rounded to 2 decimals, log-uniform ones to 2 significant
    digits (run names and records stay readable)."""
    out: dict[str, dict] = {}
    for name in sorted(space):
        kind, (lo, hi) = next(iter(space[name].items()))
        rng = random.Random(f"{salt}/{trial}/{name}")
        if kind == "int":
            v = rng.randint(int(lo), int(hi))
        elif kind == "uniform":
            v = round(rng.uniform(lo, hi), 2)
        else:
            v = float(f"{math.exp(rng.uniform(math.log(lo), math.log(hi))):.2g}")
        section, key = name.split(".", 1)
        out.setdefault(section, {})[key] = v
    return out


def with_row_overrides(row, drawn: dict) -> dict:
    """The row's own overrides (if any) with the trial's draw on top."""
    out = {section: dict(values) for section, values in (row.extra.get("overrides") or {}).items()}
    for section, values in drawn.items():
        out.setdefault(section, {}).update(values)
    return out


def trial_name(config: str, trial: int) -> str:
    return f"{Path(config).stem}-trial{trial:02d}"


def dev_score(run, select: str) -> float:
    """The dev_<select> of the run's best epoch, from its metrics.jsonl (the run folder's, or
    its record's)."""
    best = run.test.get("best_epoch")
    try:
        lines = (Path(run.path) / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        raise RnnlensError(f"{run.path}: no metrics.jsonl to read the development score from") from None
    for line in lines:
        rec = metric_record(json.loads(line))
        if isinstance(rec, dict) and rec.get("epoch") == best and f"dev_{select}" in rec:
            return float(rec[f"dev_{select}"])
    raise RnnlensError(f"{run.path}: no dev_{select} at its best epoch ({best})")


@dataclass
class Trial:
    index: int
    overrides: dict
    run: str                          # the run folder's name
    dev: float


def search(ctx, table, row, train_or_reuse) -> tuple[Trial, list[Trial]]:
    """Train (or reuse) every trial of the row at the first seed with train_or_reuse
    (repro.run's, passed in: this module stays below it); (the best, all of them). Under
    --tiny only the first TINY_TRIALS are tried."""
    spec = table.search
    select = selected_metric(table)
    sign = 1.0 if table.metric.get("higher_is_better", True) is not False else -1.0
    n = min(spec["trials"], TINY_TRIALS) if ctx.tiny else spec["trials"]
    trials = []
    for t in range(n):
        over = with_row_overrides(row, draw(spec["space"], t, table.id))
        if not ctx.reuse_only:
            ctx.log(f"{row.label}: search trial {t + 1}/{n}: {describe(over)}")
        run = train_or_reuse(ctx, row.config, ctx.seed0, over, weights=False, name=trial_name(row.config, t))
        trials.append(Trial(t, over, run.path.name, dev_score(run, select)))
    best = max(trials, key=lambda tr: (sign * tr.dev, -tr.index))
    return best, trials


def selected_metric(table) -> str:
    """The development metric a search picks by: the search's "select", else the table's
    metric key without its "test_"."""
    key = table.metric.get("key") or "accuracy"
    return (table.search or {}).get("select") or key.removeprefix("test_")


def describe(overrides: dict) -> str:
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                     for section in overrides.values() for k, v in section.items())


def summary(table, best: Trial, trials: list[Trial]) -> str:
    """The row's note on its search: which trial won, its setting, and the spread."""
    scale = table.metric.get("scale", 1)
    devs = sorted(tr.dev * scale for tr in trials)
    return (f"tuned: trial {best.index} of {len(trials)} has the best dev {selected_metric(table)} "
            f"({best.dev * scale:.2f}; the trials' range {devs[0]:.2f}-{devs[-1]:.2f}): {describe(best.overrides)}")
