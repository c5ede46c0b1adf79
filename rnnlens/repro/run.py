"""Run one reproduction table: train (or reuse) each row's runs, compute the numbers, and
write DIR/<id>.md, .html and .json (see the package docstring).

Runs live in DIR/runs/<config stem>-<budget>-seed<k>/ (a normal model directory) and are
reused when their test record is there, so tables sharing a config (Table 3 and the
negation figure share the SST-2 models) train it once, and a killed `repro` picks up at
the run it was in. Each run's wall time is kept in its repro.json; `--list` reports the
times in timings.json (package data), measured on a 2-core CPU.
"""
from __future__ import annotations

import json
import math
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import RnnlensError
from ..outfiles import json_text, metric_record
from . import Row, Table

BUDGETS = ("quick", "full")


@dataclass
class Context:
    out: Path
    budget: str = "quick"
    seeds: int = 1
    seed0: int = 0
    data_dir: Path | None = None
    configs: Path | None = None
    threads: int | None = None
    device: str = "cpu"
    progress: bool = True
    tiny: bool = False               # the smoke test: caps every run to a few examples, 1 epoch
    reuse_only: bool = False         # a row --rows left out: from runs DIR/runs already has, or not at all
    results: Path | None = None      # where run and table records go (rnnlens.repro.records); None: nowhere
    command: str = ""                # the repro command line, as the records keep it
    table: str = ""                  # the id of the table being run (pipelines.run_table sets it)
    time_limit: float | None = None  # wall-clock seconds per run (train.time_limit); such runs are "time-limited"

    def log(self, msg: str) -> None:
        if self.progress:
            print(f"repro: {msg}", file=sys.stderr, flush=True)


class NotRun(Exception):
    """A reuse-only row (one --rows left out) whose run DIR/runs does not have."""


@dataclass
class Run:
    """One trained model of a row: its test record, config and directory (for a run reused
    from its record alone, the record's folder: no weights)."""
    test: dict
    cfg: object
    path: Path
    seconds: float
    from_record: bool = False


@dataclass
class RowResult:
    row: Row
    status: str = "ok"               # ok | missing data | no config | failed
    values: list = field(default_factory=list)   # per seed: a number or a dict of numbers
    budget: str = ""
    data_used: str = ""
    note: str = ""
    checks: list = field(default_factory=list)   # (what, our value as text, passed: bool | None)
    check_prefix: str | None = None                # the checks' label prefix (default: the row's label)
    runs: dict = field(default_factory=dict)      # run folder -> its training seconds
    budget_name: str = ""                          # quick | full | tiny: the budget its runs had
    search: dict | None = None                     # a tuned row's trials: {"best": t, "trials": [...]}

    @property
    def seconds(self) -> float:
        return sum(self.runs.values())


# --- data and runs ---------------------------------------------------------------------

def missing_data(ctx: Context, row: Row) -> list[str]:
    if not row.data:
        return []
    if ctx.data_dir is None:
        return list(row.data)
    return [d for d in row.data if not (ctx.data_dir / d).exists()]


def row_config(ctx: Context, name: str):
    from ..config import Config, load_config_file

    if ctx.configs is None:
        raise RnnlensError("repro needs the configs/ folder of a checkout: pass --configs DIR")
    path = ctx.configs / name
    if not path.is_file():
        raise RnnlensError(f"config {path} does not exist")
    cfg = load_config_file(path, budget=None if ctx.budget == "full" else ctx.budget)
    d = cfg.to_dict()
    if ctx.data_dir is not None:
        d["data"]["data_dir"] = str(ctx.data_dir)
    if d["model"].get("embeddings_file") and not ctx.tiny:
        d["model"]["embeddings_file"] = vectors_file(ctx, d["model"]["embeddings_file"])
    d["train"]["device"] = ctx.device
    if ctx.threads:
        d["train"]["threads"] = ctx.threads
    if ctx.tiny:
        tiny_overrides(d)
    if ctx.time_limit:
        d["train"]["time_limit"] = ctx.time_limit
    return Config.from_dict(d)


# The word-vector files that configs name (model.embeddings_file), and how to make each when
# it is not there: `rnnlens vectors` with these settings, into DIR/vectors/.
VECTORS = {"imdb-w2v-300d.txt": {"corpus": "imdb", "dim": 300, "epochs": 10, "std": 1.0}}


