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
pre { background: #f7fafc; padding: 8px; overflow-x: auto; font-size: 0.85em; }
.note { color: #4a5568; font-style: italic; } .skipped { color: #975a16; }
nav { font-size: 0.92em; margin-bottom: 1em; } h3 { font-size: 1.05em; margin-top: 1.4em; }
td.text { text-align: left; } .sample { border-top: 1px dashed #e2e8f0; } .sentence { font-size: 1.05em; }
"""


class Raw(str):
    """Markup written by this package, passed through unescaped. Every other string that
    reaches the page is escaped, so text from data (a token such as "<td>" or "<script>")
    always shows as text, whatever it starts with."""


def raw(markup: str) -> Raw:
    return Raw(markup)


def esc(x) -> str:
    return x if isinstance(x, Raw) else html.escape(str(x))


def score_cell(v: float) -> Raw:
    return Raw(f'<td class="{"pos" if v >= 0 else "neg"}">{v:+.2f}</td>')


def cell(text, cls: str | None = None) -> Raw:
    """One <td> with escaped text and an optional class."""
    attr = f' class="{esc(cls)}"' if cls else ""
    return Raw(f"<td{attr}>{esc(text)}</td>")


def table(header: list[str], rows: list[list], attrs: str = "") -> str:
    """rows hold ready cells (Raw, e.g. from score_cell or cell) or values shown as text
    (escaped); header entries are escaped unless Raw."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    body = "".join(
        "<tr>" + "".join(c if isinstance(c, Raw) else f"<td>{esc(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table{attrs}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def figure(png: str | Path, caption: str) -> str:
    data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
    return (f'<figure><img alt="{esc(caption)}" src="data:image/png;base64,{data}">'
            f"<figcaption>{esc(caption)}</figcaption></figure>")


def page(title: str, sections: list[str]) -> str:
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{esc(title)}</title>"
            f"<style>{_CSS}</style></head><body><h1>{esc(title)}</h1>{''.join(sections)}</body></html>")
