"""REPRODUCTION.md from the records under results/ alone: `rnnlens repro --render`.

Every number comes from results/tables/<table>.json (what `rnnlens repro` computed) and the
run records it names (results/runs/); the papers' numbers and tolerances from the package's
tables; the text around them from results/notes/<table>.md where a note was written (prose:
the causes of a miss, what was tried; it cites records, not numbers of its own). Rendering
twice gives the same file, so a test can compare it with the committed REPRODUCTION.md.
"""
from __future__ import annotations

from pathlib import Path

from . import Row, Table, load_tables
from .records import RUNS, read_causes, read_run, read_tables, values_in
from .render import format_ours, format_value, lines_of
from .run import ABOVE, RowResult

PAPERS = {
    "implicit-ngrams-induced-by-recurrence": "Implicit n-grams induced by recurrence (Sun & Lu)",
    "gru-lstm-sequence-level-features": "Sequence-level features of GRUs and LSTMs (Sun & Lu)",
    "rational-recurrences": "Rational recurrences (Peng, Schwartz, Thomson & Smith)",
    "unitary-recurrent-networks": "Unitary recurrent networks (Bernardy & Lappin)",
    "recurrent-memory-networks": "Recurrent memory networks (Tran, Bisazza & Monz)",
}

INTRO = """# Reproduction

Written by `rnnlens repro --render` from the records under `results/` alone (do not edit it
by hand: change the records, or rerun the rows, and render again). Each table section names
the command that computed it; `results/tables/TABLE.json` holds its rows and the runs each
row read, and `results/runs/RUN/` each run's record (resolved config, command, versions,
commit, device, threads, seed, budget, wall time, test metrics) and its `metrics.jsonl`.

- Budgets: `full` is the paper's setting (each config as written); `quick` caps epochs and
  examples (the config's `budgets.quick`) so that a run takes minutes on a CPU;
  `time-limited` is the paper's setting stopped by a wall-clock limit (`--time-limit`, a GPU
  lease's minutes) before its last epoch, the epochs it finished named. Every row names its
  budget, and neither a quick nor a time-limited row is ever counted as reproduced.
- Verdicts, from each table's tolerance (accuracy and F1: within 1.5 points of the paper;
  perplexity: within 10%; a paper's own criterion where it states one): **reproduced** (full
  budget, within), **within (quick)** and **within (time-limited)** (a shorter budget that
  lands within), **missed** (worse by more than the tolerance), **above the paper** (better
  by more than the tolerance: flagged for a look, not passed), and orderings the paper states, checked on our own numbers.
- An **ablation** row changes one thing of the paper's setting on purpose (its note says
  what: without the paper's spectral normalisation, without its pre-trained vectors, ...). It
  is shown beside the paper's number with where it lands, and counted apart: it is not the
  paper's row, so it is neither reproduced nor missed.
- A **tuned** row follows a paper that tunes each model by random search: its config is
  trained at each of the table's draws of the paper's search space (the same draws for
  every model, each a recorded run), and its seeds run at the trial with the best dev score;
  its note gives that trial's setting, and the table's search figure shows every trial.
- A dataset a paper used that is not in the shared data gives a row marked "missing data",
  never a substitute. `rnnlens repro --list` shows every table and what it needs.
"""

VERDICT = {"reproduced": "reproduced", "within-quick": "within (quick)", "missed": "missed",
           "above": "above the paper", "": ""}
# an ablation row's verdict: where it lands against the paper, counted apart (Row.extra["ablation"])
ABLATION = {"reproduced": "ablation: within", "within-quick": "ablation: within (quick)",
            "missed": "ablation: worse", "above": "ablation: better", "": ""}


def _shown(text: str, limited: bool) -> str:
    """A verdict's text, "(quick)" read as "(time-limited)" for a row whose runs were cut short."""
    return text.replace("(quick)", "(time-limited)") if limited else text


def _verdict(ok, budget_name: str) -> str:
    if ok is True:
        return "reproduced" if budget_name == "full" else "within-quick"
    if ok is False:
        return "missed"
    if ok == ABOVE:
        return "above"
    return ""


