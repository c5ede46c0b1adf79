"""Readers for the entity corpora: SemEval-2010 Task 8 (relation classification between two
marked entities) and CoNLL-2003 (named-entity tags, with conversions between IOB1, BIO and
IOBES). They follow readers.py's rules: plain Python values, a missing file or a malformed
line is an RnnlensError naming the file and line."""
from __future__ import annotations

import re

from ..errors import RnnlensError
from .readers import _lines, _nonempty
from .tokenize import Tokenizer

# --- SemEval-2010 Task 8 ------------------------------------------------------

_SEMEVAL_RELATIONS = ("Cause-Effect", "Component-Whole", "Content-Container", "Entity-Destination",
                      "Entity-Origin", "Instrument-Agency", "Member-Collection", "Message-Topic",
                      "Product-Producer")
# The 19 directed labels: "Other", then each relation in (e1,e2) and (e2,e1) order.
SEMEVAL_LABELS: list[str] = ["Other"] + [f"{r}({d})" for r in _SEMEVAL_RELATIONS for d in ("e1,e2", "e2,e1")]
SEMEVAL_MARKERS = ("<e1>", "</e1>", "<e2>", "</e2>")
_MARKER = re.compile(r"(</?e[12]>)")
_SEMEVAL_SENT = re.compile(r'^(\d+)\t"(.*)"\s*$')


def semeval_tokens(sentence: str, tokenizer: Tokenizer | None = None) -> list[str]:
    """Tokenise a SemEval sentence, keeping `<e1> </e1> <e2> </e2>` as tokens of their own."""
    tokenizer = tokenizer or Tokenizer(lowercase=True)
    out: list[str] = []
    for piece in _MARKER.split(sentence):
        out.extend([piece] if piece in SEMEVAL_MARKERS else tokenizer(piece))
    return out


def _read_semeval_key(key_path) -> dict[int, tuple[str, int]]:
    """KEY file lines `id<TAB>label` -> {id: (label, line number)}."""
    key = {}
    for no, line in enumerate(_lines(key_path), 1):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or not parts[0].strip().isdigit() or not parts[1].strip():
            raise RnnlensError(f"{key_path}:{no}: expected 'id<TAB>label'")
        key[int(parts[0])] = (parts[1].strip(), no)
    return _nonempty(key, key_path, "ids")


def read_semeval(path, key_path=None) -> list[tuple[list[str], str]]:
    """SemEval-2010 Task 8 blocks of 4 lines (TRAIN_FILE.TXT, TEST_FILE_FULL.TXT):

        8001<TAB>"The most common <e1>audits</e1> were about <e2>waste</e2> and recycling."
        Message-Topic(e1,e2)
        Comment: ...
        <blank>

    -> [(tokens, directed label)], tokens lowercased with the entity markers kept.

    key_path: a KEY file `id<TAB>label` overriding labels by id. A directed key label
    replaces the block's label. The official TEST_FILE_KEY.TXT holds UNdirected labels
    (`Message-Topic`); such a label must agree with the block's relation, whose
    direction is kept (a disagreement is an error, so the key works as a check).
    """
    tokenizer = Tokenizer(lowercase=True)
    lines = _lines(path)
    key = _read_semeval_key(key_path) if key_path is not None else {}
    out, ids, no = [], set(), 0
    while no < len(lines):
        if not lines[no].strip():
            no += 1
            continue
        m = _SEMEVAL_SENT.match(lines[no])
        if not m:
            raise RnnlensError(f'{path}:{no + 1}: expected id<TAB>"sentence" starting a 4-line block')
        if no + 2 >= len(lines):
            raise RnnlensError(f"{path}:{no + 1}: block cut short; expected sentence, label and Comment lines")
        ex_id, sentence = int(m.group(1)), m.group(2)
        label, comment = lines[no + 1].strip(), lines[no + 2]
        if label not in SEMEVAL_LABELS:
            raise RnnlensError(f"{path}:{no + 2}: unknown relation label {label!r}")
        if not comment.startswith("Comment"):
            raise RnnlensError(f"{path}:{no + 3}: expected a 'Comment:' line")
        for marker in SEMEVAL_MARKERS:
            if sentence.count(marker) != 1:
                raise RnnlensError(f"{path}:{no + 1}: the sentence must contain {marker} exactly once")
        if ex_id in ids:
            raise RnnlensError(f"{path}:{no + 1}: id {ex_id} occurs twice")
        ids.add(ex_id)
        if ex_id in key:
            label = _apply_key(label, *key[ex_id], key_path, f"{path}:{no + 2}")
        out.append((semeval_tokens(sentence, tokenizer), label))
        no += 3
    extra = sorted(set(key) - ids)
    if extra:
        raise RnnlensError(f"{key_path}: {len(extra)} id(s) not in {path}, e.g. {extra[0]}; "
                           "is it the key of another file?")
    return _nonempty(out, path, "examples")


