"""The table of a reproduction run as markdown, HTML and JSON: the paper's number beside
ours (mean and std over seeds), the difference, the tolerance check, the budget and the
data used. Rows whose values are dicts (error by attractors, by length, ...) become one
line per key."""
from __future__ import annotations

import html
import math
from datetime import datetime, timezone

from ..outfiles import json_text
from . import Table
from .records import values_out
from .run import ABOVE, Context, RowResult, mean_std, tolerance_for, within


def format_value(v, digits: int = 2) -> str:
    if v is None:
        return "--"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if abs(v) >= 1e-3 or v == 0 else f"{v:.2e}"
    return str(v)


def _diff(mean, paper):
    """ours - paper, with float rounding left out (a mean equal to the paper's gives 0, not
    1e-14 printed as such)."""
    return None if mean is None or paper is None else round(mean - paper, 9)


def lines_of(table: Table, results: list[RowResult]) -> list[dict]:
    """One dict per printed line: label, dataset, paper, mean, std, n, diff, ok, budget, data,
    note, status; then a line per check a pipeline made (e.g. "no upward trend")."""
    out = []
    digits = int(table.metric.get("digits", 3 if table.metric.get("unit") == "fraction" else 2))
    means = {r.row.label: mean_std(r.values)[0] for r in results
             if not any(isinstance(v, dict) for v in r.values)}
    for r in results:
        row = r.row
        ref = means.get(tolerance_for(table, row).get("relative_to"))
        base = {"row_id": id(r), "label": row.label, "dataset": row.dataset, "budget": r.budget, "data": r.data_used,
                "note": "; ".join(x for x in (r.note or row.note,) if x), "status": r.status, "digits": digits}
        dict_valued = isinstance(row.paper, dict) or any(isinstance(v, dict) for v in r.values)
        if not dict_valued:
            mean, std = mean_std(r.values)
            paper = row.paper if isinstance(row.paper, (int, float)) else None
            line = {**base, "paper": paper, "mean": mean, "std": std, "n": len(r.values),
                    "diff": _diff(mean, paper), "ok": within(table, row, paper, mean, ref)}
            lost = [v for v in r.values if isinstance(v, float) and not math.isfinite(v)]
            if r.values and len(lost) == len(r.values):     # every seed's metric is nan or inf: it diverged
                line.update(ok=False if paper is not None else None,
                            ours_text=f"diverged ({', '.join(sorted({str(v) for v in lost}))})")
            elif lost:                                      # the mean is of the seeds that did not
                line["lost"] = len(lost)
            out.append(line)
            out += _check_lines(base, r)
            continue
        keys = list(row.paper) if isinstance(row.paper, dict) else []
        for v in r.values:
            if isinstance(v, dict):
                keys += [k for k in v if k not in keys]
        for k in keys:
            paper = row.paper.get(k) if isinstance(row.paper, dict) else None
            vals = [v.get(k) for v in r.values if isinstance(v, dict) and v.get(k) is not None]
            mean, std = mean_std(vals)
            out.append({**base, "label": f"{row.label} / {k}", "paper": paper, "mean": mean, "std": std,
                        "n": len(vals), "diff": _diff(mean, paper),
                        "ok": within(table, row, paper, mean, ref)})
        out += _check_lines(base, r)
    first = None
    for line in out:                    # budget, data and note once per row, on its first line
        if line["row_id"] == first:
            line.update(budget="", data="", note="")
        first = line["row_id"]
    return out


def _check_lines(base: dict, r: RowResult) -> list[dict]:
    return [{**base, "label": f"{r.check_prefix or r.row.label}: {text}", "paper": None, "mean": None, "std": None, "n": 0,
             "diff": None, "ok": ok, "ours_text": ours} for text, ours, ok in r.checks]


def format_ours(line) -> str:
    if line.get("ours_text") is not None:
        return line["ours_text"]
    if line["status"] != "ok":
        return line["status"]
    s = format_value(line["mean"], line["digits"])
    if line["std"] is not None:
        s += f" ± {format_value(line['std'], line['digits'])}"
    if line.get("lost"):
        return s + f" (n={line['n'] - line['lost']}; {line['lost']} of {line['n']} diverged)"
    return s + (f" (n={line['n']})" if line["n"] > 1 else "")