def _result_of(table: Table, row: Row, rec: dict) -> RowResult:
    return RowResult(row, status=rec.get("status", "ok"), values=values_in(list(rec.get("values") or [])),
                     budget=rec.get("budget", ""), data_used=rec.get("data_used", ""), note=rec.get("note", ""),
                     checks=[tuple(c) for c in rec.get("checks") or []], check_prefix=rec.get("check_prefix"),
                     runs={r: 0.0 for r in rec.get("runs") or []}, budget_name=rec.get("budget_name", ""),
                     search=rec.get("search"))


def config_changes(record: dict, configs: Path | None) -> list[str]:
    """'section.key (then -> now)' for every setting in which the config file a run was
    trained from (record["config_file"], looked up by name in `configs`, at the run's budget
    and seed) now differs from what the run recorded, leaving out what --resume may change,
    the data folder and the folder the word vectors were written to. [] when nothing changed,
    or when the file or the record cannot tell (no configs folder, a run not made from a
    config file, a file that no longer loads). What the run changed on purpose (its
    record's "overrides": a row's overrides, a search trial's setting) is not a change."""
    from ..config import load_config_file
    from .run import run_differences

    saved, name = record.get("config"), record.get("config_file")
    if configs is None or not isinstance(saved, dict) or not isinstance(name, str) or not name.endswith(".json"):
        return []
    path = configs / Path(name).name
    try:
        now = load_config_file(path, None if record.get("budget") in (None, "full") else record["budget"]).to_dict()
    except Exception:                   # a missing or broken file: nothing to compare with
        return []
    now["train"]["seed"] = record.get("seed", now["train"]["seed"])
    for section, values in (record.get("overrides") or {}).items():      # what the run changed on purpose
        if isinstance(values, dict) and isinstance(now.get(section), dict):
            now[section].update(values)
    if (saved.get("train") or {}).get("init_from"):
        now["train"]["init_from"] = saved["train"]["init_from"]     # the first phase's run folder
    return run_differences(saved, now)


def table_results(table: Table, rec: dict) -> list[RowResult]:
    """The recorded rows of `table`, in the table's order (rows it no longer has are dropped)."""
    by_label = {r["label"]: r for r in rec.get("rows") or []}
    return [_result_of(table, row, by_label[row.label]) for row in table.rows if row.label in by_label]


def ordering_checks(table: Table, results: list[RowResult]) -> list[tuple[str, str, bool | None]]:
    """The table's stated orderings (tolerance "order": [[a, "<", b], ...]) on our means."""
    from .run import mean_std

    means = {r.row.label: mean_std(r.values)[0] for r in results if r.status == "ok"}
    out = []
    for a, op, b in (table.tolerance or {}).get("order") or []:
        x, y = means.get(a), means.get(b)
        if x is None or y is None:
            out.append((f"{a} {op} {b}", "not both run", None))
            continue
        ok = x < y if op == "<" else x > y
        out.append((f"{a} {op} {b}", f"{x:.2f} {op if ok else ('>=' if op == '<' else '<=')} {y:.2f}", ok))
    return out


def _tolerance_text(table: Table) -> str:
    tol = table.tolerance or {}
    text = tol.get("criterion") or tol.get("source") or ""
    if not text:
        text = ", ".join(f"{k} {v}" for k, v in tol.items() if k not in ("rows", "side", "order") and v is not None)
    return text or "none set"


OUTSIDE = ("missed", "above")
FIGURES = "figures"            # results/figures/<table>.png, drawn by write_figures


def _numeric(key) -> bool:
    try:
        float(key)
    except (TypeError, ValueError):
        return False
    return True


