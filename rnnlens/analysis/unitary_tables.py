"""The tables of `rnnlens unitary`: a trained URN's words and phrases read as the
unitary-networks paper reads them (Bernardy and Lappin, Sec. 11.5.2.2-11.5.3.1):

  average effect ||Q - I||^2 and signature of each item         Tables 11.2, 11.3, 11.5
  similarity of the items' main rotation planes                  Table 11.1 (Def. 11.6)
  projection of Q onto the prediction layer's d-dim subspace     Tables 11.3, 11.5
  Frobenius distances between the items                          Table 11.4
  matching pairs Q(close) Q(open) of a Dyck model                Table 11.2 (right half)

An item is a word or a phrase: one string, its words separated by spaces ("the keys").
For formal-language models (dyck, crossserial), whose symbols are single characters, a
piece that is not itself a vocabulary token is split into characters, so "()" is the
phrase ( ) and "<s>" stays the start symbol. Other models tokenize the item with the
model's own tokenizer, except a piece that is itself a vocabulary token ("<eos>"). A phrase
w_1 ... w_m is Q(w_m) ... Q(w_1) (phrase_embedding: the cell runs h_t = Q(x_t) h_{t-1}).

urn_tables returns a plain JSON-able dict; format_tables renders it as text.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..errors import RnnlensError
from .unitary import (Signature, average_effect, frobenius_table, phrase_embedding, plane_similarity,
                      projection, signature, word_matrices)

FORMAL_TASKS = ("dyck", "crossserial")
DEFAULT_WORDS = 20          # natural-language models: this many of the most frequent tokens


def check_urn(model, cell_name: str = "?") -> None:
    """RnnlensError unless the model's first cell is a URN."""
    from ..cells.unitary import URN

    cells = getattr(getattr(model, "encoder", None), "cells", None)
    if not cells or not isinstance(cells[0], URN):
        raise RnnlensError(f"unitary reads URN models (cell urn); this one has cell {cell_name!r}")


def item_tokens(item: str, vocab, task: str, tokenizer=None) -> list[str]:
    """The words of one item (see the module docstring). Unknown words raise RnnlensError."""
    text = item.strip()
    if not text:
        raise RnnlensError("an empty word or phrase was given")
    if task in FORMAL_TASKS:
        from ..data.formal import symbol_tokens

        tokens = symbol_tokens(text, vocab)
    else:
        # a piece that is itself a token of the vocabulary (<eos>, 's) is kept whole: the
        # tokenizer would split it, and default_items lists such tokens as they are
        tokens = []
        for piece in text.split():
            tokens.extend([piece] if piece in vocab or tokenizer is None else tokenizer(piece))
        if not tokens:
            raise RnnlensError(f"{item!r} has no words after tokenization")
    missing = list(dict.fromkeys(t for t in tokens if t not in vocab))
    if missing:
        raise RnnlensError(f"not in the model's vocabulary: {', '.join(missing)} (in {item!r})")
    return tokens


def default_items(vocab, task: str) -> list[str]:
    """Dyck: the 10 brackets (Table 11.2); cross-serial: a b c d; otherwise the
    DEFAULT_WORDS most frequent tokens (the vocabulary is sorted by frequency; Table 11.3)."""
    from ..data.formal import BRACKETS, CROSS_SYMBOLS
    from ..data.vocab import PAD, UNK

    if task == "dyck":
        return [s for pair in zip(*BRACKETS) for s in pair if s in vocab]
    if task == "crossserial":
        return [s for s in CROSS_SYMBOLS if s in vocab]
    return [t for t in vocab.itos if t not in (PAD, UNK)][:DEFAULT_WORDS]


def dyck_pairs(vocab) -> list[tuple[str, list[str]]]:
    """The matching pairs (name "()", words [open, close]) whose symbols are in vocab."""
    from ..data.formal import BRACKETS

    return [(o + c, [o, c]) for o, c in BRACKETS if o in vocab and c in vocab]


def _matrix_list(M: torch.Tensor) -> list[list[float]]:
    return [[round(float(v), 6) for v in row] for row in M]