def vectors_file(ctx: Context, name: str) -> str:
    """The config's vectors file: as given when it exists, else DIR/vectors/<name>, made there
    first (word2vec on the corpus's text, no labels; one thread, bit-for-bit reproducible) when
    VECTORS knows how."""
    if Path(name).is_file():
        return name
    path = ctx.out / "vectors" / Path(name).name
    if path.is_file():
        return str(path)
    recipe = VECTORS.get(Path(name).name)
    if recipe is None:
        raise RnnlensError(f"vectors file {name} does not exist (and repro does not know how to make it)")
    if ctx.data_dir is None:
        raise RnnlensError(f"making {path.name} needs the {recipe['corpus']} text: pass --data-dir")
    from ..data.word2vec import corpus_sentences, train_word2vec, write_vectors

    ctx.log(f"making {path} (word2vec on {recipe['corpus']}, {recipe['epochs']} epochs; once)")
    path.parent.mkdir(parents=True, exist_ok=True)
    sentences, _ = corpus_sentences(recipe["corpus"], ctx.data_dir)
    vectors = train_word2vec(sentences, dim=recipe["dim"], epochs=recipe["epochs"], threads=1,
                             progress=ctx.log if ctx.progress else None)
    write_vectors(vectors, path, std=recipe.get("std"))
    return str(path)


def tiny_overrides(d: dict) -> None:
    """The smoke test's slice: 1 epoch, a few examples, small models; same pipeline."""
    d["train"]["epochs"] = 1
    d["train"]["time_limit"] = None
    data, model = d["data"], d["model"]
    if data.get("corpus") in ("dyck", "crossserial"):
        data.update(train_size=64, dev_size=32, test_size=32)
    elif data.get("corpus") in ("ptb", "wikitext2") and not data.get("sentence_level"):
        data["max_train_examples"] = 2000                # training tokens of the LM stream
    elif data.get("corpus") != "polarity":
        data["max_train_examples"] = 64
    if data.get("corpus") in ("ptb", "wikitext2"):        # a small softmax over the whole dev text
        data["max_vocab"] = min(data.get("max_vocab") or 2000, 2000)
    model["hidden_size"] = min(model.get("hidden_size") or 8, 16)
    if model.get("cell") == "transformer":               # its width must stay a multiple of its heads
        model["heads"] = math.gcd(model.get("heads") or 1, model["hidden_size"])
    model["embeddings_file"], model["freeze_embeddings"] = None, False     # no word-vector file to make
    if model.get("cell") != "urn":
        model["embedding_dim"] = min(model.get("embedding_dim") or 8, 16)


def budget_text(cfg) -> str:
    d, m, t = cfg.data, cfg.model, cfg.train
    if d.corpus in ("dyck", "crossserial"):
        size = f"{d.train_size:,} strings" if d.train_size else "the paper's training set"
    elif d.max_train_examples:
        size = f"{d.max_train_examples:,} training {'tokens' if d.corpus in ('ptb', 'wikitext2') and not d.sentence_level else 'examples'}"
    else:
        size = "all training data"
    return f"{t.epochs} epochs max, {size}, hidden {m.hidden_size}" + (f" x {m.layers} layers" if m.layers > 1 else "")


def run_differences(saved: dict, new: dict) -> list[str]:
    """How the settings `saved` differ from `new` (config dicts) in what makes another run:
    what --resume may change (threads, device, ...), the data folder's path and the folder of
    the word-vector file (repro makes it into each output folder, DIR/vectors/, the same file
    from the same recipe; its name is compared) do not count."""
    from ..train.resume import MAY_CHANGE, config_differences

    def named(d: dict) -> dict:
        model = d.get("model")
        if not isinstance(model, dict) or not model.get("embeddings_file"):
            return d
        return {**d, "model": {**model, "embeddings_file": Path(str(model["embeddings_file"])).name}}

    return config_differences(named(saved), named(new), {"train": MAY_CHANGE, "data": ("data_dir",)})