def figure_data(table: Table, results: list[RowResult]) -> dict | None:
    """What the table's figure draws, from its recorded rows: {"kind": "gap", "rows": [...],
    "band", "relative"} for the lines with both the paper's number and ours; {"kind":
    "curves", "series", "bound", "xlabel"} for rows valued per attractor count or length;
    None when there is neither."""
    from .run import mean_std, tolerance_for

    series, bound = {}, None
    for r in results:
        dicts = [v for v in r.values if isinstance(v, dict)]
        if r.status != "ok" or not dicts or not all(_numeric(k) for d in dicts for k in d):
            continue
        keys = sorted({k for d in dicts for k in d}, key=float)
        series[r.row.label] = {k: mean_std([d[k] for d in dicts if d.get(k) is not None])[0] for k in keys}
        bound = tolerance_for(table, r.row).get("max", bound)
    if series:
        xlabel = "attractors" if "attractor" in table.kind else ("length" if "length" in table.kind else "")
        return {"kind": "curves", "series": series, "bound": bound, "xlabel": xlabel}
    budget_of = {id(r): r.budget_name for r in results}
    rows = [{"label": line["label"], "diff": line["diff"], "std": line["std"], "paper": line["paper"],
             "verdict": _verdict(line["ok"], budget_of[line["row_id"]])}
            for line in lines_of(table, results) if line["diff"] is not None]
    if not rows:
        return None
    tol = table.tolerance or {}
    relative = tol.get("rel") is not None
    band = tol["rel"] * 100 if relative else tol.get("abs")
    m = table.metric
    unit = "points" if m.get("unit") == "%" else (m.get("name") or m.get("key") or "")
    return {"kind": "gap", "rows": rows, "band": band, "relative": relative, "unit": unit}


def search_data(table: Table, results: list[RowResult]) -> list[dict]:
    """The tuned rows' searches, for search_plot: each trial's dev score, the chosen one, the
    row's test mean and the paper's number, on the table's scale. [] when no row is tuned."""
    from .run import mean_std

    scale = table.metric.get("scale", 1)
    out = []
    for r in results:
        trials = (r.search or {}).get("trials") or []
        if r.status != "ok" or not trials:
            continue
        order = [t["trial"] for t in trials]
        out.append({"label": r.row.label, "trials": [t["dev"] * scale for t in trials],
                    "best": order.index(r.search["best"]), "test": mean_std(r.values)[0],
                    "paper": r.row.paper if isinstance(r.row.paper, (int, float)) else None})
    return out


def write_figures(results_dir: Path, out_dir: Path) -> list[Path]:
    """Draw each recorded table's figure (figure_data) into out_dir/<table>.png, and its tuned
    rows' searches (search_data) into out_dir/<table>-search.png; remove the figures a table
    has none of now."""
    from ..viz.repro_plots import curve_plot, gap_plot, search_plot

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    recs = read_tables(results_dir)
    for tid, table in load_tables().items():
        if tid not in recs:
            continue
        results = table_results(table, recs[tid])
        tuned = search_data(table, results)
        if tuned:
            path = out_dir / f"{tid}-search.png"
            m = table.metric
            search_plot(tuned, path, f"{tid}: the random search of its tuned rows",
                        xlabel=f"{m.get('name', 'score')}{' (%)' if m.get('unit') == '%' else ''}")
            written.append(path)
        data = figure_data(table, results)
        if data is None:
            continue
        path = out_dir / f"{tid}.png"
        title = f"{tid}: ours against the paper"
        if data["kind"] == "gap":
            gap_plot(data["rows"], path, title, band=data["band"], relative=data["relative"], unit=data["unit"])
        else:
            m = table.metric
            curve_plot(data["series"], path, f"{tid}: {m.get('name', '')}", xlabel=data["xlabel"],
                       ylabel=m.get("name", ""), bound=data["bound"])
        written.append(path)
    for stale in out_dir.glob("*.png"):          # a table that no longer has a figure
        if stale not in written and stale.stem.removesuffix("-search") in load_tables():
            stale.unlink()
    return written


