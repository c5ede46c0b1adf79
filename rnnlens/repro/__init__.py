"""Reproduction of the five papers' tables: `rnnlens repro TABLE --out DIR`.

The papers' numbers live in tables/*.json (package data), one file per table or figure:
where it comes from, the metric, the tolerance it is held to, and its rows -- each with the
paper's value, the config in configs/ that reproduces it and the datasets it needs. `run`
trains each row's config (per seed, at a budget), reads the metric from the test record,
or runs the table's analysis (the `kind`), and writes DIR/<id>.md, .html and .json: the
paper's number beside ours (mean and std over seeds), the difference, the budget used and
the data actually used. A row whose data is absent is reported as missing, never replaced.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from ..errors import RnnlensError


@dataclass
class Row:
    label: str
    paper: object                      # a number, a dict of numbers (per attractor, ...) or None
    config: str | None = None
    dataset: str = ""
    data: list[str] = field(default_factory=list)
    note: str = ""
    key: str | None = None             # overrides the table's metric key
    scale: float | None = None
    extra: dict = field(default_factory=dict)


@dataclass
class Table:
    id: str
    paper: str
    source: str
    title: str
    kind: str
    pipeline: str
    metric: dict
    tolerance: dict | None
    rows: list[Row]
    search: dict | None = None         # the hyper-parameter search its "search" rows use (repro.search)
    language_model: bool = False       # a language-model table: its papers' budgets need a GPU

    @property
    def needs(self) -> list[str]:
        return sorted({d for r in self.rows for d in r.data})


_ROW_FIELDS = {"label", "paper", "config", "dataset", "data", "note", "key", "scale"}


def _table_from_dict(d: dict, where: str) -> Table:
    try:
        rows = []
        for r in d["rows"]:
            rows.append(Row(label=str(r["label"]), paper=r.get("paper"), config=r.get("config"),
                            dataset=r.get("dataset", "") or "", data=list(r.get("data") or []),
                            note=r.get("note", "") or "", key=r.get("key"), scale=r.get("scale"),
                            extra={k: v for k, v in r.items() if k not in _ROW_FIELDS}))
        table = Table(id=d["id"], paper=d["paper"], source=d.get("source", ""), title=d.get("title", ""),
                     kind=d.get("kind", "train"), pipeline=d.get("pipeline", ""), metric=dict(d.get("metric") or {}),
                     tolerance=d.get("tolerance"), rows=rows, search=d.get("search"),
                     language_model=bool(d.get("language_model", False)))
    except (KeyError, TypeError) as e:
        raise RnnlensError(f"{where}: malformed reproduction table ({e})") from None
    if table.search is not None or any(r.extra.get("search") for r in table.rows):
        from .search import check_search

        check_search(table, where)
    return table


def load_tables() -> dict[str, Table]:
    """Every table of tables/*.json, by id, in file-name order."""
    out = {}
    folder = resources.files(__name__) / "tables"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".json"):
            t = _table_from_dict(json.loads(entry.read_text(encoding="utf-8")), entry.name)
            out[t.id] = t
    return out


def get_table(name: str) -> Table:
    tables = load_tables()
    if name not in tables:
        raise RnnlensError(f"unknown table {name!r}; `rnnlens repro --list` shows them: {', '.join(tables)}")
    return tables[name]


def default_configs_dir() -> Path | None:
    """configs/ of the checkout this package runs from (an editable install), if there."""
    p = Path(__file__).resolve().parents[2] / "configs"
    return p if p.is_dir() else None