def _ok(line) -> str:
    """The verdict column: yes, no, empty (no criterion), or "above the paper" (better than
    the paper by more than the tolerance: flagged, not passed; rnnlens.repro.run.ABOVE)."""
    return {True: "yes", False: "no", None: "", ABOVE: "above the paper"}[line["ok"]]


def header(table: Table, ctx: Context) -> list[str]:
    m = table.metric
    unit = f" ({m.get('unit')})" if m.get("unit") else ""
    tol = table.tolerance or {}
    tol_text = tol.get("criterion") or ", ".join(
        f"{k} {v}" for k, v in tol.items() if k not in ("source", "rows", "side") and v is not None)
    if tol.get("rows") and not tol.get("criterion"):
        tol_text += f" (rows {', '.join(tol['rows'])})"
    if tol.get("side") == "below":
        tol_text += " (only a shortfall counts)"
    if tol.get("source"):
        tol_text += f" -- {tol['source']}"
    return [f"paper: {table.paper}, {table.source}", f"metric: {m.get('name', m.get('key', ''))}{unit}",
            f"tolerance: {tol_text or 'none set'}",
            f"budget: {'tiny (smoke test)' if ctx.tiny else ctx.budget}, seeds {ctx.seed0}..{ctx.seed0 + ctx.seeds - 1}",
            f"written {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"]


COLUMNS = ["row", "dataset", "paper", "ours", "ours - paper", "within tolerance", "budget", "data used", "note"]


def _cells(line) -> list[str]:
    return [line["label"], line["dataset"], format_value(line["paper"], line["digits"]), format_ours(line),
            format_value(line["diff"], line["digits"]), _ok(line), line["budget"], line["data"], line["note"]]


def markdown(table: Table, results: list[RowResult], ctx: Context) -> str:
    out = [f"# {table.id}: {table.title}", ""] + [f"- {h}" for h in header(table, ctx)]
    if table.pipeline:
        out += [f"- pipeline: {table.pipeline}"]
    out += ["", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for line in lines_of(table, results):
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in _cells(line)) + " |")
    return "\n".join(out) + "\n"


def to_html(table: Table, results: list[RowResult], ctx: Context) -> str:
    e = html.escape
    rows = []
    for line in lines_of(table, results):
        cls = {True: "ok", False: "off", None: "", ABOVE: "off"}[line["ok"]]
        rows.append("<tr>" + "".join(f'<td class="{cls if i == 5 else ""}">{e(c)}</td>'
                                     for i, c in enumerate(_cells(line))) + "</tr>")
    items = "".join(f"<li>{e(h)}</li>" for h in header(table, ctx))
    if table.pipeline:
        items += f"<li>pipeline: {e(table.pipeline)}</li>"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{e(table.id)}</title>
<style>body{{font-family:sans-serif;margin:2em}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;text-align:left}}th{{background:#f3f3f3}}
td.ok{{background:#e3f6e3}}td.off{{background:#fbe3e3}}</style></head>
<body><h1>{e(table.id)}: {e(table.title)}</h1><ul>{items}</ul>
<table><tr>{''.join(f'<th>{e(c)}</th>' for c in COLUMNS)}</tr>
{chr(10).join(rows)}
</table></body></html>
"""


def to_json(table: Table, results: list[RowResult], ctx: Context) -> str:
    return json_text({"table": table.id, "paper": table.paper, "source": table.source, "budget": ctx.budget,
                       "tiny": ctx.tiny, "seeds": ctx.seeds, "metric": table.metric, "tolerance": table.tolerance,
                       "rows": [row_record(r) for r in results],
                       "lines": [{k: v for k, v in line.items() if k not in ("digits", "row_id")}
                                 for line in lines_of(table, results)]}, indent=2)


def row_record(r: RowResult) -> dict:
    """One row as the table records keep it (results/tables/<table>.json; rnnlens.repro.report
    reads it back): runs by folder name, no paths."""
    from pathlib import Path

    return {"label": r.row.label, "status": r.status, "values": values_out(r.values), "paper": r.row.paper,
            "budget": r.budget, "budget_name": r.budget_name, "data_used": r.data_used, "note": r.note,
            "checks": [list(c) for c in r.checks], "check_prefix": r.check_prefix,
            "seconds": round(r.seconds, 1), "runs": [Path(p).name for p in r.runs],
            **({"search": r.search} if r.search else {})}
