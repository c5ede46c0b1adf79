"""Explanations of many sentences at once (`rnnlens explain --lines FILE --out DIR`): each
sentence's prediction, its top n-grams, and every token's share of the n-gram total, for
the JSONL file and the HTML page (rnnlens.viz.explain_page).

Token shares: each n-gram's contribution is shared equally among its tokens, so a
sentence's token shares add up to its n-gram total (the output less the offset and the
remainder). Contributions are toward the predicted label: positive pushes toward it.
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ..errors import RnnlensError
from .predict import SENTENCE_TASKS
from .run import Run


def token_shares(ngrams: np.ndarray) -> np.ndarray:
    """[D, T(end), T(start)] n-gram contributions -> [T] token shares (they sum to the total)."""
    D, T, _ = ngrams.shape
    out = np.zeros(T)
    for d in range(D):
        for end in range(T):
            for start in range(T):
                v = ngrams[d, end, start]
                if v:
                    lo, hi = min(start, end), max(start, end)
                    out[lo: hi + 1] += v / (hi - lo + 1)
    return out


def explain_lines(run: Run, texts: Iterable[tuple[int, str]], top: int = 5, progress=None,
                  view: str = "first-order") -> list[dict]:
    """One record per (line number, text): tokens, unknown words, prediction, probabilities,
    what is explained, output = offset + n-gram total + remainder in `view` ("first-order" or
    "exact"), the top n-grams and the token shares. Empty texts get an "error" record."""
    from ..analysis.sentence import explain_text

    if run.task not in SENTENCE_TASKS:
        raise RnnlensError(f"explain --lines explains sentence-level models ({', '.join(SENTENCE_TASKS)}); this one "
                           f"is a {run.task!r} model: explain its texts one at a time")
    out = []
    for no, text in texts:
        tokens = run.tokenize(text)
        if not tokens:
            out.append({"line": no, "text": text, "tokens": [], "error": "no tokens"})
            continue
        ex = explain_text(run.model, run.vocab, tokens, view=view)
        pos = ex.positions[0]
        out.append({"line": no, "text": text, "tokens": ex.tokens, "unknown": ex.unknown,
                    "prediction": ex.prediction, "probabilities": ex.probabilities, "explained": ex.explained,
                    "view": "exact" if ex.exact else "first-order",
                    "linearised_at": "the true states" if view == "exact" else "zero",
                    "output": pos.output, "offset": pos.offset,
                    "ngram_total": pos.ngram_total, "remainder": pos.remainder,
                    "ngrams": pos.top(ex.tokens, top), "token_shares": token_shares(pos.ngrams).tolist()})
        if progress is not None:
            progress(1)
    return out
