"""Readers that turn files into Examples: plain labelled text, the sentence-classification
corpora (SST, GLUE SST-2, the `.all` files, TREC, AG News, IMDB) and word-level language-model
text, with the decoding and line-splitting rules every reader in rnnlens.data shares. The
entity corpora are read by semeval_conll.py, the agreement data sets by agreement.py. Errors
name the file and line."""
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
    p = _existing_file(path)
    try:
        return p.read_text(encoding=TEXT_ENCODING)
    except UnicodeDecodeError as e:
        raise RnnlensError(f"{p} is not valid UTF-8 (byte {e.start}); convert it or pass a UTF-8 copy") from None
    except OSError as e:
        raise RnnlensError(f"cannot read {p}: {e.strerror}") from None


def read_labelled_tsv(path: str | Path, tokenizer: Tokenizer) -> list[tuple[list[str], str]]:
    """Lines of `label<TAB>text`; blank lines are skipped. -> [(tokens, label string)]."""
    out = []
    for no, line in enumerate(_split_lines(read_text(path)), 1):
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
    if p.is_dir():
        raise RnnlensError(f"data file {p} is a folder; give the file")
    if not p.is_file():
        if p.exists():      # a device (/dev/zero never ends), a pipe or a socket: read whole, it has no bound
            raise RnnlensError(f"data file {p} is not a regular file (a device, a pipe or a socket); give a file")
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
