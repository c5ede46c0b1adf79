"""The MSR Sentence Completion Challenge (Zweig & Burges 2012), in its CSV form
(testing_data.csv / test_answer.csv) and its original Holmes text form: questions with one
gap and five candidates, each filled in and tokenised for a language model to score
(recurrent-memory networks, Section 6). Errors name the file and line."""
from __future__ import annotations

import csv
import io
import re

from ..errors import RnnlensError
from .readers import _lines
from .tokenize import Tokenizer

# --- MSR Sentence Completion Challenge (Zweig & Burges 2012) --------------------------

MSR_LETTERS = "abcde"
_BLANK = re.compile(r"_{2,}")                       # the CSV form writes the gap as "_____"
_MSR_MACHINE = re.compile(r"^\s*(\d+)([a-e])\)\s*(.*)$")
_MSR_HUMAN_ANSWER = re.compile(r"^\s*(\d+)\)\s*\[([a-e])\]")
_BRACKET = re.compile(r"\[([^\[\]]*)\]")


class CompletionQuestion:
    """One sentence-completion question: a sentence with one gap and five candidate words.

    id:         the question's id as the file writes it ("1", "2", ...)
    text:       the sentence with the gap written "_____"
    candidates: the five candidate words (a..e), as written
    sentences:  the five filled-in sentences, tokenised (candidate a first)
    spans:      for each filled sentence, the (start, end) token span of the candidate
    answer:     index 0..4 of the correct candidate, or None when no answers were read
    """

    __slots__ = ("id", "text", "candidates", "sentences", "spans", "answer")

    def __init__(self, id, text, candidates, sentences, spans, answer=None):
        self.id, self.text, self.candidates = id, text, candidates
        self.sentences, self.spans, self.answer = sentences, spans, answer

    def __repr__(self) -> str:
        gold = "?" if self.answer is None else MSR_LETTERS[self.answer]
        return f"CompletionQuestion({self.id}: {self.text!r}, {'/'.join(self.candidates)}, answer {gold})"


def _fill(left: str, word: str, right: str, tokenizer: Tokenizer) -> tuple[list[str], tuple[int, int]]:
    """Tokenise the three pieces apart, so the candidate's token span is exact."""
    a, w, b = tokenizer(left), tokenizer(word), tokenizer(right)
    return a + w + b, (len(a), len(a) + len(w))


def _msr_question(qid: str, left: str, right: str, words: list[str], tokenizer: Tokenizer, where: str):
    words = [w.strip() for w in words]
    for letter, w in zip(MSR_LETTERS, words):
        if not w or not tokenizer(w):
            raise RnnlensError(f"{where}: candidate {letter}) is empty")
    filled = [_fill(left, w, right, tokenizer) for w in words]
    return CompletionQuestion(qid, f"{left.rstrip()} _____ {right.lstrip()}".strip(), words,
                              [f[0] for f in filled], [f[1] for f in filled])


def _msr_questions_csv(path, lines: list[str], tokenizer: Tokenizer) -> list[CompletionQuestion]:
    reader = csv.reader(io.StringIO("\n".join(lines) + "\n", newline=""))
    try:
        header = [h.strip().lower() for h in next(reader)]
    except StopIteration:
        raise RnnlensError(f"{path} is empty") from None
    cols = {}
    for name in ("id", "question", *MSR_LETTERS):
        for key in (name, f"{name})"):
            if key in header:
                cols[name] = header.index(key)
    missing = [n + (")" if n in MSR_LETTERS else "") for n in ("id", "question", *MSR_LETTERS) if n not in cols]
    if missing:
        raise RnnlensError(f"{path}:1: expected the header id,question,a),b),c),d),e); missing {', '.join(missing)}")
    out, ids = [], set()
    start = 2
    try:
        for row in reader:
            where = f"{path}:{start}"
            start = reader.line_num + 1
            if not any(field.strip() for field in row):
                continue
            if len(row) != len(header):
                raise RnnlensError(f"{where}: expected {len(header)} CSV fields, got {len(row)}")
            qid, question = row[cols["id"]].strip(), row[cols["question"]]
            gaps = _BLANK.findall(question)
            if len(gaps) != 1:
                raise RnnlensError(f"{where}: the question must hold exactly one gap '_____', found {len(gaps)}")
            if not qid or qid in ids:
                raise RnnlensError(f"{where}: question id {qid!r} is empty or occurs twice")
            ids.add(qid)
            left, right = _BLANK.split(question, maxsplit=1)
            out.append(_msr_question(qid, left, right, [row[cols[c]] for c in MSR_LETTERS], tokenizer, where))
    except csv.Error as e:
        raise RnnlensError(f"{path}:{start}: bad CSV: {e}") from None
    return out


