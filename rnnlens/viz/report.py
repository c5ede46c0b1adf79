"""Self-contained HTML reports: tables plus figures embedded as base64 PNG."""
from __future__ import annotations

import base64
import html
from pathlib import Path

_CSS = """
body { font-family: system-ui, sans-serif; max-width: 980px; margin: 2em auto; color: #1a202c; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.92em; }
th, td { padding: 4px 10px; border-bottom: 1px solid #e2e8f0; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.pos { color: #2b6cb0; } .neg { color: #c53030; } .ok { color: #276749; } .bad { color: #c53030; }
img { max-width: 100%; height: auto; }
figure { margin: 1em 0; } figcaption { font-size: 0.9em; color: #4a5568; }
code { background: #f7fafc; padding: 1px 4px; }
"""


def esc(x) -> str:
    return html.escape(str(x))


def score_cell(v: float) -> str:
    return f'<td class="{"pos" if v >= 0 else "neg"}">{v:+.2f}</td>'


def table(header: list[str], rows: list[list[str]]) -> str:
    """rows hold ready HTML cells (<td>...</td>) or plain strings (escaped)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(c if c.startswith("<td") else f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(png: str | Path, caption: str) -> str:
    data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
    return (f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def page(title: str, sections: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>{''.join(sections)}</body></html>")
