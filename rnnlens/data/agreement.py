"""Readers for subject-verb number agreement data: Linzen, Dupoux & Goldberg's (2016)
dependency TSV, for training the number-prediction task, and the line-aligned test sets of
colorlessgreenRNNs (Linzen et al.'s subset, Gulordava et al. 2018) for language models.
A missing file or a malformed line is an RnnlensError naming the file and line."""
from __future__ import annotations

import csv
import gzip
import io
import zlib
from pathlib import Path

from ..errors import RnnlensError
from .readers import TEXT_ENCODING, _existing_file, _lines

# --- Subject-verb number agreement (Linzen, Dupoux & Goldberg 2016) -------------------

# The header of agr_50_mostcommon_10K.tsv(.gz), TalLinzen/rnn_agreement utils.dependency_fields.
# `sentence` has the words outside the 10,000 most common replaced by their POS tag;
# subj_index and verb_index are 1-based (CoNLL) token positions.
LINZEN_COLUMNS = ("sentence", "orig_sentence", "pos_sentence", "subj", "verb", "subj_pos", "has_rel",
                  "has_nsubj", "verb_pos", "subj_index", "verb_index", "n_intervening", "last_intervening",
                  "n_diff_intervening", "distance", "max_depth", "all_nouns", "nouns_up_to_verb")
_LINZEN_NEEDED = ("sentence", "verb_pos", "verb_index", "n_intervening", "n_diff_intervening")
VERB_NUMBER = {"VBZ": "singular", "VBP": "plural"}


class AgreementRow:
    """One dependency of the Linzen TSV, ready for the number-prediction task.

    prefix:      the tokens before the verb (sentence.split()[: verb_index - 1])
    number:      "singular" (verb_pos VBZ) or "plural" (VBP)
    attractors:  n_diff_intervening, the nouns between subject and verb whose number
                 differs from the subject's (Linzen et al.'s attractors)
    intervening: n_intervening, all nouns between them
    verb, subject: the words (as the file has them; "" if the column is absent)
    """

    __slots__ = ("prefix", "number", "attractors", "intervening", "verb", "subject")

    def __init__(self, prefix, number, attractors, intervening, verb="", subject=""):
        self.prefix, self.number, self.attractors = prefix, number, attractors
        self.intervening, self.verb, self.subject = intervening, verb, subject

    def __repr__(self) -> str:
        return (f"AgreementRow({' '.join(self.prefix)!r}, {self.number}, attractors={self.attractors}, "
                f"intervening={self.intervening}, verb={self.verb!r})")


def _text_stream(path) -> io.TextIOBase:
    p = _existing_file(path)
    with p.open("rb") as f:
        gz = f.read(2) == b"\x1f\x8b"
    return io.TextIOWrapper(gzip.open(p, "rb") if gz else p.open("rb"), encoding=TEXT_ENCODING, newline="")


def read_linzen_tsv(path, column: str = "sentence",
                    max_sentence_length: int | None = None) -> list[AgreementRow]:
    """Linzen et al.'s agreement dependencies (agr_50_mostcommon_10K.tsv, gzip'd or plain):
    a tab-separated file with a header row (LINZEN_COLUMNS, written by csv.writer, so a
    field holding a quote is quoted). -> one AgreementRow per line, in file order.

    column: which sentence to cut the prefix from: "sentence" (rare words as POS tags,
    what Linzen et al. and the unitary-networks paper train on) or "orig_sentence".
    max_sentence_length: skip dependencies whose whole sentence is longer (Linzen et al.'s
    models skip sentences over 50 tokens); None keeps all.
    """
    out: list[AgreementRow] = []
    try:
        with _text_stream(path) as f:
            reader = csv.DictReader(f, delimiter="\t")
            fields = reader.fieldnames or []
            missing = [c for c in (*_LINZEN_NEEDED, column) if c not in fields]
            if missing:
                raise RnnlensError(f"{path}: not a Linzen agreement TSV: the header lacks {', '.join(missing)} "
                                   f"(expected columns like {', '.join(LINZEN_COLUMNS[:5])}, ...)")
            for row in reader:
                no = reader.line_num
                if None in row or any(row.get(c) is None for c in _LINZEN_NEEDED):
                    raise RnnlensError(f"{path}:{no}: expected {len(fields)} tab-separated fields")
                tokens = row[column].split()
                if max_sentence_length is not None and len(tokens) > max_sentence_length:
                    continue
                number = VERB_NUMBER.get(row["verb_pos"])
                if number is None:
                    raise RnnlensError(f"{path}:{no}: verb_pos {row['verb_pos']!r} is not VBZ or VBP")
                try:
                    verb_index = int(row["verb_index"])
                    attractors, intervening = int(row["n_diff_intervening"]), int(row["n_intervening"])
                except ValueError:
                    raise RnnlensError(f"{path}:{no}: verb_index, n_intervening and n_diff_intervening "
                                       "must be integers") from None
                if not 1 <= verb_index <= len(tokens):
                    raise RnnlensError(f"{path}:{no}: verb_index {verb_index} is outside the sentence "
                                       f"({len(tokens)} tokens; the index is 1-based)")
                out.append(AgreementRow(tokens[: verb_index - 1], number, attractors, intervening,
                                        row.get("verb") or "", row.get("subj") or ""))
    except UnicodeDecodeError as e:
        raise RnnlensError(f"{path} is not valid UTF-8 ({e.reason} at byte {e.start} of a block); "
                           "convert it or pass a UTF-8 copy") from None
    except (OSError, EOFError, zlib.error, csv.Error) as e:
        raise RnnlensError(f"cannot read {path}: {e}") from None
    if not out:
        raise RnnlensError(f"{path} has no agreement dependencies")
    return out


