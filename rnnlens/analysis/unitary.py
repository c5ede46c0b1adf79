"""Reading a URN's word matrices (Bernardy and Lappin, "Unitary Recurrent Networks", Sec.
11.4 and the analyses of Tables 11.1-11.5). Pure functions of matrices; n is the state size.

  average_effect      ||Q - I||_F^2 = 2 (n - trace Q)          Sec. 11.4.6, Lemma 11.4
  signature           rotation angles and planes of Q           Sec. 11.4.5, Table 11.2
  plane_similarity    sum of singular values of B^T A           Def. 11.6, Theorem 11.8, Table 11.1
  projection          Q seen from the prediction layer's rows   Sec. 11.4.8, Tables 11.3, 11.5
  frobenius_table     distances between word matrices           Sec. 11.4.4, Table 11.4
  phrase_embedding    the ordered product of word matrices      Sec. 11.2.4, Table 11.2 (pairs)
  word_matrices       Q(x) of given words from a model          (input to all of the above)

Order: the cell runs h_t = Q(x_t) h_{t-1}, so the phrase w_1 ... w_m acts on a state as
Q(w_m) ... Q(w_1) (the paper's monoid w1 . w2 = w2 x w1); phrase_embedding builds that.
"""
from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import RnnlensError


def _stack(mats) -> torch.Tensor:
    if isinstance(mats, torch.Tensor):
        return mats
    return torch.stack([torch.as_tensor(m) for m in mats])


def average_effect(Q: torch.Tensor) -> torch.Tensor:
    """||Q - I||_F^2 of Q[..., n, n] -> [...] (Sec. 11.4.6).

    By Theorem 11.7 it is n times the mean of ||Q s - s||^2 over random unit vectors s. For
    an orthogonal Q it equals 2 (n - trace Q) (Lemma 11.4 with P = I), i.e.
    sum_planes 4 (1 - cos theta) + 2 x (number of reflected directions): large angles, large
    effect."""
    n = Q.shape[-1]
    eye = torch.eye(n, dtype=Q.dtype, device=Q.device)
    return ((Q - eye) ** 2).sum((-2, -1))


@dataclass
class Signature:
    """The rotations an orthogonal Q[n, n] is made of (Sec. 11.4.5):
    Q = sum_planes (rotation by angles[j] in planes[j]) + fixed directions + reflections.

    angles:      [k] float64, each rotation plane's angle once, in (tol, pi], largest first.
                 A pair of eigenvalues -1 is one plane turned by pi.
    planes:      [k, n, 2] float64, an orthonormal basis (columns) of each plane. Only the
                 plane is defined, not the basis (and not the plane, when two angles are equal).
    fixed:       directions Q leaves in place: eigenvalue +1, and planes turned by <= tol
                 (2 each).
    reflections: directions Q flips that do not pair into a pi-rotation (0 or 1; 1 only
                 when det Q = -1, never for Q = expm(S)).
    """

    angles: torch.Tensor
    planes: torch.Tensor
    fixed: int
    reflections: int

    @property
    def degrees(self) -> list[float]:
        return [math.degrees(a) for a in self.angles.tolist()]