def _describe(name: str, tokens: list[str], Q: torch.Tensor, P: torch.Tensor | None, dims: int) -> tuple[dict, Signature]:
    sig = signature(Q)
    return ({"name": name, "tokens": tokens, "average_effect": float(average_effect(Q)),
             "angles_degrees": sig.degrees, "fixed": sig.fixed, "reflections": sig.reflections,
             "projection": None if P is None else _matrix_list(projection(Q, P, dims))}, sig)


def _readout(model, hidden: int):
    """(P [m, n] float64, None) or (None, why not): the prediction layer acts on the URN's
    state only for one layer, one direction and a linear output layer."""
    cfg = getattr(model, "cfg", None)
    if cfg is not None and cfg.layers != 1:
        return None, f"the prediction layer reads layer {cfg.layers}, not the URN's state"
    if cfg is not None and cfg.bidirectional:
        return None, "the prediction layer reads both directions"
    try:
        P = model.readout_weight.detach().double().cpu()
    except (AttributeError, RnnlensError):
        return None, "the model has no linear prediction layer"
    if P.dim() != 2 or P.shape[1] != hidden:
        return None, f"the prediction layer has shape {tuple(P.shape)}, not [m, {hidden}]"
    return P, None


@torch.no_grad()
def urn_tables(model, vocab, items: Sequence[tuple[str, list[str]]],
               pairs: Sequence[tuple[str, list[str]]] | None = None, dims: int = 2) -> dict:
    """Everything `rnnlens unitary` shows, for items [(name, words)] (and matching pairs),
    as a JSON-able dict. Matrices are computed in the model's dtype, analysed in float64.
    dims: size of the prediction subspace (capped by the prediction layer's rank)."""
    if not items:
        raise RnnlensError("no words or phrases to analyse")
    if dims < 1:
        raise RnnlensError(f"--dims must be at least 1, got {dims}")
    pairs = list(pairs or [])
    cell = model.encoder.cells[0]
    n = cell.hidden_size
    words = list(dict.fromkeys(w for _, ws in [*items, *pairs] for w in ws))
    W = word_matrices(model, vocab=vocab, words=words).double().cpu()
    Qw = dict(zip(words, W))
    P, why = _readout(model, n)
    asked = dims
    if P is not None:
        rank = int(torch.linalg.matrix_rank(P))
        dims = min(dims, rank)
        if dims < 1:
            P, why = None, "the prediction layer is zero"

    def matrix(ws):
        return phrase_embedding([Qw[w] for w in ws])

    mats = [matrix(ws) for _, ws in items]
    rows, sigs = zip(*(_describe(name, list(ws), Q, P, dims) for (name, ws), Q in zip(items, mats)))
    names = [name for name, _ in items]
    k = len(items)
    main = [[None] * k for _ in range(k)]
    for i in range(k):
        for j in range(k):
            if len(sigs[i].angles) and len(sigs[j].angles):
                main[i][j] = round(float(plane_similarity(sigs[i].planes[0], sigs[j].planes[0])), 6)
    first_two = None
    if k >= 2:
        a, b = sigs[0], sigs[1]
        first_two = {"names": names[:2], "rows_degrees": a.degrees, "columns_degrees": b.degrees,
                     "values": [[round(float(plane_similarity(pa, pb)), 6) for pb in b.planes] for pa in a.planes]}
    fro = frobenius_table(torch.stack(mats), names, squared=True)
    res = {"cell": "urn", "hidden_size": n, "truncation": cell.truncation,
           "order": "a phrase w1..wm is Q(wm)...Q(w1) (h_t = Q(x_t) h_{t-1})",
           "projection": ({"dims": dims, "dims_asked": asked, "rows": int(P.shape[0]),
                           "basis": "top right singular vectors of the prediction layer's weight rows"}
                          if P is not None else {"dims": None, "why_not": why}),
           "items": list(rows),
           "plane_similarity": {"names": names, "values": main},
           "planes_of_first_two": first_two,
           "frobenius": {"names": names, "squared": True, "values": _matrix_list(fro.values)}}
    if pairs:
        prs = [_describe(name, list(ws), matrix(ws), P, dims)[0] for name, ws in pairs]
        res["pairs"] = prs
        res["pairs_mean_effect"] = sum(p["average_effect"] for p in prs) / len(prs)
    return res