def _msr_questions_machine(path, lines: list[str], tokenizer: Tokenizer) -> list[CompletionQuestion]:
    groups: dict[str, list] = {}
    current = None
    for no, line in enumerate(lines, 1):
        if not line.strip():
            continue
        m = _MSR_MACHINE.match(line)
        if not m:
            raise RnnlensError(f"{path}:{no}: expected '<number><a-e>) sentence with [word]'")
        qid, letter, text = m.groups()
        if not _BRACKET.search(text) or text.count("[") != 1 or text.count("]") != 1:
            raise RnnlensError(f"{path}:{no}: the sentence must hold exactly one [word] in brackets")
        if qid != current and qid in groups:
            raise RnnlensError(f"{path}:{no}: the lines of question {qid} are not together")
        current = qid
        rows = groups.setdefault(qid, [])
        expected = MSR_LETTERS[len(rows)] if len(rows) < 5 else None
        if letter != expected:
            raise RnnlensError(f"{path}:{no}: expected {qid}{expected}) here, got {qid}{letter})"
                               if expected else f"{path}:{no}: question {qid} has more than five candidates")
        left, _, rest = text.partition("[")
        word, _, right = rest.partition("]")
        rows.append((left, word, right, no))
    out = []
    for qid, rows in groups.items():
        where = f"{path}:{rows[0][3]}"
        if len(rows) != 5:
            raise RnnlensError(f"{where}: question {qid} has {len(rows)} candidate lines, expected 5 (a-e)")
        left, _, right, _ = rows[0]
        for l2, _, r2, no in rows[1:]:
            if l2.strip() != left.strip() or r2.strip() != right.strip():
                raise RnnlensError(f"{path}:{no}: the sentence differs from {qid}a) outside the brackets")
        out.append(_msr_question(qid, left, right, [r[1] for r in rows], tokenizer, where))
    return out


def read_msr_questions(path, tokenizer: Tokenizer | None = None) -> list[CompletionQuestion]:
    """MSR Sentence Completion questions, in either published form (detected from the file):

    - CSV (testing_data.csv): header `id,question,a),b),c),d),e)`; the question has the gap
      written as a run of underscores (`_____`).
    - Holmes machine format (Holmes.machine_format.questions.txt): five lines per question,
      `1a) ... [crying] ...` to `1e) ... [walking] ...`, the candidate in brackets.

    Filled sentences are tokenised with `tokenizer` (default: lowercased, punctuation split,
    rnnlens' usual Tokenizer; pass the model's own so the tokens match its training text).
    The pieces left of, in and right of the gap are tokenised apart, so `spans` is exact.
    -> questions in file order, answers None (see read_msr_answers / read_msr_completion).
    """
    tokenizer = tokenizer or Tokenizer()
    lines = _lines(path)
    first = next((ln for ln in lines if ln.strip()), None)
    if first is None:
        raise RnnlensError(f"{path} has no questions")
    if _MSR_MACHINE.match(first):
        out = _msr_questions_machine(path, lines, tokenizer)
    elif first.lstrip("\ufeff").strip().lower().startswith("id,"):
        out = _msr_questions_csv(path, [ln.lstrip("\ufeff") if i == 0 else ln for i, ln in enumerate(lines)],
                                 tokenizer)
    else:
        raise RnnlensError(f"{path}:1: not an MSR questions file: expected a CSV header "
                           "'id,question,a),b),c),d),e)' or Holmes machine-format lines '1a) ... [word] ...'")
    if not out:
        raise RnnlensError(f"{path} has no questions")
    return out


def read_msr_answers(path) -> dict[str, int]:
    """MSR answers -> {question id: index 0..4}. Three forms are read:

    - CSV (test_answer.csv): header `id,answer`, rows `1,c`;
    - Holmes machine format (Holmes.machine_format.answers.txt): the correct line, `1c) ... [word] ...`;
    - Holmes human format (Holmes.human_format.answers.txt): `1) [c] word`.
    """
    lines = _lines(path)
    first = next((ln.lstrip("\ufeff") for ln in lines if ln.strip()), None)
    if first is None:
        raise RnnlensError(f"{path} has no answers")
    out: dict[str, int] = {}

    def put(qid: str, letter: str, no: int) -> None:
        letter = letter.strip().lower().rstrip(")")
        if letter not in tuple(MSR_LETTERS):
            raise RnnlensError(f"{path}:{no}: answer {letter!r} is not one of a, b, c, d, e")
        if qid in out:
            raise RnnlensError(f"{path}:{no}: question {qid} is answered twice")
        out[qid] = MSR_LETTERS.index(letter)

    if first.strip().lower().replace(" ", "").startswith("id,answer"):
        for no, line in enumerate(lines[1:], 2):
            if not line.strip():
                continue
            parts = [p.strip().strip('"') for p in line.split(",")]
            if len(parts) != 2 or not parts[0]:
                raise RnnlensError(f"{path}:{no}: expected 'id,answer'")
            put(parts[0], parts[1], no)
    else:
        for no, line in enumerate(lines, 1):
            if not line.strip():
                continue
            m = _MSR_MACHINE.match(line) or _MSR_HUMAN_ANSWER.match(line)
            if not m:
                raise RnnlensError(f"{path}:{no}: expected 'id,answer' CSV, '<number><a-e>) sentence' "
                                   "or '<number>) [<a-e>] word'")
            put(m.group(1), m.group(2), no)
    return out


def read_msr_completion(questions_path, answers_path=None,
                        tokenizer: Tokenizer | None = None) -> list[CompletionQuestion]:
    """Questions with their gold answers attached (answers_path None: answers stay None).
    Every question must have an answer and every answer a question."""
    questions = read_msr_questions(questions_path, tokenizer)
    if answers_path is None:
        return questions
    answers = read_msr_answers(answers_path)
    ids = [q.id for q in questions]
    lacking = [i for i in ids if i not in answers]
    if lacking:
        raise RnnlensError(f"{answers_path}: no answer for {len(lacking)} question(s) of {questions_path}, "
                           f"e.g. {lacking[0]}")
    extra = sorted(set(answers) - set(ids))
    if extra:
        raise RnnlensError(f"{answers_path}: {len(extra)} answer(s) for questions not in {questions_path}, "
                           f"e.g. {extra[0]}; is it the key of another file?")
    for q in questions:
        q.answer = answers[q.id]
    return questions
