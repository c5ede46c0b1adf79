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
