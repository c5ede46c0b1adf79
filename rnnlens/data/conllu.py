"""CoNLL-U dependency parses (basic trees), for the attention-per-relation study of the
recurrent-memory networks paper (Figure 6). Errors name the file and line."""
from __future__ import annotations

import re

from ..errors import RnnlensError
from .readers import _lines, bulk_build

# --- CoNLL-U dependency parses -----------------------------------------------------------

class DepSentence:
    """One dependency-parsed sentence of a CoNLL-U file (basic tree only).

    forms:   the word forms (FORM column), one per syntactic word
    heads:   1-based index of each word's head, 0 for the root (HEAD column)
    deprels: the relation of each word to its head (DEPREL column, subtypes kept: nmod:poss)
    line:    the line number where the sentence starts (for messages)
    """

    __slots__ = ("forms", "heads", "deprels", "line")

    def __init__(self, forms, heads, deprels, line=0):
        self.forms, self.heads, self.deprels, self.line = forms, heads, deprels, line

    def __len__(self) -> int:
        return len(self.forms)

    def arcs(self):
        """(dependent, head, deprel) for every non-root word; indices 0-based."""
        return [(i, h - 1, r) for i, (h, r) in enumerate(zip(self.heads, self.deprels)) if h > 0]

    def __repr__(self) -> str:
        return f"DepSentence({' '.join(self.forms)!r})"


_CONLLU_ID = re.compile(r"^[1-9]\d*$")
_CONLLU_RANGE = re.compile(r"^\d+-\d+$")
_CONLLU_EMPTY = re.compile(r"^\d+\.\d+$")


def read_conllu(path) -> list[DepSentence]:
    """CoNLL-U: 10 tab-separated columns per word (ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL
    DEPS MISC), '#' comment lines, a blank line after each sentence.

    Multiword-token lines (ID `1-2`) and empty nodes (ID `1.1`) are skipped: the words of a
    sentence are its integer-ID lines, which must run 1, 2, 3, ...; every HEAD must be an
    integer from 0 to the sentence length. Malformed input is an RnnlensError naming
    `<path>:<line>`. -> sentences in file order.
    """
    out: list[DepSentence] = []
    forms: list[str] = []
    heads: list[int] = []
    rels: list[str] = []
    head_lines: list[int] = []
    start = 0

    def flush():
        nonlocal start
        if forms:
            n = len(forms)
            for h, no in zip(heads, head_lines):
                if h > n:
                    raise RnnlensError(f"{path}:{no}: HEAD {h} is past the end of the sentence ({n} words)")
            if heads.count(0) == 0:
                raise RnnlensError(f"{path}:{start}: the sentence has no root (no word with HEAD 0)")
            out.append(DepSentence(forms.copy(), heads.copy(), rels.copy(), start))
        forms.clear()
        heads.clear()
        rels.clear()
        head_lines.clear()

    with bulk_build():
        for no, line in enumerate(_lines(path), 1):
            if not line.strip():
                flush()
                continue
            if line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 10:
                raise RnnlensError(f"{path}:{no}: expected 10 tab-separated CoNLL-U columns, got {len(cols)}")
            wid = cols[0].strip()
            if _CONLLU_RANGE.match(wid) or _CONLLU_EMPTY.match(wid):
                continue
            if not _CONLLU_ID.match(wid):
                raise RnnlensError(f"{path}:{no}: ID {wid!r} is not a word index, a range 1-2 or an empty node 1.1")
            if int(wid) != len(forms) + 1:
                raise RnnlensError(f"{path}:{no}: expected word ID {len(forms) + 1}, got {wid} "
                                   "(is a blank line missing between sentences?)")
            head, rel = cols[6].strip(), cols[7].strip()
            if not head.isdigit():
                raise RnnlensError(f"{path}:{no}: HEAD {head!r} is not an integer (is the file parsed?)")
            if not rel or rel == "_":
                raise RnnlensError(f"{path}:{no}: DEPREL is empty")
            if int(head) == int(wid):
                raise RnnlensError(f"{path}:{no}: word {wid} is its own head")
            if not forms:
                start = no
            forms.append(cols[1])
            heads.append(int(head))
            rels.append(rel)
            head_lines.append(no)
        flush()
    if not out:
        raise RnnlensError(f"{path} has no sentences")
    return out