def train_or_reuse(ctx: Context, config: str, seed: int, overrides: dict | None = None,
                   init_from: Path | None = None, weights: bool = True, need: str | None = None,
                   name: str | None = None) -> Run:
    """The run of `config` (with `overrides`, {section: {key: value}}) and seed `seed` at
    ctx's budget: reused when DIR/runs has its test record of the same settings, or (when
    the caller needs no weights, and the run starts from none) when ctx.results has its
    record; trained otherwise, in PATH.partial/ with a resume checkpoint after every epoch
    (or every train.checkpoint_every steps): a killed run leaves no half folder, and the same
    command again continues it from its last checkpoint (its record's seconds count both).
    init_from: a run folder whose weights it starts from (train.init_from); the run is
    reused only while that folder holds the same weights it started from. Every run used
    is recorded under ctx.results. need: a test metric the caller reads; a reused run whose
    test record lacks it (a metric added after it was trained) is evaluated again from its
    weights (`reevaluate`) instead of being retrained. name: the run's name before its
    -<budget>-seed<k> (default: the config's stem, then the overrides as +key=value)."""
    from ..config import Config
    from ..train.resume import Checkpoints, training_dir
    from ..train.run import train_run

    cfg = row_config(ctx, config)
    d = cfg.to_dict()
    d["train"]["seed"] = seed
    stem = Path(config).stem
    for section, values in (overrides or {}).items():
        d[section].update(values)
        stem += "+" + "+".join(f"{k}={v}" for k, v in sorted(values.items()))
    stem = name or stem
    start = None
    if init_from is not None:
        d["train"]["init_from"] = str(init_from)
        start = ((_read_json(Path(init_from) / "config.json") or {}).get("sha256") or {}).get("model.safetensors")
    cfg = Config.from_dict(d)
    tag = "tiny" if ctx.tiny else ctx.budget
    path = ctx.out / "runs" / f"{stem}-{tag}-seed{seed}"
    test = _test_record(path)
    changed = []
    if test is not None:
        saved = (_read_json(path / "config.json") or {}).get("config")
        changed = run_differences(saved, cfg.to_dict()) if isinstance(saved, dict) else ["no config.json"]
        info = _read_json(path / "repro.json") or {}
        if not changed and info.get("init_sha256") != start:
            changed = [f"train.init_from: {init_from} holds other weights than those it started from"]
        if not changed:
            changed = _cut_short(ctx, path)
        if not changed:
            ctx.log(f"reusing {path}")
            if need is not None and need not in test:
                test = reevaluate(ctx, path, test)
            run = Run(test, cfg, path, recorded_seconds(info.get("seconds")))
            _record(ctx, run, config, seed, tag, start, overrides)
            return run
    if not weights and init_from is None:
        run = _from_record(ctx, cfg, path.name, need)
        if run is not None:
            from .records import mark_overrides

            mark_overrides(ctx.results, path.name, overrides or None)
            return run
    if ctx.reuse_only:
        raise NotRun(path)
    if changed:
        ctx.log(f"{path} was trained with other settings ({'; '.join(changed[:3])}"
                f"{'; ...' if len(changed) > 3 else ''}): training it again")
    saved = _interrupted(ctx, path, cfg)
    ctx.log(f"training {config} (seed {seed}, budget {tag}) -> {path}"
            + (f" (resuming from {saved.where()})" if saved else ""))
    before = recorded_seconds(saved.state.get("seconds")) if saved else 0.0
    t0 = time.perf_counter()
    with training_dir(path, force=True, resume=saved is not None) as tmp:
        ckpts = Checkpoints(tmp, cfg.to_dict(), cfg.train.checkpoint_every, resume=saved,
                            hint="the same `rnnlens repro` command again")
        res = train_run(cfg, tmp, progress=ctx.progress, checkpoints=ckpts)
        seconds = before + time.perf_counter() - t0
        info = {"config": config, "seed": seed, "budget": tag, "seconds": round(seconds, 1)}
        if start is not None:
            info["init_sha256"] = start
        (tmp / "repro.json").write_text(json_text(info), encoding="utf-8")
    test = _test_record(path)            # the metrics.jsonl record, as a reused run reads it
    if not res.test or test is None:
        raise RnnlensError(f"{config}: the run wrote no test record")
    run = Run(test, cfg, path, seconds)
    _record(ctx, run, config, seed, tag, start, overrides)
    return run


