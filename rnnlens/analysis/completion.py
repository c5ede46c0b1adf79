"""Sentence completion (the MSR Sentence Completion Challenge; recurrent-memory paper,
Section 6): each question has five candidate words for one gap; every filled sentence is
scored by its total log-probability under a language model, its final <eos> included, and
the best-scoring candidate is the answer.

The same score is used for every model, unidirectional or with a bidirectional memory
block (as the paper does): for a bidirectional block the "log-probability" is the sum of
the model's per-token log-softmax scores, which are not a normalised distribution over
sentences since the block sees words after the one it predicts, but they still rank the
five candidates. Ties go to the first candidate (a..e order).

Shapes: Q questions, C = 5 candidates.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..errors import RnnlensError

LETTERS = "abcde"


@dataclass
class CompletionResult:
    """scores [Q,C] float64 (total log-probabilities); choices [Q] (argmax, first on ties);
    answers: gold indices (None where unknown); accuracy over the answered questions (None
    without answers); ids: the question ids; oov [Q]: how many candidates are outside the
    model's vocabulary (they are scored as <unk>)."""

    ids: list[str]
    scores: torch.Tensor
    choices: list[int]
    answers: list[int | None]
    oov: list[int]

    @property
    def answered(self) -> int:
        return sum(a is not None for a in self.answers)

    @property
    def correct(self) -> int:
        return sum(a is not None and a == c for a, c in zip(self.answers, self.choices))

    @property
    def accuracy(self) -> float | None:
        return self.correct / self.answered if self.answered else None

    def to_dict(self, questions: Sequence | None = None) -> dict:
        rows = []
        for i, qid in enumerate(self.ids):
            row = {"id": qid, "choice": LETTERS[self.choices[i]], "scores": self.scores[i].tolist(),
                   "answer": None if self.answers[i] is None else LETTERS[self.answers[i]],
                   "oov_candidates": self.oov[i]}
            if questions is not None:
                row["candidates"] = list(questions[i].candidates)
                row["chosen_word"] = questions[i].candidates[self.choices[i]]
            if self.answers[i] is not None:
                row["correct"] = self.answers[i] == self.choices[i]
            rows.append(row)
        return {"questions": len(self.ids), "answered": self.answered, "correct": self.correct,
                "accuracy": self.accuracy, "oov_questions": sum(n > 0 for n in self.oov), "choices": rows}


TIE = 1e-5     # scores within TIE * max(1, |best|) of a question's best are tied (the first wins)


def choose(scores: torch.Tensor) -> list[int]:
    """[Q,C] scores -> the index of the highest score per question, the first on ties. Scores
    within TIE (relative) of the best count as tied: a float32 model scores the same sentence
    differently in the last bits depending on its batch (the other sentences' lengths), and
    candidates the model cannot tell apart (all unknown words) must not be decided by that."""
    if scores.dim() != 2 or scores.shape[0] == 0:
        raise RnnlensError(f"expected scores [questions, candidates], got shape {tuple(scores.shape)}")
    best = scores.max(-1, keepdim=True).values
    tied = scores >= best - TIE * best.abs().clamp(min=1)
    return tied.to(torch.int8).argmax(-1).tolist()       # the first True


def complete(score: Callable[[list[list[str]]], torch.Tensor], questions: Sequence,
             vocab=None) -> CompletionResult:
    """Answer questions (msr.CompletionQuestion, or anything with .id, .sentences,
    .answer, .candidates) with a sentence scorer: score(list of token lists) -> [S] total
    log-probabilities. All filled sentences go to the scorer in one call (it batches).
    vocab (optional) counts the candidates it does not know."""
    if not questions:
        raise RnnlensError("no questions to answer")
    flat, sizes = [], []
    for q in questions:
        if len(q.sentences) < 2:
            raise RnnlensError(f"question {q.id} has {len(q.sentences)} candidate(s); at least 2 are needed")
        flat.extend(list(s) for s in q.sentences)
        sizes.append(len(q.sentences))
    if len(set(sizes)) != 1:
        raise RnnlensError("every question must have the same number of candidates")
    values = torch.as_tensor(score(flat), dtype=torch.float64).reshape(len(questions), sizes[0])
    oov = [0] * len(questions)
    if vocab is not None:
        oov = [sum(any(w not in vocab for w in _candidate_tokens(q, c)) for c in range(sizes[0])) for q in questions]
    return CompletionResult([str(q.id) for q in questions], values, choose(values),
                            [getattr(q, "answer", None) for q in questions], oov)


def _candidate_tokens(q, c: int) -> list[str]:
    spans = getattr(q, "spans", None)
    if spans is None:
        return [q.candidates[c]]
    s, e = spans[c]
    return list(q.sentences[c][s:e])


def complete_with_model(model, vocab, questions: Sequence, batch_size: int = 64) -> CompletionResult:
    """complete() with the model's sentence log-probabilities (analysis.lm.sentence_logprobs):
    a sentence-level language model, unidirectional or with a bidirectional memory block."""
    from .lm import sentence_logprobs

    if getattr(model, "task", None) != "lm":
        raise RnnlensError(f"sentence completion needs a language model; this model's task is "
                           f"{getattr(model, 'task', None)!r}")
    return complete(lambda sents: sentence_logprobs(model, vocab, sents, batch_size), questions, vocab)


def format_result(res: CompletionResult, questions: Sequence | None = None, show: int = 0) -> str:
    """Accuracy line (and the first `show` questions' choices) for the terminal."""
    lines = []
    if res.accuracy is not None:
        lines.append(f"accuracy {res.accuracy:.4f} ({res.correct}/{res.answered} questions)")
    else:
        lines.append(f"{len(res.ids)} questions answered (no gold answers given)")
    n_oov = sum(n > 0 for n in res.oov)
    if n_oov:
        lines.append(f"{n_oov} question(s) have candidates outside the model's vocabulary (scored as <unk>)")
    for i in range(min(show, len(res.ids))):
        word = f" {questions[i].candidates[res.choices[i]]}" if questions is not None else ""
        gold = "" if res.answers[i] is None else f" (gold {LETTERS[res.answers[i]]})"
        lines.append(f"  {res.ids[i]}: {LETTERS[res.choices[i]]}){word}{gold}")
    return "\n".join(lines)
