"""Tokenizer: whitespace split with punctuation split off, optional lowercasing."""
from __future__ import annotations

import re
from dataclasses import dataclass

# A token is a run of word characters (letters, digits, underscore, with inner
# apostrophes or hyphens kept: "don't", "well-made"), or one punctuation character.
_TOKEN = re.compile(r"\w+(?:['\u2019\-]\w+)*|[^\w\s]", re.UNICODE)
_SURROGATE = re.compile("[\ud800-\udfff]")
# Penn Treebank tokenisation of one whitespace-separated piece (the SST's trees are tokenised
# so): quotes as `` and '', clitics split off ("it's" -> it 's, "isn't" -> is n't), leading and
# trailing punctuation split off; a piece that is already one such token stays whole.
_PTB_WHOLE = re.compile(r"``|''|--|\.\.\.|-[lr][rcs]b-|n't|'(?:s|re|ve|ll|d|m)", re.IGNORECASE)
_PTB_CLITIC = re.compile(r"(.+?)(n't|'s|'re|'ve|'ll|'d|'m)", re.IGNORECASE)
_PTB_LEAD, _PTB_TRAIL = "([{`\"'", ".,;:!?)]}\"'"


def treebank_tokens(piece: str) -> list[str]:
    """One whitespace-free piece of text as Penn Treebank tokens (see _PTB_WHOLE above)."""
    head: list[str] = []
    tail: list[str] = []
    while piece and not _PTB_WHOLE.fullmatch(piece):
        if piece[0] in _PTB_LEAD:
            head.append("``" if piece[0] == '"' else piece[0])
            piece = piece[1:]
        elif piece.endswith("...") and len(piece) > 3:
            tail.insert(0, "...")
            piece = piece[:-3]
        elif piece[-1] in _PTB_TRAIL:
            tail.insert(0, "''" if piece[-1] == '"' else piece[-1])
            piece = piece[:-1]
        else:
            break
    if not piece:
        return head + tail
    m = None if _PTB_WHOLE.fullmatch(piece) else _PTB_CLITIC.fullmatch(piece)
    return head + (list(m.groups()) if m else [piece]) + tail


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
    treebank: split each whitespace-separated piece as the Penn Treebank does (`treebank_tokens`:
        the SST's tokens, "it 's" and "does n't"), in place of split_punct's rule.
    """

    lowercase: bool = True
    split_punct: bool = True
    treebank: bool = False

    def __call__(self, text: str) -> list[str]:
        text = clean_text(text)
        if self.lowercase:
            text = text.lower()
        if self.treebank:
            return [t for piece in text.split() for t in treebank_tokens(piece)]
        if self.split_punct:
            return _TOKEN.findall(text)
        return text.split()

    def to_dict(self) -> dict:
        return {"lowercase": self.lowercase, "split_punct": self.split_punct,
                **({"treebank": True} if self.treebank else {})}