def signature(Q, tol: float = 1e-6) -> Signature:
    """The signature of an orthogonal Q[n, n] (torch or numpy), from the real Schur form
    Q = Z T Z^T (scipy.linalg.schur, output='real'). For a normal matrix T is block
    diagonal: a 2x2 block [[c, -s], [s, c]] is a rotation by atan2(|s|, c) in the plane of
    its two columns of Z; a 1x1 block is +1 (fixed) or -1 (reflected). Checks that Q is
    orthogonal (max |Q^T Q - I| <= 1e-5, which float32 word matrices meet), since the angles
    mean nothing otherwise."""
    from scipy.linalg import schur

    q = Q.detach().cpu().double().numpy() if isinstance(Q, torch.Tensor) else np.asarray(Q, dtype=np.float64)
    if q.ndim != 2 or q.shape[0] != q.shape[1]:
        raise RnnlensError(f"signature needs one square matrix, got shape {q.shape}")
    n = q.shape[0]
    err = np.abs(q.T @ q - np.eye(n)).max()
    if err > 1e-5:
        raise RnnlensError(f"signature needs an orthogonal matrix: max |Q^T Q - I| = {err:.1e}")
    T, Z = schur(q, output="real")
    angles, planes, minus, fixed = [], [], [], 0
    i = 0
    while i < n:
        if i + 1 < n and T[i + 1, i] != 0.0:                 # a 2x2 block: one plane
            c = 0.5 * (T[i, i] + T[i + 1, i + 1])
            s = math.sqrt(abs(T[i, i + 1] * T[i + 1, i]))
            theta = math.atan2(s, c)
            if theta <= tol:
                fixed += 2
            else:
                angles.append(theta)
                planes.append(Z[:, i: i + 2])
            i += 2
        else:
            if T[i, i] > 0:
                fixed += 1
            else:
                minus.append(Z[:, i])
            i += 1
    for a, b in zip(minus[0::2], minus[1::2]):               # -1, -1: a rotation by pi
        angles.append(math.pi)
        planes.append(np.stack([a, b], 1))
    reflections = len(minus) % 2
    order = np.argsort(-np.asarray(angles, dtype=np.float64), kind="stable")
    ang = torch.tensor([angles[j] for j in order], dtype=torch.float64)
    pl = (torch.tensor(np.stack([planes[j] for j in order]), dtype=torch.float64)
          if angles else torch.zeros(0, n, 2, dtype=torch.float64))
    return Signature(ang, pl, fixed, reflections)


