"""Readers that turn files into Examples. Errors name the file and line."""
from __future__ import annotations

from pathlib import Path

from ..errors import RnnlensError
from .batching import Example
from .tokenize import Tokenizer


def read_text(path: str | Path) -> str:
    p = Path(path)
    if not p.is_file():
        raise RnnlensError(f"data file {p} does not exist")
    try:
        return p.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise RnnlensError(f"{p} is not valid UTF-8 (byte {e.start}); convert it or pass a UTF-8 copy") from None
    except OSError as e:
        raise RnnlensError(f"cannot read {p}: {e.strerror}") from None


def read_labelled_tsv(path: str | Path, tokenizer: Tokenizer) -> list[tuple[list[str], str]]:
    """Lines of `label<TAB>text`; blank lines are skipped. -> [(tokens, label string)]."""
    out = []
    for no, line in enumerate(read_text(path).splitlines(), 1):
        if not line.strip():
            continue
        label, sep, text = line.partition("\t")
        if not sep or not label.strip() or not text.strip():
            raise RnnlensError(f"{path}:{no}: expected 'label<TAB>text'")
        out.append((tokenizer(text), label.strip()))
    if not out:
        raise RnnlensError(f"{path} has no examples")
    return out


def label_examples(rows: list[tuple[list[str], str]], labels: list[str], path) -> list[Example]:
    """Map label strings to indices of `labels`; a label not seen in training is an error."""
    index = {lab: i for i, lab in enumerate(labels)}
    unknown = sorted({lab for _, lab in rows} - set(index))
    if unknown:
        raise RnnlensError(f"{path}: label(s) {', '.join(unknown)} do not occur in the training data")
    return [Example(toks, index[lab]) for toks, lab in rows]
