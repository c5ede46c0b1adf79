"""Pretrained word vectors from a GloVe-format text file (`word v1 v2 ... vd` per line)."""
from __future__ import annotations

import gzip
import math
import zlib
from pathlib import Path

import torch

from ..errors import RnnlensError
from .vocab import Vocab


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def load_vectors(path: str | Path, vocab: Vocab, dim: int) -> tuple[torch.Tensor, int]:
    """Vectors for the vocabulary's words: ([V, dim] with zeros for words not in the file,
    number of words found). Streams the file and keeps only vocabulary words, so a
    multi-GB GloVe file costs no more memory than the vocabulary. A word missing in its
    given case is looked up lowercased. A gzip'd file is recognised by its first bytes;
    bytes that are not UTF-8 are replaced (such a word matches nothing). An empty file, a
    truncated gzip file, and a vocabulary word whose line has the wrong number of values or
    a value that is not a finite number are RnnlensErrors naming the file (and line)."""
    p = Path(path)
    if not p.is_file():
        raise RnnlensError(f"embeddings file {p} does not exist")
    want: dict[str, list[int]] = {}
    for i, w in enumerate(vocab.itos[2:], 2):
        want.setdefault(w, []).append(i)
    lower = {}
    for w, ids in want.items():
        lower.setdefault(w.lower(), []).extend(ids)
    out = torch.zeros(len(vocab), dim)
    exact: set[int] = set()
    found: set[int] = set()
    try:
        with p.open("rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
    except OSError as e:
        raise RnnlensError(f"cannot read {p}: {e.strerror}") from None
    opener = gzip.open if gz else open
    lines = 0
    try:
        with opener(p, "rt", encoding="utf-8-sig", errors="replace") as f:   # without a byte-order mark
            for no, line in enumerate(f, 1):
                parts = [x for x in line.rstrip().split(" ") if x]     # (one space or several)
                lines += bool(line.strip())
                if no == 1 and len(parts) == 2 and all(x.isdigit() for x in parts):
                    continue  # word2vec text header: "count dim"
                if len(parts) > dim + 1 and not all(_is_number(x) for x in parts[1:-dim]):
                    parts = [" ".join(parts[:-dim]), *parts[-dim:]]   # a word with spaces (GloVe 840B's ". . .")
                word = parts[0] if parts else ""
                hits = [(i, True) for i in want.get(word, [])] + \
                       [(i, False) for i in lower.get(word.lower(), []) if i not in exact]
                if not hits:
                    continue
                if len(parts) - 1 != dim:
                    raise RnnlensError(f"{p}:{no}: expected {dim} values after the word, found "
                                       f"{len(parts) - 1} (set model.embedding_dim to the file's dimension)")
                try:
                    vec = torch.tensor([float(x) for x in parts[1:]])
                except ValueError:
                    raise RnnlensError(f"{p}:{no}: not a number in the vector") from None
                if not all(math.isfinite(v) for v in vec.tolist()):
                    raise RnnlensError(f"{p}:{no}: the vector of {word!r} holds nan or inf")
                for i, is_exact in hits:
                    if is_exact or i not in found:
                        out[i] = vec
                        found.add(i)
                        if is_exact:
                            exact.add(i)
    except (OSError, EOFError, zlib.error) as e:
        raise RnnlensError(f"cannot read {p}: {e}") from None
    if not lines:
        raise RnnlensError(f"embeddings file {p} is empty")
    if not found:
        raise RnnlensError(f"embeddings file {p} has a vector for no word of the vocabulary (expected lines of "
                           f"a word and its {dim} values, separated by spaces)")
    return out, len(found)