def _interrupted(ctx: Context, path: Path, cfg):
    """The newest intact checkpoint of an interrupted training of this run (PATH.partial/,
    left by a killed repro), when it was started with the same settings; None otherwise (a
    partial run of other settings is started again)."""
    from ..config import Config
    from ..train.resume import Checkpoints, partial_dir

    part = partial_dir(path)
    saved = Checkpoints.latest(part) if part.is_dir() else None
    if saved is None:
        return None
    try:
        old = Config.from_dict(saved.state["config"]).to_dict()
    except (KeyError, TypeError, ValueError, RnnlensError):
        old = None
    changed = run_differences(old, cfg.to_dict()) if old is not None else ["an unreadable config"]
    if changed:
        ctx.log(f"{part} holds an interrupted run of other settings ({'; '.join(changed[:3])}): starting again")
        return None
    return saved


def reevaluate(ctx: Context, path: Path, old: dict) -> dict:
    """The test record of the trained run in `path`, computed again from its weights with
    this version's metrics, and appended to its metrics.jsonl (marked `reevaluated`, with the
    version that computed it), for a record older than a metric the table reads. The metrics
    the old record has must come out the same (to 1e-5): otherwise the folder's weights are
    not the ones that were tested, and the run is refused."""
    from ..app.run import Run as ModelRun
    from ..train.trainer import Trainer
    from .records import environment, write_atomic

    ctx.log(f"{path.name}: its test record lacks a metric this version computes; evaluating it again")
    if ctx.threads:
        from ..ops.threads import set_threads

        set_threads(ctx.threads)
    run = ModelRun.load(path, data_dir=ctx.data_dir)
    scores = Trainer(run.model, run.config.train, progress=False).evaluate(run.batches("test"))
    new = {"split": "test", "best_epoch": old.get("best_epoch"), **{f"test_{k}": v for k, v in scores.items()}}
    for k, v in old.items():
        if isinstance(v, float) and isinstance(new.get(k), float) and abs(v - new[k]) > 1e-5 * max(1.0, abs(v)):
            raise RnnlensError(f"{path}: evaluated again, {k} is {new[k]:.6g}, not the recorded {v:.6g}: the "
                               "folder's weights are not those that were tested; train the run again")
    env = environment()
    new["reevaluated"] = {k: env[k] for k in ("rnnlens", "commit", "torch")}
    log = path / "metrics.jsonl"
    text = log.read_text(encoding="utf-8")
    write_atomic(log, text + ("" if text.endswith("\n") or not text else "\n") + json_text(new) + "\n")
    return _test_record(path)


def _record(ctx: Context, run: Run, config: str, seed: int, tag: str, start: str | None,
            overrides: dict | None = None) -> None:
    if ctx.results is None:
        return
    from . import records

    d = run.cfg.to_dict()
    old = records.read_run(ctx.results, run.path.name)
    if old is not None and old.get("test") != run.test:
        stale = records.tables_citing(ctx.results, run.path.name, but=ctx.table)
        if stale:
            ctx.log(f"warning: {run.path.name} replaces a recorded run of that name; {', '.join(stale)} still "
                    "show the old run's numbers: run them again (rnnlens repro TABLE)")
    init = None
    if start is not None:
        init = {"run": Path(d["train"]["init_from"]).name, "sha256": start}
        d["train"]["init_from"] = init["run"]
    if (old is not None and old.get("test") == run.test and isinstance(old.get("config"), dict)
            and not run_differences(old["config"], records.portable_config(d))
            and old.get("overrides") == (overrides or None)):
        return              # this very run, recorded already: its record keeps the command that made it
    records.write_run(ctx.results, run.path, config_file=f"configs/{config}", cfg=d, seed=seed, budget=tag,
                      seconds=run.seconds, test=run.test, command=ctx.command, threads=d["train"].get("threads"),
                      device=d["train"].get("device", "cpu"), init_from=init, overrides=overrides or None)


