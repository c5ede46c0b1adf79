"""Maintainer tool: fold the training times of the committed run records into timings.json
(package data), which `rnnlens repro --list` shows.

    python -m rnnlens.repro.timings [RESULTS_DIR]     # default: the checkout's results/

Per table and budget: the training time of the distinct runs its rows read (a tuned row's
search trials included; a run reused from another table counts its own training time again:
what the table costs from scratch), from each run's record ("seconds"), and how many of the
table's rows were run at that budget. Every table is measured again from the records; a table
without records keeps what timings.json had.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..outfiles import json_text
from . import load_tables
from .records import read_run, read_tables

HERE = Path(__file__).with_name("timings.json")


def _row_runs(row: dict) -> list[str]:
    names = list(row.get("runs") or [])
    for trial in (row.get("search") or {}).get("trials") or []:
        if trial.get("run"):
            names.append(trial["run"])
    return names


def collect(results: Path) -> dict:
    """{table: {budget: seconds, budget + "_rows": "k of n"}} from the records under `results`."""
    out: dict = {}
    tables = load_tables()
    for tid, rec in read_tables(results).items():
        if tid not in tables:
            continue
        seconds: dict[str, dict[str, float]] = {}
        rows: dict[str, int] = {}
        for row in rec.get("rows") or []:
            budget = row.get("budget_name")
            names = _row_runs(row)
            if row.get("status") != "ok" or not budget or budget == "tiny" or not names:
                continue
            runs = {name: read_run(results, name) for name in names}
            if not all(r is not None and r.get("device") == "cpu" and isinstance(r.get("seconds"), (int, float))
                       for r in runs.values()):
                continue                      # a run on a GPU, or one without a time: not a CPU figure
            rows[budget] = rows.get(budget, 0) + 1
            for name, run in runs.items():
                seconds.setdefault(budget, {})[name] = float(run["seconds"])
        if not rows:
            continue
        entry = out[tid] = {}
        for budget, k in rows.items():
            entry[budget] = round(sum(seconds.get(budget, {}).values()), 1)
            entry[f"{budget}_rows"] = f"{k} of {len(tables[tid].rows)}"
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    results = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "results"
    if not (results / "tables").is_dir():
        print(f"rnnlens: error: {results} holds no tables/ of run records", file=sys.stderr)
        return 2
    HERE.write_text(json_text(collect(results), indent=2, sort_keys=True) + "\n", encoding="utf-8")
    print(f"wrote {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