def plane_similarity(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """sim(A, B) = max over 2x2 orthogonal Omega of <B, A Omega> = the sum of the singular
    values of B^T A (Def. 11.6, Theorem 11.8). A, B: [..., n, 2] orthonormal bases of two
    planes -> [...]. 2 for the same plane (in any basis), 0 for orthogonal planes.
    Omega ranges over rotations *and* reflections: restricted to rotations the maximum is
    s1 - s2 whenever det(B^T A) < 0 (the two bases have opposite orientations)."""
    return torch.linalg.svdvals(B.transpose(-1, -2) @ A).sum(-1)


def prediction_basis(P: torch.Tensor, dims: int | None = None) -> torch.Tensor:
    """An orthonormal basis [n, d] of the space spanned by the rows of P[m, n] (the
    prediction layer: one row per output class): the right singular vectors of P, largest
    singular value first, so the first basis vector is the state direction that moves the
    logits most. d = dims, or the rank of P (at most m). Sign: each vector's largest entry
    is positive (the singular vectors' sign is otherwise arbitrary)."""
    _, sv, Vh = torch.linalg.svd(P.double(), full_matrices=False)
    rank = int((sv > sv.max() * 1e-10).sum()) if sv.numel() else 0
    d = rank if dims is None else dims
    if not 1 <= d <= rank:
        raise RnnlensError(f"prediction_basis: dims must be between 1 and the rank of P ({rank}), got {d}")
    V = Vh[:d].T
    sign = torch.sign(V.gather(0, V.abs().argmax(0, keepdim=True)))
    return (V * sign).to(P.dtype)


def projection(Q: torch.Tensor, P: torch.Tensor, dims: int | None = None) -> torch.Tensor:
    """Q[..., n, n] projected onto the subspace spanned by the prediction layer's rows
    P[m, n] (Sec. 11.4.8, Tables 11.3 and 11.5): U^T Q U [..., d, d] with U =
    prediction_basis(P, dims). Entry (i, j) is the component along u_i of Q u_j: how the
    word moves the prediction-relevant directions into each other. Identity = no direct
    effect on the prediction; the top-left entry is the action on the most relevant
    direction (u_1, largest singular value of P). Not orthogonal in general.
    For a two-class softmax only w_1 - w_0 matters; pass P = (w_1 - w_0)[None] for that one
    direction (a 1x1 projection)."""
    U = prediction_basis(P, dims).to(Q.dtype)
    return U.T @ Q @ U


@dataclass
class FrobeniusTable:
    """Pairwise distances between word matrices (Table 11.4).
    names: [k]; values: [k, k] ||Q_i - Q_j||_F^2 (squared=True) or ||Q_i - Q_j||_F."""

    names: list[str]
    values: torch.Tensor
    squared: bool

    def as_dict(self) -> dict[str, dict[str, float]]:
        return {a: {b: float(self.values[i, j]) for j, b in enumerate(self.names)}
                for i, a in enumerate(self.names)}


def frobenius_table(mats, names: Sequence[str] | None = None, squared: bool = True) -> FrobeniusTable:
    """Distances between k word matrices mats[k, n, n] (or a list). Squared by default, the
    scale of the average effect: for orthogonal P, Q, ||P - Q||^2 = 2 (n - <P, Q>) (Lemma
    11.4) is n times the mean squared distance ||P s - Q s||^2 over unit s (Theorem 11.7);
    the paper's Table 11.4 reads as squared distances (values 4-12 beside effects 1-8 in
    Table 11.3), though its text does not say."""
    M = _stack(mats)
    k = M.shape[0]
    names = [str(i) for i in range(k)] if names is None else list(names)
    if len(names) != k:
        raise RnnlensError(f"frobenius_table: {k} matrices but {len(names)} names")
    D = ((M[:, None] - M[None]) ** 2).sum((-2, -1))
    return FrobeniusTable(names, D if squared else D.sqrt(), squared)


def phrase_embedding(mats) -> torch.Tensor:
    """The matrix of a phrase w_1 ... w_m from its words' matrices in reading order,
    mats[m, n, n] (or a list): Q(w_m) ... Q(w_1), so that running the cell over the phrase
    from h gives phrase_embedding(mats) @ h (h_t = Q(x_t) h_{t-1}). Identity for m = 0. The
    product is accumulated in float64 and returned in mats' dtype."""
    M = _stack(mats)
    out = torch.eye(M.shape[-1], dtype=torch.float64, device=M.device)
    for Qi in M:
        out = Qi.double() @ out
    return out.to(M.dtype)


@torch.no_grad()
def word_matrices(model_or_cell, embedding=None, vocab=None, words: Sequence[str] = ()) -> torch.Tensor:
    """The matrices [k, n, n] of `words`: Q(x) for a URN, A(x) for a LinearRNN, with x the
    word's row of `embedding`.

    model_or_cell: an RNNModel whose first cell is a URN/LinearRNN (its embedding is used
    when `embedding` is None), or such a cell itself (then `embedding` is required).
    vocab: maps words to ids (a rnnlens Vocab, or any dict-like word -> id). Words not in
    it raise RnnlensError (the unknown word's matrix is rarely what is meant)."""
    cell = model_or_cell
    if hasattr(model_or_cell, "encoder"):
        cell = model_or_cell.encoder.cells[0]
        if embedding is None:
            embedding = model_or_cell.embedding
    if not hasattr(cell, "word_matrix"):
        raise RnnlensError(f"word_matrices needs a URN or LinearRNN cell, got {type(cell).__name__}")
    if embedding is None or vocab is None:
        raise RnnlensError("word_matrices needs an embedding and a vocabulary")
    stoi = getattr(vocab, "stoi", vocab)
    missing = [w for w in words if w not in stoi]
    if missing:
        raise RnnlensError(f"not in the vocabulary: {', '.join(missing)}")
    weight = embedding.weight if hasattr(embedding, "weight") else embedding
    ids = torch.tensor([stoi[w] for w in words], dtype=torch.long, device=weight.device)
    # in float64 (a copy of the cell): a float32 Q is orthogonal to about 1e-7, and a phrase of
    # some hundreds of words multiplies that drift past what signature() accepts
    cell64 = copy.deepcopy(cell).double()
    return cell64.word_matrix(weight[ids].double())