def _from_record(ctx: Context, cfg, name: str, need: str | None = None) -> Run | None:
    """The run `name` from its record under ctx.results when the record's config is cfg's
    (and its test record has the metric `need`: a record has no weights to evaluate again)."""
    from . import records

    rec = records.read_run(ctx.results, name)
    if rec is None or not isinstance(rec.get("config"), dict):
        return None
    changed = run_differences(rec["config"], records.portable_config(cfg.to_dict()))
    if not changed and need is not None and need not in rec["test"]:
        ctx.log(f"the record of {name} has no {need} (and no weights to evaluate it from): not reused")
        return None
    folder = ctx.results / records.RUNS / name
    if not changed:
        changed = _cut_short(ctx, folder)
    if changed:
        ctx.log(f"the record of {name} has other settings ({'; '.join(changed[:3])}): not reused")
        return None
    ctx.log(f"reusing the record of {name} ({folder})")
    return Run(rec["test"], cfg, folder, recorded_seconds(rec.get("seconds")), from_record=True)


def recorded_seconds(value) -> float:
    """A recorded wall time (repro.json, a record, a checkpoint); 0 where it is not a number."""
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else 0.0


def _cut_short(ctx: Context, path: Path) -> list[str]:
    """Why the run in `path` (a run folder or its record) is not reused by this repro: a run its
    time limit stopped stands in only for a repro with a time limit (or a row --rows left out)."""
    if ctx.reuse_only or ctx.time_limit is not None or time_limited(path) is None:
        return []
    return ["its training was stopped by a time limit"]