# --- text ---------------------------------------------------------------------------------

def _proj_text(M) -> str:
    if M is None:
        return "-"
    return "[" + " ".join("[" + " ".join(f"{v:+.2f}" for v in row) + "]" for row in M) + "]"


def _angles_text(r: dict) -> str:
    parts = [f"{a:.1f}" for a in r["angles_degrees"]] or ["none"]
    extra = f" (+{r['reflections']} reflection)" if r["reflections"] else ""
    return " ".join(parts) + extra


def _item_table(rows: list[dict], head: str) -> list[str]:
    w = max(len(head), *(len(r["name"]) for r in rows))
    aw = max(len("angles (degrees)"), *(len(_angles_text(r)) for r in rows))
    out = [f"{head:<{w}}  {'effect':>8}  {'angles (degrees)':<{aw}}  projection"]
    for r in rows:
        out.append(f"{r['name']:<{w}}  {r['average_effect']:>8.4f}  {_angles_text(r):<{aw}}  {_proj_text(r['projection'])}")
    return out


def _square(names: list[str], values, fmt=lambda v: f"{v:.2f}", rows: list[str] | None = None) -> list[str]:
    rows = names if rows is None else rows
    w = max(len(x) for x in rows)
    cw = max(6, *(len(x) for x in names))
    out = [" " * w + "".join(f"  {x:>{cw}}" for x in names)]
    for name, vals in zip(rows, values):
        out.append(f"{name:<{w}}" + "".join(f"  {('-' if v is None else fmt(v)):>{cw}}" for v in vals))
    return out


def format_tables(res: dict, model: str = "") -> str:
    """The text `rnnlens unitary` prints."""
    trunc = "no truncation" if res["truncation"] is None else f"{res['truncation']}-truncated"
    pj = res["projection"]
    lines = [f"URN {model}: hidden size {res['hidden_size']}, {trunc}; {res['order']}",
             "effect = average effect ||Q - I||_F^2; angles = signature, rotation angles largest first; "
             + (f"projection = U^T Q U onto the {pj['dims']}-dim subspace of the prediction layer's "
                f"{pj['rows']} rows (top-left: the direction it reads most; identity: no direct effect)"
                + (f"; {pj['dims_asked']} dimensions asked, but the layer's weight has rank {pj['dims']}"
                   if pj.get("dims_asked", pj["dims"]) > pj["dims"] else "")
                if pj["dims"] else f"no projection: {pj['why_not']}"),
             ""]
    lines += _item_table(res["items"], "item")
    names = [r["name"] for r in res["items"]]
    if len(names) >= 2:
        lines += ["", "similarity of the main rotation planes (largest angle; 2 = same plane, 0 = orthogonal)"]
        lines += _square(names, res["plane_similarity"]["values"])
        ft = res["planes_of_first_two"]
        if ft["values"]:
            a, b = ft["names"]
            lines += ["", f"every rotation plane of {a} (rows) against every one of {b} (columns), by angle"]
            lines += _square([f"{d:.1f}" for d in ft["columns_degrees"]], ft["values"],
                             rows=[f"{d:.1f}" for d in ft["rows_degrees"]])
        lines += ["", "Frobenius distances ||Q_i - Q_j||_F^2"]
        lines += _square(names, res["frobenius"]["values"])
    if "pairs" in res:
        lines += ["", "matching pairs Q(close) Q(open)"]
        lines += _item_table(res["pairs"], "pair")
        lines.append(f"mean average effect of the pairs {res['pairs_mean_effect']:.4f} "
                     "(the paper's trained 3-TURN: 0.06; near 0 = a pair leaves the state as it was)")
    return "\n".join(lines)


def signature_angles(res_rows: list[dict]) -> list[list[float]]:
    """The angles (degrees) of rows of urn_tables' items or pairs, for the dial plots."""
    return [list(r["angles_degrees"]) for r in res_rows]


