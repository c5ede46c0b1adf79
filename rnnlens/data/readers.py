"""Readers that turn files into Examples. Errors name the file and line."""
from __future__ import annotations

import contextlib
import csv
import gc
import gzip
import io
import json
import re
import zlib
from pathlib import Path

from ..errors import RnnlensError
from .batching import Example
from .tokenize import Tokenizer

# Every text file is read as UTF-8 without its byte-order mark (Notepad and Excel write one;
# kept, it would become part of the first label or word): "utf-8-sig" for text, _decode for bytes.
TEXT_ENCODING = "utf-8-sig"
BOM = b"\xef\xbb\xbf"


def read_text(path: str | Path) -> str:
    p = Path(path)
    if not p.is_file():
        raise RnnlensError(f"data file {p} does not exist")
    try:
        return p.read_text(encoding=TEXT_ENCODING)
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


# ---------------------------------------------------------------------------
# Readers for public NLP datasets. Each returns plain Python values (no tensors).
# Shared rules: a missing file is an RnnlensError naming it; a malformed line is
# an RnnlensError whose message starts with "<path>:<line number>:".
# ---------------------------------------------------------------------------


@contextlib.contextmanager
def bulk_build():
    """Pause Python's cyclic garbage collector while building many small objects.

    Readers create hundreds of thousands of token lists (SST phrases: 318,582), none
    in a reference cycle; the collector's repeated full scans over them cost about
    2/3 of the loading time. Nested use is fine: it re-enables only what it disabled.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _existing_file(path) -> Path:
    p = Path(path)
    if not p.is_file():
        raise RnnlensError(f"data file {p} does not exist")
    return p


def _read_bytes(path) -> bytes:
    p = _existing_file(path)
    try:
        return p.read_bytes()
    except OSError as e:
        raise RnnlensError(f"cannot read {p}: {e.strerror}") from None


def _decode(data: bytes, path, latin1_fallback: bool) -> str:
    """UTF-8, or (if allowed) Latin-1 for the whole file when UTF-8 fails; a UTF-8
    byte-order mark at the start is dropped either way.

    Latin-1 maps every byte to a character, so the fallback never fails; the
    whole file switches so that one file is never decoded two ways.
    """
    if data[:3] == BOM:
        data = data[3:]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        if latin1_fallback:
            return data.decode("latin-1")
        raise RnnlensError(f"{path} is not valid UTF-8 (byte {e.start}); convert it or pass a UTF-8 copy") from None


def _split_lines(text: str) -> list[str]:
    """Lines as Python's text-mode file iteration yields them (universal newlines).

    str.splitlines() is NOT used: it also breaks on U+0085 (NEL), U+2028, \\x0c etc.,
    and U+0085 is what the cp1252 ellipsis byte 0x85 becomes when a Latin-1 file
    (MR, SUBJ) is decoded, which would silently split sentences in two.
    """
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the text ended with a newline: no extra empty line
    return lines


def _lines(path, latin1_fallback: bool = False) -> list[str]:
    return _split_lines(_decode(_read_bytes(path), path, latin1_fallback))


def _nonempty(out: list, path, what: str) -> list:
    """out, or an RnnlensError when a file gave nothing at all (empty, or blank lines only):
    an empty split fails much later and far less clearly (an empty batch, a missing class)."""
    if not out:
        raise RnnlensError(f"{path} has no {what} (the file is empty or holds blank lines only)")
    return out


# --- Stanford Sentiment Treebank ------------------------------------------

# Only ASCII whitespace separates items: SST has a leaf "8\u00a01\/2" whose no-break
# space is part of the token (the official leaf count, 163,563 in train, counts it once).
_SST_TOKEN = re.compile(r"\(|\)|[^ \t\r\n()]+")


_SST_LABELS = {str(i): i for i in range(5)}


def _sst_label_problem(item: str) -> str:
    if item in ("(", ")"):
        return "'(' not followed by a label"
    try:
        return f"node label {int(item)} is not in 0..4"
    except ValueError:
        return f"node label {item!r} is not an integer"


def parse_sst_tree(line: str) -> tuple[list[str], list[tuple[int, int, int]]]:
    """Parse one PTB-style tree with integer node labels, e.g. `(3 (2 The) (4 fun))`.

    -> (leaves, nodes); nodes are (label, start, end) with leaves[start:end] under
    the node, in pre-order (root first). Raises ValueError on malformed input.
    Each node is `(label word)` (a leaf) or `(label child child ...)`.
    """
    leaves: list[str] = []
    nodes: list[list[int]] = []   # [label, start, end]; end is set when the node closes
    open_: list[list] = []        # [node, state] of open nodes; state 0 empty, 1 has a word, 2 has subtrees
    items = _SST_TOKEN.findall(line)
    n, i = len(items), 0
    while i < n:
        t = items[i]
        if not open_ and nodes and t != ")":
            raise ValueError(f"text after the end of the tree: {t!r}")
        if t == "(":
            label = _SST_LABELS.get(items[i + 1]) if i + 1 < n else None
            if label is None:
                raise ValueError(_sst_label_problem(items[i + 1] if i + 1 < n else ")"))
            if open_:
                if open_[-1][1] == 1:
                    raise ValueError("a node has both a word and other children")
                open_[-1][1] = 2
            node = [label, len(leaves), 0]
            nodes.append(node)
            open_.append([node, 0])
            i += 2
        elif t == ")":
            if not open_:
                raise ValueError("unbalanced parentheses: ')' without '('")
            node, state = open_.pop()
            if state == 0:
                raise ValueError("empty node")
            node[2] = len(leaves)
            i += 1
        else:
            if not open_:
                raise ValueError(f"word {t!r} outside any node")
            state = open_[-1][1]
            if state:
                raise ValueError("a node has both a word and other children" if state == 2
                                 else f"a leaf has more than one word (at {t!r})")
            open_[-1][1] = 1
            leaves.append(t)
            i += 1
    if open_:
        raise ValueError(f"unbalanced parentheses: {len(open_)} node(s) not closed")
    if not nodes:
        raise ValueError("no tree on the line")
    return leaves, [tuple(node) for node in nodes]


def read_sst_trees(path, phrases: bool = False, lowercase: bool = False) -> list[tuple[list[str], int]]:
    """SST trees, one per line (blank lines skipped), every node labelled 0..4.

    phrases=False: one (leaf tokens, root label) per tree.
    phrases=True: one (tokens under the node, node label) per node of every tree,
    root first (pre-order). Tokens are left as written (PTB escapes such as -LRB-
    and `\\/` are not undone); lowercase folds case.
    """
    out: list[tuple[list[str], int]] = []
    with bulk_build():
        for no, line in enumerate(_lines(path), 1):
            if not line.strip():
                continue
            try:
                leaves, nodes = parse_sst_tree(line)
            except ValueError as e:
                raise RnnlensError(f"{path}:{no}: bad SST tree: {e}") from None
            if lowercase:
                leaves = [w.lower() for w in leaves]
            if phrases:
                out.extend((leaves[s:e], label) for label, s, e in nodes)
            else:
                out.append((leaves, nodes[0][0]))
    return _nonempty(out, path, "trees")


SST_SCHEMES = ("binary", "fine", "regression")


def sst_label(fine: int, scheme: str):
    """Map a 0..4 SST label to a target under `scheme`.

    binary: 0,1 -> 0; 3,4 -> 1; 2 (neutral) -> None (the item is dropped).
    fine: the label itself. regression: float(fine - 2), in -2.0 .. 2.0.
    """
    if scheme not in SST_SCHEMES:
        raise RnnlensError(f"unknown SST label scheme {scheme!r}; choose one of {', '.join(SST_SCHEMES)}")
    if not isinstance(fine, int) or not 0 <= fine <= 4:
        raise RnnlensError(f"SST label {fine!r} is not an integer in 0..4")
    if scheme == "binary":
        return None if fine == 2 else int(fine > 2)
    if scheme == "fine":
        return fine
    return float(fine - 2)


# --- Sentence classification files ------------------------------------------

def read_glue_sst2(path) -> list[tuple[list[str], str]]:
    """GLUE SST-2 TSV: header `sentence<TAB>label`, then `sentence<TAB>label` rows.

    The sentences are already tokenised and lowercased, so they are split on whitespace.
    """
    lines = _lines(path)
    if not lines or lines[0].strip().split("\t") != ["sentence", "label"]:
        raise RnnlensError(f"{path}:1: expected the header 'sentence<TAB>label'")
    out = []
    for no, line in enumerate(lines[1:], 2):
        if not line.strip():
            continue
        sentence, sep, label = line.rpartition("\t")
        if not sep or not label.strip() or not sentence.strip():
            raise RnnlensError(f"{path}:{no}: expected 'sentence<TAB>label'")
        out.append((sentence.split(), label.strip()))
    return _nonempty(out, path, "sentences")


def read_label_first(path, lowercase: bool = True, labels=None) -> list[tuple[list[str], str]]:
    """Lines `<label> <sentence>` (the `.all` files of MR, SUBJ, CR, MPQA, TREC).

    Blank lines are skipped. A label with no sentence (`0 `) gives an empty token list:
    custrev.all has 4 such lines, copied from blank lines of custrev.pos/neg, and they
    are kept so the counts match the file (the dataset registry drops them).
    Latin-1 is used for the whole file when it is not UTF-8.
    labels: the valid labels (e.g. ("0", "1")); a line with another is an error naming it.
    """
    tokenizer = Tokenizer(lowercase=lowercase)
    out = []
    for no, line in enumerate(_lines(path, latin1_fallback=True), 1):
        if not line.strip():
            continue
        label, *sentence = line.split(None, 1)
        if labels is not None and label not in labels:
            raise RnnlensError(f"{path}:{no}: expected '<label> <sentence>' with label {' or '.join(labels)}, "
                               f"got label {label[:20]!r}")
        out.append((tokenizer(sentence[0] if sentence else ""), label))
    return _nonempty(out, path, "sentences")


_TREC_LABEL = re.compile(r"^([A-Z]+):(\S+)$")


def read_trec(path, lowercase: bool = True) -> list[tuple[list[str], str]]:
    """Raw TREC lines `COARSE:fine question`; label = COARSE (ABBR, DESC, ENTY, HUM, LOC, NUM).

    Latin-1 is used for the whole file when it is not UTF-8 (TREC.train is not).
    """
    tokenizer = Tokenizer(lowercase=lowercase)
    out = []
    for no, line in enumerate(_lines(path, latin1_fallback=True), 1):
        if not line.strip():
            continue
        parts = line.split(None, 1)
        m = _TREC_LABEL.match(parts[0])
        if not m or len(parts) < 2 or not parts[1].strip():
            raise RnnlensError(f"{path}:{no}: expected 'COARSE:fine question'")
        out.append((tokenizer(parts[1]), m.group(1)))
    return _nonempty(out, path, "questions")


def read_ag_news(path, lowercase: bool = True) -> list[tuple[list[str], str]]:
    """AG News CSV rows `"class","title","description"` (no header), class "1".."4".

    text = title + " " + description. Backslashes are replaced by spaces: the files
    write line breaks as `\\` (and stray `\\\\`), which would otherwise glue words.
    """
    tokenizer = Tokenizer(lowercase=lowercase)
    text = _decode(_read_bytes(path), path, latin1_fallback=False)
    reader = csv.reader(io.StringIO(text, newline=""))
    out = []
    start = 1  # csv's line_num is the line where a record ENDS; report where it starts
    try:
        for row in reader:
            if row and any(field.strip() for field in row):
                if len(row) != 3 or not row[0].strip():
                    raise RnnlensError(f"{path}:{start}: expected 3 CSV fields "
                                       f"\"class\",\"title\",\"description\", got {len(row)}")
                body = (row[1] + " " + row[2]).replace("\\", " ")
                out.append((tokenizer(body), row[0].strip()))
            start = reader.line_num + 1
    except csv.Error as e:
        raise RnnlensError(f"{path}:{start}: bad CSV: {e}") from None
    return _nonempty(out, path, "rows")


_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)


def read_imdb(path, lowercase: bool = True) -> list[tuple[list[str], str]]:
    """IMDB JSON lines `{"id", "rating", "label", "text"}`, gzip'd or plain; label "0"/"1" (1 = pos).

    `<br />` tags are replaced by spaces before tokenising.
    """
    data = _read_bytes(path)
    if data[:2] == b"\x1f\x8b":  # gzip magic number
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error) as e:
            raise RnnlensError(f"{path} is not a readable gzip file: {e}") from None
    tokenizer = Tokenizer(lowercase=lowercase)
    out = []
    for no, line in enumerate(_split_lines(_decode(data, path, latin1_fallback=False)), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise RnnlensError(f"{path}:{no}: bad JSON: {e.msg}") from None
        except RecursionError:
            raise RnnlensError(f"{path}:{no}: bad JSON: nested too deeply") from None
        if not isinstance(row, dict) or not isinstance(row.get("text"), str) or row.get("label") is None:
            raise RnnlensError(f"{path}:{no}: expected an object with 'text' (string) and 'label'")
        out.append((tokenizer(_BR.sub(" ", row["text"])), str(row["label"])))
    return _nonempty(out, path, "reviews")


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


# --- Word-level language modelling ---------------------------------------------

def read_lm_text(path) -> list[str]:
    """Whitespace tokens of every line, each line followed by `<eos>` (empty lines too).

    This is exactly pytorch/examples word_language_model/data.py:
    `for line in f: words = line.split() + ['<eos>']`.
    """
    out: list[str] = []
    words = 0
    for line in _lines(path):
        toks = line.split()
        words += len(toks)
        out.extend(toks)
        out.append("<eos>")
    if not words:
        raise RnnlensError(f"{path} has no words (the file is empty or holds blank lines only)")
    return out


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