def time_limited(path: Path) -> dict | None:
    """How a run's time limit (train.time_limit) stopped its training before its last epoch
    ({"after_epoch": epochs finished, "time_limit": seconds, ...}), from its metrics.jsonl (a
    run folder's or its record's); None for a run that was not stopped so (it ran its epochs,
    or stopped early on its dev score)."""
    try:
        lines = (path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("stopped") == "time_limit":
            return rec
    return None


def _read_json(p: Path):
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _test_record(path: Path) -> dict | None:
    try:
        lines = (path / "metrics.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            return None
        if isinstance(rec, dict) and rec.get("split") == "test":
            return metric_record(rec)
    return None


# --- kinds -------------------------------------------------------------------------------

KINDS: dict[str, Callable[[Context, Table, Row], RowResult]] = {}


def kind(name: str):
    def register(fn):
        KINDS[name] = fn
        return fn
    return register


def metric_value(table: Table, row: Row, test: dict):
    key = row.key or table.metric.get("key")
    scale = row.scale if row.scale is not None else table.metric.get("scale", 1)
    if key not in test:
        raise RnnlensError(f"{table.id} / {row.label}: the test record has no {key!r} "
                           f"(it has {', '.join(sorted(test))})")
    v = test[key]
    if isinstance(v, dict):
        return {k: _scaled(x, scale) for k, x in v.items()}
    return _scaled(v, scale)


def _scaled(v, scale):
    if isinstance(v, dict):
        return {k: _scaled(x, scale) for k, x in v.items()}
    return None if v is None else float(v) * scale


def per_seed(ctx: Context, row: Row, fn, weights: bool = True, need: str | None = None,
             table: Table | None = None) -> RowResult:
    """Train or reuse the row's run for each seed; its values are fn(run). weights=False: fn
    reads only run.test, so a run's record may stand in for the run (see train_or_reuse).
    need: the test metric fn reads (a reused run lacking it is evaluated again). A row with
    "search" is tuned first over `table`'s search (repro.search), its seeds then run at the
    best trial's setting."""
    res = RowResult(row, budget_name="tiny" if ctx.tiny else ctx.budget)
    overrides, name = row.extra.get("overrides"), None
    if row.extra.get("search"):           # tuned: the best trial's setting (repro.search)
        from .search import search, summary, trial_name

        if table is None or table.search is None:
            raise RnnlensError(f"{row.label}: a search row in a table whose pipeline does not tune")
        best, trials = search(ctx, table, row, train_or_reuse)
        overrides, name = best.overrides, trial_name(row.config, best.index)
        res.search = {"best": best.index, "trials": [{"trial": t.index, "run": t.run, "dev": t.dev,
                                                      "overrides": t.overrides} for t in trials]}
        res.note = summary(table, best, trials)
    limited = []                          # epochs finished by each time-limited seed
    for s in range(ctx.seeds):
        start = None
        if row.extra.get("init_from"):        # a second phase: first the run it starts from
            start = train_or_reuse(ctx, row.extra["init_from"], ctx.seed0 + s)
            res.runs[str(start.path)] = round(start.seconds, 1)
        run = train_or_reuse(ctx, row.config or row.extra["base_config"], ctx.seed0 + s,
                             overrides, init_from=None if start is None else start.path,
                             weights=weights, need=need, name=name)
        try:
            res.values.append(fn(run))
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            if weights:                   # fn read more than the test record: not the record's fault
                raise
            where = run.path / ("record.json" if run.from_record else "metrics.jsonl")
            raise RnnlensError(f"{where}: its test record does not hold what {row.label!r} reads "
                               f"({type(e).__name__}: {e}); remove the run to train it again") from None
        res.runs[str(run.path)] = round(run.seconds, 1)
        res.budget = budget_text(run.cfg)
        res.data_used = data_used_text(run.cfg)
        done = time_limited(run.path)
        if done is not None:         # the paper's settings, cut short: never a reproduction
            res.budget_name = "time-limited"
            limited.append(done)
    if limited:
        secs = sorted({f"{float(d.get('time_limit') or 0):g}" for d in limited})
        res.budget = (f"stopped by a {'/'.join(secs)} s time limit after "
                      f"{'/'.join(str(d.get('after_epoch')) for d in limited)} of {run.cfg.train.epochs} epochs; "
                      + res.budget)
    return res


@kind("train")
def run_train_row(ctx: Context, table: Table, row: Row) -> RowResult:
    """Train the row's config per seed and read the table's metric from the test record."""
    return per_seed(ctx, row, lambda run: metric_value(table, row, run.test), weights=False,
                    need=row.key or table.metric.get("key"), table=table)


def data_used_text(cfg) -> str:
    d = cfg.data
    if d.corpus in ("dyck", "crossserial", "polarity"):
        return f"{d.corpus} (generated)" if d.corpus != "polarity" else "built-in polarity corpus"
    from .records import portable

    return f"{d.corpus} from {portable(d.data_dir)}" if d.data_dir else d.corpus


# --- summaries ------------------------------------------------------------------------------

def mean_std(values: list) -> tuple[float | None, float | None]:
    xs = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not xs:
        return None, None
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else None)


def tolerance_for(table: Table, row: Row) -> dict:
    """The row's own tolerance, else the table's when it applies to the row (no "rows" list,
    or the row's label in it), else {}."""
    if isinstance(row.extra.get("tolerance"), dict):
        return row.extra["tolerance"]
    tol = table.tolerance or {}
    if "rows" in tol and row.label not in tol["rows"]:
        return {}
    return tol


ABOVE = "above"      # a verdict: better than the paper by more than the tolerance


def within(table: Table, row: Row, paper, ours, reference: float | None = None) -> bool | str | None:
    """Is ours within the tolerance? True, False (worse than the paper by more than it),
    ABOVE (better than the paper by more than it: flagged, not passed), or None (none set,
    or no numbers). {"abs": a}: |ours - paper| <= a, or with "side": "below" only a
    shortfall counts (below for a higher-is-better metric, above otherwise); {"rel": r}:
    |ours - ref| <= r |ref|, ref the paper's number or, with "relative_to": LABEL, our value
    of that row (`reference`); {"max": m}: ours <= m; {"min": m}: ours >= m."""
    tol = tolerance_for(table, row)
    if ours is None or not tol:
        return None
    if tol.get("max") is not None:
        return ours <= tol["max"]
    if tol.get("min") is not None:
        return ours >= tol["min"]
    higher = table.metric.get("higher_is_better", True) is not False
    if tol.get("rel") is not None:
        ref = reference if tol.get("relative_to") else paper
        if not isinstance(ref, (int, float)):
            return None
        margin = tol["rel"] * abs(ref)
    elif tol.get("abs") is not None and isinstance(paper, (int, float)):
        ref, margin = paper, tol["abs"]
    else:
        return None
    better = ours - ref if higher else ref - ours          # > 0: better than the reference
    if better < -margin:
        return False
    if better > margin and tol.get("side") != "below":
        return ABOVE
    return True
