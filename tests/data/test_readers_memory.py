"""Readers for the recurrent-memory-networks paper: MSR Sentence Completion (both published
forms) and CoNLL-U parses. Hand-made fixtures in tests/fixtures/, exact expected values."""
from pathlib import Path

import pytest

from rnnlens.data import conllu, msr
from rnnlens.data.tokenize import Tokenizer
from rnnlens.errors import RnnlensError
from tests.support import FIXTURES as FIX

Q_CSV, A_CSV = FIX / "msr_questions.csv", FIX / "msr_answers.csv"
Q_TXT, A_TXT = FIX / "msr_questions.machine.txt", FIX / "msr_answers.machine.txt"


def write(tmp_path, name, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8", newline="")
    return p


def raises_at(path, line: int):
    return pytest.raises(RnnlensError, match=f"^{str(path)}:{line}:")


# --- MSR sentence completion ---------------------------------------------------------

@pytest.mark.parametrize("path", [Q_CSV, Q_TXT])
def test_msr_questions_both_forms(path):
    qs = msr.read_msr_questions(path)
    assert [q.id for q in qs] == ["1", "2", "3"]
    assert all(q.answer is None for q in qs)
    q = qs[2]
    assert q.candidates == ["barked", "slept", "wrote", "read", "sang"]
    assert q.text == "The dog _____ at the stranger."
    assert q.sentences[0] == ["the", "dog", "barked", "at", "the", "stranger", "."]
    assert q.sentences[4] == ["the", "dog", "sang", "at", "the", "stranger", "."]
    assert q.spans == [(2, 3)] * 5
    q = qs[1]
    assert q.candidates[0] == "bedroom"
    # the hyphen inside a word stays (Tokenizer), the comma after the gap is its own token
    assert q.sentences[0][:12] == ["it", "was", "furnished", "partly", "as", "a", "sitting-room", "and",
                                   "partly", "as", "a", "bedroom"]
    assert q.sentences[0][12] == "," and q.spans[0] == (11, 12)
    assert qs[0].sentences[2][qs[0].spans[2][0]] == "residing"


def test_msr_both_forms_give_the_same_questions():
    a = msr.read_msr_completion(Q_CSV, A_CSV)
    b = msr.read_msr_completion(Q_TXT, A_TXT)
    assert [(q.id, q.candidates, q.sentences, q.spans, q.answer) for q in a] == \
           [(q.id, q.candidates, q.sentences, q.spans, q.answer) for q in b]
    assert [q.answer for q in a] == [2, 0, 0]


def test_msr_answers_three_forms(tmp_path):
    assert msr.read_msr_answers(A_CSV) == {"1": 2, "2": 0, "3": 0}
    assert msr.read_msr_answers(A_TXT) == {"1": 2, "2": 0, "3": 0}
    human = write(tmp_path, "h.txt", "1) [c] residing\n2) [a] bedroom\n3) [a] barked\n")
    assert msr.read_msr_answers(human) == {"1": 2, "2": 0, "3": 0}


def test_msr_tokenizer_is_the_callers():
    qs = msr.read_msr_questions(Q_CSV, Tokenizer(lowercase=False, split_punct=False))
    assert qs[2].sentences[0] == ["The", "dog", "barked", "at", "the", "stranger."]
    assert qs[2].spans[0] == (2, 3)


def test_msr_csv_header_variants_and_bom(tmp_path):
    p = write(tmp_path, "q.csv", "\ufeffid,question,a,b,c,d,e\n7,a _____ b,x,y,z,u,v\n")
    (q,) = msr.read_msr_questions(p)
    assert q.id == "7" and q.sentences[3] == ["a", "u", "b"]


@pytest.mark.parametrize("text,line,needle", [
    ("id,question,a),b),c),d)\n1,x _____ y,a,b,c,d\n", 1, "missing e)"),
    ("id,question,a),b),c),d),e)\n1,no gap here,a,b,c,d,e\n", 2, "exactly one gap"),
    ("id,question,a),b),c),d),e)\n1,x _____ y _____,a,b,c,d,e\n", 2, "exactly one gap"),
    ("id,question,a),b),c),d),e)\n1,x _____ y,a,b,c,d\n", 2, "expected 7 CSV fields"),
    ("id,question,a),b),c),d),e)\n1,x _____ y,a,b,c,d,e\n\n1,x _____ y,a,b,c,d,e\n", 4, "occurs twice"),
    ("id,question,a),b),c),d),e)\n1,x _____ y,a,,c,d,e\n", 2, "candidate b) is empty"),
    ("1a) x [a] y\n1b) x [b] y\n1c) x [c] y\n1e) x [e] y\n", 4, "expected 1d)"),
    ("1a) x [a] y\n1b) x b y\n", 2, "exactly one [word]"),
    ("1a) x [a] y\n1b) x [b] z\n1c) x [c] y\n1d) x [d] y\n1e) x [e] y\n", 2, "differs from 1a)"),
    ("1a) x [a] y\n1b) x [b] y\n2a) x [a] y\n", 1, "has 2 candidate lines"),
    ("1a) x [a] y\nhello\n", 2, "expected '<number><a-e>)"),
    ("hello\n", 1, "not an MSR questions file"),
])
def test_msr_questions_malformed(tmp_path, text, line, needle):
    p = write(tmp_path, "q.txt", text)
    with raises_at(p, line) as e:
        msr.read_msr_questions(p)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)