def table_markdown(table: Table, rec: dict, results_dir: Path,
                   causes: dict[str, str] | None = None, figures: str | None = None,
                   configs: Path | None = None, stale: list[str] | None = None) -> tuple[str, list[str], int]:
    """(the table's section, the verdict of each of its result lines, how many of the lines
    outside the tolerance have a cause named). causes: {row label: cause} (read_causes), put
    in the note of each line outside its tolerance; a row within has none shown. configs:
    the configs folder; a row whose runs' config files have changed since they ran says so
    in its note (config_changes) and is appended to `stale`."""
    causes = causes or {}
    named = 0
    results = table_results(table, rec)
    budget_of = {r.row.label: r.budget_name for r in results}
    out = [f"### {table.id}: {table.title}", ""]
    if rec.get("command"):
        out += ["```bash", rec["command"], "```", ""]
    m = table.metric
    unit = f" ({m.get('unit')})" if m.get("unit") else ""
    out += [f"- paper: {table.paper}, {table.source}", f"- metric: {m.get('name', m.get('key', ''))}{unit}",
            f"- tolerance: {_tolerance_text(table)}"]
    if table.pipeline:
        out.append(f"- pipeline: {table.pipeline}")
    if figures is not None and figure_data(table, results) is not None:
        out += ["", f"![{table.id}: ours against the paper]({figures}/{table.id}.png)"]
    if figures is not None and search_data(table, results):
        out += ["", f"![{table.id}: the random search of its tuned rows]({figures}/{table.id}-search.png)"]
    out += ["", "| row | dataset | paper | ours | ours - paper | verdict | budget | data used | runs | note |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    verdicts = []
    by_id = {id(r): r for r in results}
    seen = set()
    for line in lines_of(table, results):
        res = by_id[line["row_id"]]
        bname = res.budget_name
        v = _verdict(line["ok"], bname)
        ablation = bool(res.row.extra.get("ablation"))
        if v:
            verdicts.append("ablation" if ablation else v)
        budget, runs = line["budget"], ""
        first = line["row_id"] not in seen
        if first:                                    # budget and runs once per row, on its first line
            seen.add(line["row_id"])
            budget = f"{bname}: {budget}" if bname and budget else (budget or bname)
            records = {n: read_run(results_dir, n) for n in res.runs}
            runs = ", ".join(f"`{n}`" if rec is not None else f"`{n}` (no record)" for n, rec in records.items())
            trials = [t["run"] for t in (res.search or {}).get("trials") or []]
            if trials:                               # a tuned row: its search's runs, recorded too
                gone = [n for n in trials if read_run(results_dir, n) is None]
                runs += (f"; searched over {len(trials)} trials, `{trials[0]}` to `{trials[-1]}`"
                         + (f" ({len(gone)} without a record)" if gone else ""))
            records.update({n: read_run(results_dir, n) for n in trials})
            changed = sorted({c for rec in records.values() for c in config_changes(rec or {}, configs)})
            if changed and stale is not None:
                stale.append(f"{table.id}: {res.row.label}")
        else:
            changed = []
        note = line["note"]
        if changed:
            note = (f"**config changed since this run:** {', '.join(changed)}; the row stands as it was run "
                    "until it is run again" + (f"; {note}" if note else ""))
        if ablation and first:
            note = f"**ablation:** {res.row.extra['ablation']}" + (f"; {note}" if note else "")
        if v in OUTSIDE and causes.get(res.row.label):
            named += not ablation
            note = f"**why:** {causes[res.row.label]}" + (f"; {note}" if note else "")
        shown = _shown((ABLATION if ablation else VERDICT)[v], bname == "time-limited")
        cells = [line["label"], line["dataset"], format_value(line["paper"], line["digits"]), format_ours(line),
                 format_value(line["diff"], line["digits"]), shown, budget,
                 line["data"], runs, note]
        out.append("| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |")
    for what, ours, ok in ordering_checks(table, results):
        v = "reproduced" if ok and all(budget_of.get(x) == "full" for x in what.split(" < ")) else \
            ("within-quick" if ok else ("missed" if ok is False else ""))
        verdicts.append(v)
        why = causes.get(f"ordering: {what}") if v in OUTSIDE else None
        named += bool(why)
        note = f"**why:** {why}; the paper's ordering" if why else "the paper's ordering"
        shown = _shown(VERDICT[v], any(budget_of.get(x) == "time-limited" for x in what.split(" < ")))
        out.append(f"| ordering: {what} | | | {ours} | | {shown} | | | | {note} |")
    recorded = {r.row.label for r in results}
    unrun = [row.label for row in table.rows if row.label not in recorded]
    if unrun:
        out += ["", f"Not run yet (no record): {'; '.join(unrun)}."]
    note = results_dir / "notes" / f"{table.id}.md"
    if note.is_file():
        out += ["", note.read_text(encoding="utf-8").strip()]
    return "\n".join(out) + "\n", verdicts, named


def _totals(totals: dict) -> list[str]:
    """The summary's closing lines: the share of lines reproduced, apart for the tables run at
    the papers' budgets on a CPU and for the language-model tables (whose budgets need a GPU)."""
    out = []
    for lm, what in ((False, "Tables run at the papers' budgets on a CPU (every table but the language-model ones)"),
                     (True, "Language-model tables (most of their papers' budgets need a GPU)")):
        done, shorter, lines = totals[lm]
        if lines:
            within = f"; {shorter} more within the tolerance at a shorter budget" if shorter else ""
            out.append(f"- {what}: {done} of {lines} lines reproduced ({100 * done / lines:.1f}%){within}.")
    return out + [""] if out else []


def render(results_dir: Path, figures: str | None = "results/figures", configs: Path | None = None) -> str:
    """REPRODUCTION.md from results_dir (see the module docstring). figures: the link to the
    folder write_figures draws into, relative to where the file is written (None: no figures).
    configs: the configs folder the runs' config files are compared with (config_changes);
    None: no comparison."""
    tables = load_tables()
    recs = read_tables(results_dir)
    causes = read_causes(results_dir)
    sections: dict[str, list[str]] = {}
    summary, stale = [], []
    totals = {False: [0, 0, 0], True: [0, 0, 0]}    # language_model -> [reproduced, within-quick, lines]
    for tid, table in tables.items():
        if tid not in recs:
            continue
        text, verdicts, named = table_markdown(table, recs[tid], results_dir, causes.get(tid), figures, configs, stale)
        sections.setdefault(table.paper, []).append(text)
        count = {k: verdicts.count(k) for k in ("reproduced", "within-quick", "missed", "above", "ablation")}
        total = totals[table.language_model]
        total[0] += count["reproduced"]
        total[1] += count["within-quick"]
        total[2] += count["reproduced"] + count["within-quick"] + count["missed"] + count["above"]
        labels = {r.label for r in table.rows}        # (a recorded row the table no longer has is not shown)
        shown = sum(1 for r in recs[tid].get("rows") or [] if r.get("status") == "ok" and r.get("label") in labels)
        summary.append(f"| {tid} | {shown} of {len(table.rows)} | {count['reproduced']} | {count['within-quick']} | "
                       f"{count['missed']} | {count['above']} | {named} of {count['missed'] + count['above']} | "
                       f"{count['ablation']} |")
    runs = sorted(p.name for p in (results_dir / RUNS).iterdir()) if (results_dir / RUNS).is_dir() else []
    out = [INTRO, "## Summary", "",
           f"{len(recs)} tables with results, from {len(runs)} recorded runs. Counts are of result lines "
           "(a row with numbers per attractor count or per length has one line each) and stated orderings. "
           "A line outside its tolerance (missed, or above the paper) says why in its note where the cause "
           "is known (results/notes/causes.json, citing the evidence); \"why named\" counts those. "
           "Ablation lines (the paper's setting with one thing changed on purpose) are counted apart, and "
           "so each of a paper's numbers is counted once: where several rows read one paper row (the "
           "authors' code against the paper's text, a setting the paper leaves open, a tuned row beside "
           "the shared setting), one stands for it and the others are ablations.", "",
           "| table | rows with results | reproduced | within (quick or time-limited) | missed | above the paper | why named | ablations |",
           "|---|---|---|---|---|---|---|---|", *summary, "", *_totals(totals)]
    if stale:
        out += [f"{len(stale)} row{'s' if len(stale) > 1 else ''} ran under a config that has changed since "
                f"(its note says what changed; it stands as it was run until it is run again): "
                + "; ".join(stale) + ".", ""]
    for paper, texts in sections.items():
        out += [f"## {PAPERS.get(paper, paper)}", ""]
        for t in texts:
            out += [t]
    notes = results_dir / "notes" / "README.md"
    if notes.is_file():
        out += ["## Not run yet, and what stands in the way", "", notes.read_text(encoding="utf-8").strip(), ""]
    return "\n".join(out).rstrip() + "\n"
