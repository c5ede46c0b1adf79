"""Sentence log-probabilities from a language model, by the sentence-level convention of
training (recurrent-memory paper, Section 4.2): each sentence is read from a zero state as
[<eos>, w1 .. wn] and scores the predictions [w1 .. wn, <eos>].

    lp = sentence_logprobs(model, vocab, [["the", "cat", "sat"], ["a", "dog"]])   # [2] float64

Shapes: S sentences, B batch, T time (n + 1 for a sentence of n words), V vocabulary.
Pure functions of (model, vocab, sentences); the model runs in eval mode without gradients.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ..data.batching import EOS, Batch, sentence_collate
from ..data.vocab import Vocab
from ..errors import RnnlensError


def sentence_batch(vocab: Vocab, sentences: list[list[str]]) -> Batch:
    """Word lists (without <eos>; unknown words become <unk>) -> a right-padded Batch with
    tokens [B,T] = [<eos>, w1..wn], targets [B,T] = [w1..wn, <eos>], mask [B,T], T = max n + 1."""
    if EOS not in vocab:
        raise RnnlensError(f"the vocabulary has no {EOS}: this is not a language model's vocabulary")
    if not sentences:
        raise RnnlensError("no sentences to score")
    return sentence_collate([vocab.encode(list(s) + [EOS]) for s in sentences], vocab.stoi[EOS])


@torch.no_grad()
def token_logprobs(model, batch: Batch) -> torch.Tensor:
    """log p(target_t | prefix) at every position, [B,T] float64, 0 on padding. Runs the
    encoder from a zero state (no carried stream state) in eval mode."""
    if getattr(model, "task", None) != "lm":
        raise RnnlensError(f"sentence log-probabilities need a language model, not a {model.task!r} model")
    was_training = model.training
    model.eval()
    try:
        states, _ = model.encoder(batch.tokens, batch.mask)
        out = model.head(states, batch)
        head = model.head
        if head.adaptive is not None:          # the output is the projected states
            B, T, D = out.shape
            logp = head.adaptive.log_prob(out.reshape(B * T, D)).view(B, T, -1)
        else:
            logp = F.log_softmax(out.double(), -1)
        lp = logp.gather(-1, batch.targets[..., None])[..., 0].double()
    finally:
        model.train(was_training)
    return lp * batch.mask.to(lp.dtype)


def sentence_logprobs(model, vocab: Vocab, sentences: list[list[str]], batch_size: int = 64) -> torch.Tensor:
    """The total log-probability of each sentence, its final <eos> included: [S] float64.

    Sentences are batched by length (so the answer does not depend on the batch they share)
    and returned in the order given. With a bidirectional memory block the numbers are
    scores, not normalised probabilities: the block sees words after the one it predicts.
    """
    if batch_size < 1:
        raise RnnlensError("batch_size must be >= 1")
    device = next(model.parameters()).device
    order = sorted(range(len(sentences)), key=lambda i: len(sentences[i]))
    out = torch.zeros(len(sentences), dtype=torch.float64)
    for s in range(0, len(order), batch_size):
        idx = order[s: s + batch_size]
        batch = sentence_batch(vocab, [sentences[i] for i in idx]).to(device)
        out[idx] = token_logprobs(model, batch).sum(1).cpu()
    return out