def test_msr_machine_lines_of_a_question_must_be_together(tmp_path):
    five = "".join(f"1{c}) x [{c}] y\n" for c in "abcde")
    p = write(tmp_path, "q.txt", five + "2a) x [a] y\n1a) x [a] y\n")
    with raises_at(p, 7, ) as e:
        msr.read_msr_questions(p)
    assert "not together" in str(e.value)


@pytest.mark.parametrize("text,line,needle", [
    ("id,answer\n1,f\n", 2, "not one of a, b"),
    ("id,answer\n1\n", 2, "expected 'id,answer'"),
    ("id,answer\n1,a\n1,b\n", 3, "answered twice"),
    ("1c) x [c] y\nnonsense\n", 2, "expected 'id,answer' CSV"),
])
def test_msr_answers_malformed(tmp_path, text, line, needle):
    p = write(tmp_path, "a.txt", text)
    with raises_at(p, line) as e:
        msr.read_msr_answers(p)
    assert needle in str(e.value)


def test_msr_answers_must_match_the_questions(tmp_path):
    few = write(tmp_path, "few.csv", "id,answer\n1,c\n2,a\n")
    with pytest.raises(RnnlensError, match="no answer for 1 question.*e.g. 3"):
        msr.read_msr_completion(Q_CSV, few)
    more = write(tmp_path, "more.csv", "id,answer\n1,c\n2,a\n3,a\n9,b\n")
    with pytest.raises(RnnlensError, match="1 answer.*not in.*e.g. 9"):
        msr.read_msr_completion(Q_CSV, more)


@pytest.mark.parametrize("reader", [msr.read_msr_questions, msr.read_msr_answers, conllu.read_conllu])
def test_missing_and_empty_files(tmp_path, reader):
    with pytest.raises(RnnlensError, match="does not exist"):
        reader(tmp_path / "nope")
    with pytest.raises(RnnlensError, match="has no"):
        reader(write(tmp_path, "empty", "\n\n"))


# --- CoNLL-U ---------------------------------------------------------------------------

def test_conllu_fixture():
    sents = conllu.read_conllu(FIX / "deps.conllu")
    assert [s.forms for s in sents] == [["the", "dog", "barked"],
                                        ["she", "said", "that", "he", "would", "come"],
                                        ["i", "wo", "n't", "go"]]   # 2-3 and 4.1 skipped
    assert sents[0].heads == [2, 3, 0] and sents[0].deprels == ["det", "nsubj", "root"]
    assert sents[1].heads == [2, 0, 6, 6, 6, 2]
    assert sents[1].deprels == ["nsubj", "root", "mark", "nsubj", "aux", "ccomp"]
    assert sents[2].heads == [4, 4, 4, 0] and sents[2].deprels == ["nsubj", "aux", "advmod", "root"]
    assert sents[0].arcs() == [(0, 1, "det"), (1, 2, "nsubj")]
    assert [s.line for s in sents] == [3, 8, 17]
    assert len(sents[1]) == 6


def _row(i, form, head, rel="dep"):
    return f"{i}\t{form}\t_\t_\t_\t_\t{head}\t{rel}\t_\t_\n"


@pytest.mark.parametrize("text,line,needle", [
    ("1\ta\t_\t_\t_\t_\t0\troot\t_\n", 1, "expected 10 tab-separated"),
    (_row(1, "a", 0, "root") + _row(3, "b", 1), 2, "expected word ID 2, got 3"),
    (_row(1, "a", 0, "root") + _row(2, "b", 5), 2, "HEAD 5 is past the end"),
    (_row(1, "a", 0, "root") + _row(2, "b", "_"), 2, "is not an integer"),
    (_row(1, "a", 0, "root") + _row(2, "b", 1, "_"), 2, "DEPREL is empty"),
    (_row(1, "a", 1, "root"), 1, "its own head"),
    (_row("x", "a", 0, "root"), 1, "is not a word index"),
    ("# c\n" + _row(1, "a", 2) + _row(2, "b", 1), 2, "has no root"),
])
def test_conllu_malformed(tmp_path, text, line, needle):
    p = write(tmp_path, "p.conllu", text)
    with raises_at(p, line) as e:
        conllu.read_conllu(p)
    assert needle in str(e.value)
    assert "\n" not in str(e.value)
