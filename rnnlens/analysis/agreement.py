"""Number agreement as a language-model test (Linzen et al. 2016; Gulordava et al. 2018):
after the words before the verb, does the model give the correct verb form a higher
probability than the wrong one? Accuracy overall and by number of attractors, with
Wilson 95% intervals (the unitary-networks paper, Fig. 11.6, plots these intervals).

The test sets are the line-aligned .text/.gold files of colorlessgreenRNNs (read by
rnnlens.data.agreement.read_agreement_testset); the model is an rnnlens language model
(task "lm"), e.g. one trained on WikiText-2.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data.agreement import read_agreement_testset
from ..data.batching import Example, collate
from ..errors import RnnlensError
from ..metrics import accuracy_by, wilson_interval


def lm_log_probs(head, h: torch.Tensor) -> torch.Tensor:
    """Next-word log-probabilities [B,V] from states h[B,H] through an LMHead (full or
    adaptive softmax)."""
    out = head(h[:, None, :], None)[:, 0]
    if head.adaptive is not None:
        return head.adaptive.log_prob(out)
    return F.log_softmax(out, -1)


@torch.no_grad()
def agreement_lm_eval(model, vocab, path, batch_size: int = 64, bos: str | None = "<eos>") -> dict:
    """Score every item of an agreement test set with a language model.

    model: an RNNModel with task "lm"; vocab: its Vocab. path: a test set (NAME, NAME.text,
    or its folder; see read_agreement_testset). Each prefix is read from a fresh state,
    after `bos` when the vocabulary has it (a stream-trained LM such as WikiText-2's has
    seen "<eos>" before every sentence); prefix words outside the vocabulary are read as
    <unk>. An item is scored when both verb forms are in the vocabulary and differ;
    the others are counted in `skipped`.

    -> {"n", "skipped", "accuracy", "low", "high" (Wilson 95%),
        "by_attractors": {str(count): {n, correct, accuracy, error, low, high}} (-1 = unknown),
        "unknown_rate": the share of prefix tokens read as <unk>,
        "correct": per item True / False, or None when skipped}
    """
    if getattr(model, "task", None) != "lm":
        raise RnnlensError("agreement_lm_eval needs a language model (task 'lm'), "
                           f"not {getattr(model, 'task', None)!r}")
    items = read_agreement_testset(path)
    start = [bos] if bos is not None and bos in vocab else []
    todo = [i for i, it in enumerate(items)
            if it.correct in vocab and it.wrong in vocab and it.correct != it.wrong and (start or it.prefix)]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    correct: list = [None] * len(items)
    unknown = total = 0
    try:
        for s in range(0, len(todo), batch_size):
            chunk = [items[i] for i in todo[s: s + batch_size]]
            batch = collate([Example(start + it.prefix) for it in chunk], vocab).to(device)
            unknown += int((batch.tokens == vocab.unk_id).sum())
            total += int(batch.mask.sum())
            model.reset_state()                       # each prefix from a fresh state
            states = model.encode(batch)
            model.reset_state()
            last = states[torch.arange(len(chunk), device=device), batch.lengths - 1]
            logp = lm_log_probs(model.head, last)
            good = torch.tensor([vocab.stoi[it.correct] for it in chunk], device=device)
            bad = torch.tensor([vocab.stoi[it.wrong] for it in chunk], device=device)
            rows = torch.arange(len(chunk), device=device)
            wins = (logp[rows, good] > logp[rows, bad]).tolist()
            for i, w in zip(todo[s: s + batch_size], wins):
                correct[i] = bool(w)
    finally:
        model.train(was_training)
    scored = todo
    hits = [correct[i] for i in scored]
    k, n = sum(hits), len(hits)
    low, high = wilson_interval(k, n)
    attractors = [-1 if items[i].attractors is None else items[i].attractors for i in scored]
    return {"n": n, "skipped": len(items) - n, "accuracy": k / n if n else 0.0, "low": low, "high": high,
            "by_attractors": accuracy_by(hits, attractors, interval=True),
            "unknown_rate": unknown / total if total else 0.0, "correct": correct}
