"""MM (Yessenalina and Cardie, 2011), a baseline of the implicit-ngrams paper: the context is
the product of one d x d matrix per token."""
from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import RnnlensError
from .base import LinearView
from .ngram import AffineCell, _eye


class MatrixLeftView(LinearView):
    """A_ext(x_t) vec(M) = vec(A(x_t) M): every column of the d x d state matrix (stored
    row-major as d*d coordinates) is left-multiplied by A(x_t), A: [B,T,d,d]."""

    def __init__(self, g, mask, A, readout=slice(None), exact=True, h0=None):
        super().__init__(g, mask, readout, exact, h0)
        self.A = A
        self.d = A.shape[-1]

    def _apply(self, t, V):
        B, K, _ = V.shape
        d = self.d
        return (self.at("A", t)[:, None] @ V.reshape(B, K, d, d)).reshape(B, K, d * d)

    def _rapply(self, t, R):
        # (R A_ext)[k,l] = sum_i A[i,k] R[i,l], i.e. A^T R in matrix form.
        B, K, _ = R.shape
        d = self.d
        return (self.at("A", t)[:, None].transpose(-1, -2) @ R.reshape(B, K, d, d)).reshape(B, K, d * d)



class MM(AffineCell):
    """MM (Yessenalina and Cardie, 2011): a d x d matrix per token, A(x) = reshape(W x + b,
    d, d), and the context is the matrix M_{1:t} = A(x_t) ... A(x_1), flattened row-major
    as the hidden state (hidden_size = d*d, state_size = hidden_size).

    As an affine cell: A_ext(x_t) vec(M) = vec(A(x_t) M) (A(x_t) acting on every column of
    M, i.e. A(x_t) kron I_d on the row-major vec) and the g-term vec(A(x_1)) only at the
    first token (additive=False). Initialisation: b = vec(I) and W small, std
    0.1/sqrt(E d), so each entry of the perturbation N(x) = A(x) - I has std about 0.1/sqrt(d)
    for unit-variance inputs and ||(I + N) v||^2 ~ (1 + 0.01) ||v||^2: a product over 50
    tokens grows by about 1.3x. (With std 0.1/sqrt(E) the spectral norm of A(x) starts near
    2 and the products of a 50-token sentence overflow.)
    No recurrent matrix to normalise (the per-token matrices are the inputs' own).

    model.token_matrices: each token's embedding is its matrix, A(x) = I + reshape(x, d, d),
    with no shared projection (embedding_dim = hidden_size = d*d); the embeddings start at
    std 0.1/sqrt(d), the perturbation above. An optimiser's step then moves only the
    matrices of the tokens in the batch, where a step on the shared W moves every token's."""
    settings = frozenset({"clamp"})           # no recurrent matrix to normalise

    additive = False

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        d = math.isqrt(hidden_size)
        if d * d != hidden_size:
            raise ValueError(f"mm needs hidden_size = d*d (a perfect square), got {hidden_size}")
        self.input_size, self.hidden_size, self.state_size = input_size, hidden_size, hidden_size
        self.d = d
        self.W = nn.Linear(input_size, hidden_size)
        with torch.no_grad():
            nn.init.normal_(self.W.weight, std=0.1 / math.sqrt(input_size * d))
            self.W.bias.copy_(torch.eye(d).reshape(-1))

    def configure(self, cfg) -> None:
        """Cell.configure, and model.token_matrices (see the class docstring)."""
        super().configure(cfg)
        if cfg.token_matrices:
            if self.input_size != self.hidden_size:
                raise RnnlensError(f"model.token_matrices needs embedding_dim = hidden_size (each embedding "
                                   f"is a {self.d} x {self.d} matrix): got {self.input_size} and "
                                   f"{self.hidden_size}")
            self.W = None

    def init_embedding(self, embedding: nn.Embedding) -> None:
        if self.W is None:
            with torch.no_grad():
                nn.init.normal_(embedding.weight, std=0.1 / math.sqrt(self.d))
                if embedding.padding_idx is not None:
                    embedding.weight[embedding.padding_idx].zero_()

    def _A(self, x):
        if self.W is None:
            return x.reshape(*x.shape[:-1], self.d, self.d) + _eye(x, self.d)
        return self.W(x).reshape(*x.shape[:-1], self.d, self.d)

    def _view(self, x, mask):
        A = self._A(x)
        return MatrixLeftView(A.reshape(*x.shape[:-1], self.hidden_size), mask, A)

    def matrices_ref(self, x):
        """Dense A(x_t) kron I_d, [B,T,d*d,d*d] (a test-only reference: d^4 numbers a step),
        and g = vec(A(x_t))."""
        A = self._A(x)
        d = self.d
        I = _eye(x, d)
        A_ext = torch.einsum("...ij,kl->...ikjl", A, I)         # kron(A, I) of every step (none: B = 0)
        return A_ext.reshape(*x.shape[:-1], d * d, d * d), A.reshape(*x.shape[:-1], d * d)
