"""Maintainer tool: fold the measured times of `rnnlens repro` outputs into timings.json
(package data), which `rnnlens repro --list` shows.

    python -m rnnlens.repro.timings OUT_DIR [OUT_DIR ...]

Per table and budget: the training time of the distinct runs its rows used (a run reused
from another table counts its own training time again: what the table costs from scratch)
and how many of the table's rows were run. Tiny (smoke) outputs are ignored.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from . import load_tables

HERE = Path(__file__).with_name("timings.json")


def collect(folders: list[Path], current: dict | None = None) -> dict:
    out = dict(current or {})
    tables = load_tables()
    for folder in folders:
        for f in sorted(Path(folder).glob("*.json")):
            try:
                d = json.loads(f.read_text(encoding="utf-8"))
            except ValueError:
                continue
            if not isinstance(d, dict) or d.get("tiny") or d.get("table") not in tables:
                continue
            ran = [r for r in d["rows"] if r["status"] == "ok"]
            if not ran:
                continue
            runs: dict = {}
            for r in ran:
                runs.update(r.get("runs") or {})
            entry = out.setdefault(d["table"], {})
            entry[d["budget"]] = round(sum(runs.values()), 1)
            entry[f"{d['budget']}_rows"] = f"{len(ran)} of {len(tables[d['table']].rows)}"
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        print(__doc__)
        return 2
    current = json.loads(HERE.read_text(encoding="utf-8")) if HERE.is_file() else {}
    HERE.write_text(json.dumps(collect([Path(a) for a in argv], current), indent=2, sort_keys=True) + "\n",
                    encoding="utf-8")
    print(f"wrote {HERE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
