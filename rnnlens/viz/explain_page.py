"""One self-contained HTML page of many sentences' explanations (from
rnnlens.app.explain_lines records): each token highlighted by its share of the n-gram total,
blue toward the predicted label and red against it (the colours of `rnnlens report`), on
one scale for the whole page, with the sentence's top n-grams beside it."""
from __future__ import annotations

from .report import Raw, esc, page, table

BLUE, RED = (43, 108, 176), (197, 48, 48)      # .pos and .neg of the report's stylesheet


def _token(tok: str, share: float, scale: float) -> str:
    a = min(1.0, abs(share) / scale) if scale > 0 else 0.0
    r, g, b = BLUE if share >= 0 else RED
    return (f'<span class="tok" style="background: rgba({r},{g},{b},{0.85 * a:.3f})" '
            f'title="{share:+.3f}">{esc(tok)}</span>')


def lines_page(records: list[dict], model: str) -> str:
    shares = [abs(s) for r in records for s in r.get("token_shares", [])]
    scale = max(shares, default=0.0)
    legend = (f"<p class='note'>Each token's share of the n-gram total (every n-gram's contribution shared "
              f"equally among its tokens), toward the sentence's predicted label: "
              f"{_token('toward', scale, scale)} {_token('against', -scale, scale)}; full colour at "
              f"{scale:.3f}, the largest share on this page. Hover a token for its number.</p>")
    rows = []
    for r in records:
        if r.get("error"):
            rows.append([r["line"], Raw(f"<td class='text'>{esc(r['text'])}</td>"), r["error"], "", ""])
            continue
        sent = " ".join(_token(t, s, scale) for t, s in zip(r["tokens"], r["token_shares"]))
        probs = r.get("probabilities") or {}
        label = r["prediction"] + (f" ({probs[r['prediction']]:.2f})" if r["prediction"] in probs else "")
        grams = "<br>".join(f"{esc(g['text'])} <span class='{'pos' if g['score'] >= 0 else 'neg'}'>"
                            f"{g['score']:+.2f}</span>" for g in r["ngrams"])
        rows.append([r["line"], Raw(f"<td class='text sentence'>{sent}</td>"), label,
                     Raw(f"<td class='text'>{grams}</td>"),
                     f"{r['output']:+.2f} = {r['offset']:+.2f} + {r['ngram_total']:+.2f} + {r['remainder']:+.2f}"])
    style = ("<style>.tok{padding:1px 2px;border-radius:3px} td.text{max-width:480px}</style>")
    body = table(["line", "sentence", "predicted", "top n-grams (toward the prediction)",
                  "output = offset + n-grams + remainder"], rows)
    explained = records[0].get("explained", "") if records and not records[0].get("error") else ""
    exact = any(r.get("linearised_at") == "the true states" for r in records)
    view = ("Exact view: each step linearised at the true states (no remainder; each n-gram's contribution "
            "depends on its context)." if exact else "First-order view: each step linearised at the zero state.")
    head = (f"<p>Model <code>{esc(model)}</code>; {len(records)} sentences. {esc(explained and 'First: ' + explained)}"
            f" {esc(view)}</p>")
    return page("n-gram explanations", [Raw(style), head, legend, body])
