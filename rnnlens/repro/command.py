"""`rnnlens repro`: the command behind the reproduction tables."""
from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ..argtypes import POSITIVE, SEED, SIZE, THREADS
from ..errors import RnnlensError
from . import default_configs_dir, get_table, load_tables
from .pipelines import BASELINES, run_table
from .records import default_results_dir, read_tables, tables_locked, write_atomic
from .run import BUDGETS, Context, missing_data

SEED_MAX = 2**32 - 1                    # the largest --seed (argtypes.SEED): what torch and numpy take


def timings() -> dict:
    """Measured seconds per table and budget on a 2-core CPU (timings.json, package data)."""
    try:
        return json.loads((resources.files(__package__) / "timings.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _minutes(s) -> str:
    if s is None:
        return "not measured"
    return f"{s / 60:.0f} min" if s >= 90 else f"{s:.0f} s"


def list_text(data_dir: Path | None, only: list[str] | None = None) -> str:
    """Every table (or those named in `only`), its data needs and measured times."""
    tables, times = load_tables(), timings()
    picked = [get_table(n) for n in only] if only and only != ["all"] else list(tables.values())
    out = [f"reproduction tables (data folder: {data_dir or 'none given: --data-dir'})", ""]
    for t in picked:
        ctx = Context(out=Path("."), data_dir=data_dir)
        gone = sorted({d for r in t.rows for d in missing_data(ctx, r)})
        absent = sorted({m for r in t.rows for m in r.extra.get("missing") or []})
        runnable = sum(1 for r in t.rows if (r.config or r.extra.get("base_config") or t.kind == "polarity-table"
                                             or r.key in BASELINES)
                       and not r.extra.get("missing") and not missing_data(ctx, r))
        out.append(f"{t.id}  ({t.paper}, {t.source}; {len(t.rows)} rows, {runnable} runnable here)")
        out.append(f"    {t.title}")
        out.append(f"    data: {', '.join(t.needs) or 'none (generated or built in)'}"
                   + (f"; not under the data folder: {', '.join(gone)}" if gone else ""))
        for m in absent:
            out.append(f"    missing everywhere: {m}")
        tt = times.get(t.id, {})
        spent = [f"{b} {_minutes(tt.get(b))}" + (f" ({tt[b + '_rows']} rows measured)" if tt.get(b + "_rows") else "")
                 for b in BUDGETS]
        out.append(f"    time on a 2-core CPU (1 thread per run): {', '.join(spent)}")
        if t.language_model:
            out.append("    a language-model table: its paper's budget needs a GPU (--device cuda); "
                       "on a CPU run the quick budget, or --time-limit")
    return "\n".join(out)


def cmd_repro(args) -> int:
    from .records import process_commit

    process_commit()                   # the commit whose code this process loaded (records.py)
    data_dir = Path(args.data_dir) if args.data_dir else None
    if data_dir is not None and not data_dir.is_dir():
        raise RnnlensError(f"--data-dir {data_dir} is not a folder")
    if args.list:
        ignored = [flag for flag, given in (("--tiny", args.tiny), ("--seeds", args.seeds != 1),
                                            ("--seed", args.seed != 0), ("--time-limit", args.time_limit),
                                            ("--budget", args.budget), ("--rows", args.rows), ("--out", args.out),
                                            ("--render", args.render),
                                            ("--results", args.results), ("--configs", args.configs))
                   if given]
        if ignored:
            raise RnnlensError(f"--list lists the tables (TABLE and --data-dir choose which and where the data is): "
                               f"{', '.join(ignored)} would change nothing")
        print(list_text(data_dir, args.tables))
        return 0
    if args.render:
        if args.tables or args.rows:
            raise RnnlensError("--render renders every recorded table: it takes no TABLE and no --rows")
        ignored = [flag for flag, given in (("--tiny", args.tiny), ("--seeds", args.seeds != 1),
                                            ("--seed", args.seed != 0), ("--time-limit", args.time_limit),
                                            ("--budget", args.budget))
                   if given]
        if ignored:
            raise RnnlensError(f"--render reads the records as they are: {', '.join(ignored)} would change nothing "
                               "(they go with a repro that trains)")
        return _render(args)
    args.budget = args.budget or "quick"
    if not args.tables:
        raise RnnlensError("name a table (or 'all'); `rnnlens repro --list` shows them")
    if not args.out:
        raise RnnlensError("--out DIR is required")
    if args.budget not in BUDGETS:
        raise RnnlensError(f"--budget must be one of {', '.join(BUDGETS)}")
    if args.seeds < 1:
        raise RnnlensError("--seeds must be >= 1")
    if args.seed + args.seeds - 1 > SEED_MAX:
        raise RnnlensError(f"--seed {args.seed} with --seeds {args.seeds} goes past the largest seed, {SEED_MAX}")
    if "all" in args.tables and args.tables != ["all"]:
        raise RnnlensError("'all' runs every table: give it alone, not with table ids")
    names = list(load_tables()) if args.tables == ["all"] else args.tables
    tables = [get_table(n) for n in names]          # every name checked before any work
    selected = None                       # --rows: the labels to run; None: every row
    if args.rows:
        empty = [w for w in args.rows if not w.removeprefix("=").strip()]
        if empty:
            raise RnnlensError(f"--rows {empty[0]!r} names no label: give (part of) a row's label")

        def picks(w: str, label: str) -> bool:      # "=LABEL": that row alone; else a substring
            return label.lower() == w[1:].lower() if w.startswith("=") else w.lower() in label.lower()

        labels = [r.label for t in tables for r in t.rows]
        unmatched = [w for w in args.rows if not any(picks(w, label) for label in labels)]
        if unmatched:                     # one --rows that picks nothing is a typo, not a row skipped
            raise RnnlensError(f"no row label contains (or, with =, is) {' or '.join(map(repr, unmatched))}")
        selected = {label for label in labels if any(picks(w, label) for w in args.rows)}
        tables = [t for t in tables if any(r.label in selected for r in t.rows)]
    configs = Path(args.configs) if args.configs else default_configs_dir()
    if configs is not None and not configs.is_dir():
        raise RnnlensError(f"--configs {configs} is not a folder")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise RnnlensError(f"output path {out} exists and is not a folder")
    results = Path(args.results) if args.results else (None if args.tiny else default_results_dir())
    if results is not None and results.exists() and not results.is_dir():
        raise RnnlensError(f"--results {results} is not a folder")
    if results is not None:
        _check_apart(out, results)
        read_tables(results)            # a damaged table record stops here, before any training
    from ..train.run import check_device

    check_device(args.device, "--device")           # before any folder is made
    made = [m for f in (out, results) if f is not None for m in _missing(f)]
    for folder, what in ((results, "--results"), (out, "output")):   # both before any training
        try:
            if folder is not None:
                folder.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            _remove_empty(made)
            raise RnnlensError(f"cannot create {what} folder {folder}: {e.strerror}") from None
    try:
        return _run(args, tables, selected, out, results, data_dir, configs)
    except BaseException:
        _remove_empty(made)             # a repro that failed before writing anything leaves no folder
        raise


def _missing(folder: Path) -> list[Path]:
    """`folder` and the folders above it that do not exist yet, deepest first."""
    out = []
    while not folder.exists() and folder != folder.parent:
        out.append(folder)
        folder = folder.parent
    return out


def _remove_empty(made: list[Path]) -> None:
    """Remove the folders of `made` (those this repro created, deepest first) where empty."""
    for folder in made:
        for f in (folder / "runs", folder):
            try:
                f.rmdir()
            except OSError:             # not there, or not empty: what it holds stays
                pass


def _check_apart(out: Path, results: Path) -> None:
    """--out and --results must not overlap: a run's folder (weights, checkpoints) under the
    records, or a record under DIR/runs, would mix the two and a retrained run would
    replace its record's folder."""
    o, r = out.resolve(), results.resolve()
    if o == r or r in o.parents:
        raise RnnlensError(f"--out {out} is {'the' if o == r else 'inside the'} --results folder {results}: "
                           "the records hold no runs; choose an --out outside it")
    if (o / "runs") == r or (o / "runs") in r.parents:
        raise RnnlensError(f"--results {results} is inside {out / 'runs'}, where repro trains its runs: "
                           "choose another --results")


def _run(args, tables, selected, out: Path, results: Path | None, data_dir: Path | None, configs) -> int:
    ctx = Context(out=out, budget=args.budget, seeds=args.seeds, seed0=args.seed, data_dir=data_dir,
                  configs=configs, threads=args.threads, device=args.device, progress=not args.quiet,
                  tiny=args.tiny, results=results, command=_command_text(args), time_limit=args.time_limit)
    from ..outfiles import writing
    from .render import markdown, to_html, to_json

    with writing(out):                  # one repro at a time in DIR: its runs/ are shared
        for t in tables:
            results_ = run_table(ctx, t, selected)
            md = markdown(t, results_, ctx)
            write_atomic(out / f"{t.id}.json", to_json(t, results_, ctx))
            write_atomic(out / f"{t.id}.html", to_html(t, results_, ctx))
            write_atomic(out / f"{t.id}.md", md)
            if results is not None:
                with tables_locked(results):        # another repro on these records waits its turn
                    before = (read_tables(results).get(t.id) or {}).get("rows") or []
                    rows = results_rows(results, t, json.loads(to_json(t, results_, ctx)), selected, before)
                    if rows != before:               # nothing of this run's: the record (and its command) stand
                        _record_table(results, t, rows, ctx)
            print(md)
    print(f"wrote {out}" + (f" (records under {results})" if results is not None else ""))
    return 0


def results_rows(results: Path, table, new: dict, selected: set[str] | None = None,
                 earlier: list[dict] | None = None) -> list[dict]:
    """The table's rows for its record, in the table's order. With `selected` (the --rows
    labels) only those rows are this run's: every other row keeps what the earlier record has
    for it where that has runs (a --rows rerun never changes the rows it does not name, not
    even one it re-read from DIR/runs with other --seeds), and takes this run's otherwise. An
    earlier row without runs (no config, missing data) is not kept: this run re-derived every
    such row that still stands, so one it left out no longer applies (its config has been
    written since, say, and the row simply has not been run). A row this run found no data
    for keeps the earlier record's runs: data missing here (no --data-dir, another machine)
    says nothing about the recorded result. `earlier`: the table record's rows, when the caller
    has read them already."""
    if earlier is None:
        earlier = (read_tables(results).get(table.id) or {}).get("rows") or []
    old = {r["label"]: r for r in earlier if r.get("runs")}
    mine = {r["label"]: r for r in new["rows"]}
    def row(label):
        if (mine.get(label) or {}).get("status") == "missing data" and label in old:
            return old[label]
        named = selected is None or label in selected
        return (mine.get(label) or old.get(label)) if named else (old.get(label) or mine.get(label))

    return [x for x in (row(r.label) for r in table.rows) if x is not None]


def _record_table(results: Path, table, rows: list[dict], ctx: Context) -> None:
    from .records import write_table

    write_table(results, table.id, {"table": table.id, "paper": table.paper, "source": table.source,
                                    "command": ctx.command, "rows": rows})


def _command_text(args) -> str:
    """The repro command as records keep it: the arguments that decide the numbers, with paths
    made portable."""
    from .records import portable

    parts = ["rnnlens", "repro", *args.tables, "--budget", args.budget]
    if args.seeds != 1:
        parts += ["--seeds", str(args.seeds)]
    if args.seed:
        parts += ["--seed", str(args.seed)]
    if args.data_dir:
        parts += ["--data-dir", portable(args.data_dir)]
    parts += ["--out", portable(args.out)]
    if args.threads:
        parts += ["--threads", str(args.threads)]
    if args.device != "cpu":
        parts += ["--device", args.device]
    if args.time_limit:
        parts += ["--time-limit", f"{args.time_limit:g}"]
    for r in args.rows or []:
        parts += ["--rows", r]
    if args.tiny:
        parts.append("--tiny")
    return " ".join(f'"{p}"' if (" " in p or "(" in p) else p for p in parts)


def _render(args) -> int:
    import os

    from .report import FIGURES, render, write_figures

    results = Path(args.results) if args.results else default_results_dir()
    if results is None or not results.is_dir():
        raise RnnlensError(f"--render needs the records folder: --results DIR ({results or 'no checkout here'} "
                           "is not a folder)")
    configs = Path(args.configs) if args.configs else default_configs_dir()
    if configs is not None and not configs.is_dir():
        raise RnnlensError(f"--configs {configs} is not a folder")
    if not read_tables(results):
        raise RnnlensError(f"--results {results} has no table records ({results / 'tables'}/*.json): nothing to "
                           "render; `rnnlens repro TABLE --results DIR` writes them")
    if not args.out:
        print(render(results, figures=None, configs=configs), end="")
        return 0
    from ..outfiles import check_new_file, replacing

    out = check_new_file(args.out, force=True)      # before any figure is drawn
    href = Path(os.path.relpath(results.resolve() / FIGURES, out.resolve().parent))
    text = render(results, figures=href.as_posix(), configs=configs)
    with replacing(out, suffix=".md") as tmp:
        tmp.write_text(text, encoding="utf-8")
        written = write_figures(results, results / FIGURES)
    print(f"wrote {args.out} and {len(written)} figures in {results / FIGURES}")
    return 0


def add_parser(sub) -> None:
    rp = sub.add_parser("repro", help="reproduce a table of the papers: the paper's numbers beside ours, as "
                        "markdown and HTML (`--list` shows the tables)")
    rp.add_argument("tables", nargs="*", metavar="TABLE", help="table ids (see --list), or 'all'")
    rp.add_argument("--list", action="store_true", help="list the tables, their data needs and times")
    rp.add_argument("--budget", default=None, help="quick (minutes per run on a CPU; the default) or full (the "
                    "paper's settings)")
    rp.add_argument("--seeds", type=SIZE, default=1, help="runs per row (mean and std over them)")
    rp.add_argument("--seed", type=SEED, default=0, help="the first seed")
    rp.add_argument("--out", help="output folder: <table>.md/.html/.json and runs/ (reused across tables)")
    rp.add_argument("--data-dir", help="folder of the datasets (e.g. ../shared/data)")
    rp.add_argument("--configs", help="the configs/ folder (default: the checkout's)")
    rp.add_argument("--threads", type=THREADS, default=None)
    rp.add_argument("--device", default="cpu")
    rp.add_argument("--time-limit", type=POSITIVE, default=None, metavar="SECONDS",
                    help="each run starts no epoch it would not finish within SECONDS of wall time; a run "
                    "stopped so is labelled time-limited (never counted as reproduced) and is trained again "
                    "by a later repro without --time-limit")
    rp.add_argument("--rows", action="append", metavar="TEXT",
                    help="run only the rows whose label contains TEXT (repeat for several; =TEXT: the row "
                    "labelled TEXT exactly, not the rows whose labels contain it); the table's other rows are kept "
                    "where DIR/runs has their runs, and nothing is trained for them")
    rp.add_argument("--results", help="the records folder: every run's record and every table's rows are written "
                    "there and reused from there (default: the checkout's results/; --tiny writes none unless given)")
    rp.add_argument("--render", action="store_true", help="write REPRODUCTION.md from the records alone (--results) "
                    "to --out FILE, or print it")
    rp.add_argument("--tiny", action="store_true", help="every run on a tiny slice for 1 epoch (smoke test)")
    rp.add_argument("--quiet", action="store_true")
    rp.set_defaults(func=cmd_repro)
