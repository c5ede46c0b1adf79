"""Vocabulary: token <-> id, with padding and unknown specials, saved as JSON."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Iterable

from ..errors import RnnlensError

PAD = "<pad>"
UNK = "<unk>"


class Vocab:
    """Maps tokens to ids. Id 0 is padding, id 1 is the unknown token.

    Built with `Vocab.build(token_lists, min_count, max_size)`: tokens seen fewer than
    min_count times are dropped, then the max_size most frequent are kept (ties broken by
    first appearance, so the result is deterministic).
    """

    def __init__(self, tokens: Iterable[str]):
        self.itos: list[str] = [PAD, UNK]
        for tok in tokens:
            if tok not in (PAD, UNK):
                self.itos.append(tok)
        self.stoi = {t: i for i, t in enumerate(self.itos)}      # every id's name, <pad> included
        if len(self.stoi) != len(self.itos):
            raise RnnlensError("vocabulary has duplicate tokens")
        # what a text's tokens read as: <pad> is no word (id 0 pads), so a literal "<pad>" is <unk>
        self._words = {t: i for t, i in self.stoi.items() if i != self.pad_id}

    pad_id = 0
    unk_id = 1

    @classmethod
    def build(cls, token_lists: Iterable[list[str]], min_count: int = 1,
              max_size: int | None = None) -> "Vocab":
        counts: Counter[str] = Counter()
        for toks in token_lists:
            counts.update(toks)
        # Counter preserves insertion order, and sorted() is stable.
        kept = [t for t, c in counts.items() if c >= min_count]
        kept.sort(key=lambda t: -counts[t])
        if max_size is not None:
            kept = kept[: max(0, max_size - 2)]
        return cls(kept)

    def __len__(self) -> int:
        return len(self.itos)

    def __contains__(self, tok: str) -> bool:
        """Whether a text's `tok` is a word of the vocabulary (not "<pad>", which reads as <unk>)."""
        return tok in self._words

    def encode(self, tokens: list[str]) -> list[int]:
        return [self._words.get(t, self.unk_id) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[i] for i in ids]

    def to_dict(self) -> dict:
        return {"format": "rnnlens-vocab", "version": 1, "itos": self.itos}

    @classmethod
    def from_dict(cls, d: dict) -> "Vocab":
        if not isinstance(d, dict) or d.get("format") != "rnnlens-vocab" or not isinstance(d.get("itos"), list):
            raise RnnlensError("not an rnnlens vocabulary (expected format 'rnnlens-vocab' with an 'itos' list)")
        itos = d["itos"]
        if itos[:2] != [PAD, UNK] or not all(isinstance(t, str) for t in itos):
            raise RnnlensError("vocabulary must start with <pad>, <unk> and hold only strings")
        return cls(itos[2:])

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), ensure_ascii=False), encoding="utf-8")

    @classmethod
    def load(cls, path: str | Path) -> "Vocab":
        try:
            d = json.loads(Path(path).read_text(encoding="utf-8-sig"))
        except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
            raise RnnlensError(f"cannot read vocabulary {path}: {e}") from None
        try:
            return cls.from_dict(d)
        except RnnlensError as e:
            raise RnnlensError(f"{path}: {e}") from None