class AgreementItem:
    """One item of an agreement test set for language models: the words before the verb,
    the correct and the wrong verb form, and the number of attractors (None if unknown)."""

    __slots__ = ("prefix", "correct", "wrong", "attractors")

    def __init__(self, prefix, correct, wrong, attractors):
        self.prefix, self.correct, self.wrong, self.attractors = prefix, correct, wrong, attractors

    def __repr__(self) -> str:
        return (f"AgreementItem({' '.join(self.prefix)!r}, {self.correct!r} > {self.wrong!r}, "
                f"attractors={self.attractors})")


def _agreement_base(path) -> Path:
    p = Path(path)
    if p.is_dir():
        texts = sorted(p.glob("*.text"))
        if len(texts) != 1:
            raise RnnlensError(f"{p} holds {len(texts)} .text files; give the one to use (path without extension)")
        return texts[0].with_suffix("")
    if p.suffix in (".text", ".gold", ".eval", ".tab"):
        return p.with_suffix("")
    return p


def read_agreement_testset(path) -> list[AgreementItem]:
    """A line-aligned agreement test set as colorlessgreenRNNs ships it: NAME.text (one
    sentence a line) and NAME.gold. path: NAME (no extension), one of its files, or a folder
    holding one such set. Two gold layouts are read:

    - Linzen et al.'s subset (linzen_testset/subj_agr_filtered.gold), 4 columns: the 0-based
      index of the verb, the correct form, the wrong form, the number of attractors.
    - Gulordava et al. 2018 (agreement/English/generated.gold), 12 columns: the verb index
      is column 4 (0-based col 3), the correct and wrong forms columns 7 and 8; the number
      of attractors is taken from NAME.tab (n_attr; two rows per sentence, correct then
      wrong, in the order of .text) when it is there, else None.
    """
    base = _agreement_base(path)
    text_path, gold_path = base.with_suffix(".text"), base.with_suffix(".gold")
    texts = [line.split() for line in _lines(text_path)]
    golds = [line.split("\t") for line in _lines(gold_path)]
    if len(texts) != len(golds):
        raise RnnlensError(f"{text_path} has {len(texts)} lines but {gold_path} has {len(golds)}")
    tab_attr = None
    if golds and len(golds[0]) >= 12 and base.with_suffix(".tab").is_file():
        tab_path = base.with_suffix(".tab")
        rows = list(csv.DictReader(io.StringIO("\n".join(_lines(tab_path))), delimiter="\t"))
        if len(rows) != 2 * len(golds) or any("n_attr" not in r for r in rows[:1]):
            raise RnnlensError(f"{tab_path}: expected a header with n_attr and 2 rows per sentence of {text_path}")
        tab_attr = [rows[2 * i]["n_attr"] for i in range(len(golds))]
    items = []
    for i, (tokens, gold) in enumerate(zip(texts, golds)):
        no = i + 1
        try:
            if len(gold) == 4:
                idx, correct, wrong, attractors = int(gold[0]), gold[1], gold[2], int(gold[3])
            elif len(gold) >= 12:
                idx, correct, wrong = int(gold[3]), gold[6], gold[7]
                attractors = int(tab_attr[i]) if tab_attr is not None else None
            else:
                raise RnnlensError(f"{gold_path}:{no}: expected 4 columns (index, correct, wrong, attractors) "
                                   f"or colorlessgreenRNNs' 12, got {len(gold)}")
        except ValueError:
            raise RnnlensError(f"{gold_path}:{no}: the verb index and attractor count must be integers") from None
        if not 0 <= idx < len(tokens):
            raise RnnlensError(f"{gold_path}:{no}: verb index {idx} is outside the sentence ({len(tokens)} tokens)")
        items.append(AgreementItem(tokens[:idx], correct, wrong, attractors))
    if not items:
        raise RnnlensError(f"{text_path} has no items")
    return items
