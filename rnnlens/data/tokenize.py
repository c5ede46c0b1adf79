"""Tokenizer: whitespace split with punctuation split off, optional lowercasing."""
from __future__ import annotations

import re
from dataclasses import dataclass

# A token is a run of word characters (letters, digits, underscore, with inner
# apostrophes or hyphens kept: "don't", "well-made"), or one punctuation character.
_TOKEN = re.compile(r"\w+(?:['\u2019\-]\w+)*|[^\w\s]", re.UNICODE)
_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """text with every lone surrogate (a JSON "\\ud800", or a byte of a command-line argument
    that is not UTF-8) replaced by U+FFFD, so that it can be printed, plotted and written."""
    return _SURROGATE.sub("\ufffd", text)


def shown(text: str, keep: str = "") -> str:
    """text as a terminal shows it faithfully: every character Python does not call printable
    (controls such as ESC, NUL and BEL, format characters such as U+200B, line and paragraph
    separators, non-ASCII spaces) written as its escape (\\x1b, \\u200b), so that a user's text
    cannot recolour the terminal, move its cursor or break a table's rows. Characters in
    `keep` (e.g. "\\n" for a whole table) pass as they are; the ASCII space always does."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in keep else ascii(c)[1:-1] for c in text)


@dataclass(frozen=True)
class Tokenizer:
    """Splits text into tokens.

    lowercase: fold case before splitting.
    split_punct: split punctuation into tokens of its own; otherwise split on whitespace only.
    """

    lowercase: bool = True
    split_punct: bool = True

    def __call__(self, text: str) -> list[str]:
        text = clean_text(text)
        if self.lowercase:
            text = text.lower()
        if self.split_punct:
            return _TOKEN.findall(text)
        return text.split()

    def to_dict(self) -> dict:
        return {"lowercase": self.lowercase, "split_punct": self.split_punct}
