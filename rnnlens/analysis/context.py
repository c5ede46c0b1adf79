"""Context representations: the vector each sentence is summarised into, the one the output
layer reads, and their 2-D t-SNE projection (implicit-ngrams paper, Figure 7).

The representation is the head's pooled state: the final state (for a bidirectional
encoder, the forward direction at the last token concatenated with the backward direction
at the first, as `RNNEncoder.final` builds it) or the mean of the states, whichever the
model was trained with; for a head with an MLP it is the MLP's input. Pure functions: no
plotting, no files.
"""
from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import torch

from ..errors import RnnlensError

SENTENCE_TASKS = ("classify", "regress", "relation")


@torch.no_grad()
def context_representations(model, batches: Iterable, max_n: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Run the model over `batches` (rnnlens Batches with targets) and collect, per sentence,
    the pooled state its head reads.

    -> (features [N, D] float32, labels [N]: class indices, or floats for regression), at
    most max_n sentences, in batch order. D = hidden_size * directions.
    """
    task = getattr(model, "task", "classify")
    if task not in SENTENCE_TASKS:
        raise RnnlensError(f"context representations are per sentence; a {task!r} model has none "
                           f"(tasks with one: {', '.join(SENTENCE_TASKS)})")
    if max_n < 1:
        raise RnnlensError(f"max_n must be at least 1, not {max_n}")
    was = model.training
    model.eval()
    feats, labels, n = [], [], 0
    try:
        for batch in batches:
            h = model.head.pool(model.encode(batch), batch)                 # [B,D]
            take = min(len(batch), max_n - n)
            feats.append(h[:take].float().cpu().numpy())
            if batch.targets is not None:
                labels.append(batch.targets[:take].cpu().numpy())
            n += take
            if n >= max_n:
                break
    finally:
        model.train(was)
    if not feats:
        raise RnnlensError("no sentences to represent: the split is empty")
    y = np.concatenate(labels) if len(labels) == len(feats) else np.full(n, -1)
    return np.concatenate(feats), y


def tsne(features: np.ndarray, seed: int = 0, perplexity: float = 30.0) -> np.ndarray:
    """2-D t-SNE of features [N, D] -> [N, 2] (scikit-learn's TSNE, PCA initialisation).
    The perplexity is clipped below N, as TSNE requires; N must be at least 3."""
    from sklearn.manifold import TSNE

    x = np.asarray(features, dtype=np.float32)
    if x.ndim != 2:
        raise RnnlensError(f"t-SNE takes features [N, D], got shape {x.shape}")
    n = x.shape[0]
    if n < 3:
        raise RnnlensError(f"t-SNE needs at least 3 points, got {n}")
    perp = float(min(perplexity, max(1.0, (n - 1) / 3)))
    return TSNE(n_components=2, perplexity=perp, init="pca", learning_rate="auto",
                random_state=seed).fit_transform(x).astype(np.float32)