def _apply_key(label: str, key_label: str, key_no: int, key_path, where: str) -> str:
    if key_label in SEMEVAL_LABELS:
        return key_label
    if key_label not in _SEMEVAL_RELATIONS:
        raise RnnlensError(f"{key_path}:{key_no}: unknown relation label {key_label!r}")
    if label.split("(")[0] != key_label:
        raise RnnlensError(f"{key_path}:{key_no}: key says {key_label} but {where} says {label}")
    return label


# --- CoNLL-2003 NER -------------------------------------------------------------

_TAG = re.compile(r"^(?:O|[BIES]-\S+)$")
CONLL_SCHEMES = ("iob1", "bio", "iobes")


def _check_tags(tags, allowed: str) -> None:
    for t in tags:
        if not _TAG.match(t) or (t != "O" and t[0] not in allowed):
            raise RnnlensError(f"tag {t!r} is not O or {'/'.join(allowed)}-TYPE")


def iob1_to_bio(tags: list[str]) -> list[str]:
    """IOB1 (B- only between two adjacent entities of one type) -> BIO (B- starts every entity).

    An I-X starts an entity unless the previous tag is B-X or I-X.
    e.g. I-LOC I-LOC O I-PER B-PER -> B-LOC I-LOC O B-PER B-PER
    """
    _check_tags(tags, "BI")
    out, prev = [], "O"
    for t in tags:
        if t.startswith("I-") and prev[2:] != t[2:]:
            t = "B-" + t[2:]
        out.append(t)
        prev = t
    return out


def bio_to_iobes(tags: list[str]) -> list[str]:
    """BIO -> IOBES: S- a one-token entity, B- its first token, I- inside, E- its last token.

    e.g. B-LOC I-LOC O B-PER B-PER -> B-LOC E-LOC O S-PER S-PER. An I-X that does not
    continue an X entity (invalid BIO) is treated as starting one.
    """
    _check_tags(tags, "BI")
    bio = iob1_to_bio(tags)  # a no-op on valid BIO; repairs a stray I-X into B-X
    out = []
    for i, t in enumerate(bio):
        if t == "O":
            out.append(t)
            continue
        continues = i + 1 < len(bio) and bio[i + 1] == "I-" + t[2:]
        if t.startswith("B-"):
            out.append(("B-" if continues else "S-") + t[2:])
        else:
            out.append(("I-" if continues else "E-") + t[2:])
    return out


def read_conll2003(path, scheme: str = "iobes") -> list[tuple[list[str], list[str]]]:
    """CoNLL-2003 lines `token POS chunk NER`, a blank line between sentences.

    `-DOCSTART-` lines (document boundaries, each a "sentence" of its own) are not
    emitted. The file's IOB1 tags are converted per scheme: "iob1" (as written),
    "bio" or "iobes". Tokens keep their case.
    """
    if scheme not in CONLL_SCHEMES:
        raise RnnlensError(f"unknown tag scheme {scheme!r}; choose one of {', '.join(CONLL_SCHEMES)}")
    convert = {"iob1": list, "bio": iob1_to_bio, "iobes": lambda t: bio_to_iobes(iob1_to_bio(t))}[scheme]
    out: list[tuple[list[str], list[str]]] = []
    tokens: list[str] = []
    tags: list[str] = []

    def flush():
        if tokens:
            out.append((tokens.copy(), convert(tags)))
        tokens.clear()
        tags.clear()

    for no, line in enumerate(_lines(path), 1):
        fields = line.split()
        if not fields:
            flush()
            continue
        if fields[0] == "-DOCSTART-":
            flush()
            continue
        if len(fields) != 4:
            raise RnnlensError(f"{path}:{no}: expected 4 columns 'token POS chunk NER', got {len(fields)}")
        if not _TAG.match(fields[3]) or fields[3][0] not in "OBI":
            raise RnnlensError(f"{path}:{no}: NER tag {fields[3]!r} is not O, B-TYPE or I-TYPE")
        tokens.append(fields[0])
        tags.append(fields[3])
    flush()
    return _nonempty(out, path, "sentences")
