"""The shipped reproduction tables count each of a paper's rows once."""
from __future__ import annotations

import json
from collections import defaultdict

from rnnlens.repro import load_tables


def _judged(table, row) -> bool:
    """Whether the row's lines get a verdict: a paper number, or a criterion of its own."""
    rows = (table.tolerance or {}).get("rows") or []
    return row.paper is not None or bool(row.extra.get("tolerance")) or row.label in rows


def test_every_paper_row_is_counted_once():
    """Two readings of one paper row (with and without a setting the paper leaves open, the
    authors' code against the paper's text, a procedure added after the paper's) may both be
    shown, but only one of them is the paper's row: every other one is an ablation, so that
    the summary's reproduced share counts each of the paper's numbers once."""
    for table in load_tables().values():
        groups = defaultdict(list)
        for row in table.rows:
            if row.config is None or row.extra.get("ablation") or not _judged(table, row):
                continue
            x = row.extra
            key = (x.get("model") or row.label, row.dataset, x.get("variant"), json.dumps(row.paper, sort_keys=True),
                   x.get("figure"), x.get("eval"), x.get("testset"))
            groups[key].append(row.label)
        twice = {k: v for k, v in groups.items() if len(v) > 1}
        assert not twice, f"{table.id}: one paper row counted by several rows: {list(twice.values())}"


def test_timings_fold_the_cpu_runs_of_the_records_per_budget(tmp_path):
    """`python -m rnnlens.repro.timings` measures each table from the run records alone: the
    distinct CPU runs its rows read, per budget; a row with a run on a GPU is left out."""
    from rnnlens.repro.records import write_table
    from rnnlens.repro.timings import collect

    def run(name, seconds, device):
        d = tmp_path / "runs" / name
        d.mkdir(parents=True)
        (d / "record.json").write_text(json.dumps({"run": name, "seconds": seconds, "device": device,
                                                   "test": {"split": "test"}}))

    run("a-seed0", 60.0, "cpu")
    run("a-seed1", 90.0, "cpu")
    run("b-seed0", 30.0, "cuda (NVIDIA H100)")
    rows = [{"label": "GRU Standard", "status": "ok", "budget_name": "full", "runs": ["a-seed0", "a-seed1"]},
            {"label": "GRU Approx", "status": "ok", "budget_name": "full", "runs": ["a-seed0"]},     # reused: once
            {"label": "GRU Simplified", "status": "ok", "budget_name": "full", "runs": ["b-seed0"]},  # a GPU run
            {"label": "LSTM Standard", "status": "missing data", "budget_name": "", "runs": []}]
    write_table(tmp_path, "seqlevel-table2", {"table": "seqlevel-table2", "rows": rows})
    n = len(load_tables()["seqlevel-table2"].rows)
    assert collect(tmp_path) == {"seqlevel-table2": {"full": 150.0, "full_rows": f"2 of {n}"}}
