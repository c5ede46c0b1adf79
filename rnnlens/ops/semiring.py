"""Semirings as values (rational recurrences, Definition 1): <K, plus, times, zero, one>.

A `Semiring` is a frozen (name, zero, one) triple; its operations are chosen by name, so two
semirings are equal exactly when they are the same semiring, and they can be hashed, stored
in configs by name and compared. Every operation takes torch tensors (any shape, any
device; a Python number beside a tensor is broadcast) or plain Python floats (for the
WFSA code, which works on scalars):

    REAL      <R, +, *, 0, 1>                 sums over paths            (paper eq. 6)
    MAX_PLUS  <R u {-inf}, max, +, -inf, 0>   the best path (Viterbi)    (paper §5.2, eq. 21c)
    LOG       <R u {-inf}, logaddexp, +, -inf, 0>   log of REAL on exp'd weights
    MIN_PLUS  <R u {+inf}, min, +, +inf, 0>   the cheapest path (tropical)

In the max-plus, log and min-plus semirings a weight is a log-weight, so a forget gate
enters as log f (eq. 21a) and times is addition.

Gradients: LOG's plus and sum give gradient 0, not torch's nan, where every term is -inf
(a state that no path reaches yet): a -inf term contributes exp(-inf) = 0 to any finite
total downstream, so any finite value is right there, and 0 keeps the nan out.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from ..errors import RnnlensError

INF = math.inf


def _logaddexp(a: float, b: float) -> float:
    if a == b:                       # also +-inf == +-inf, where a - b would be nan
        return a + math.log(2.0) if a != -INF else a
    m, d = (a, b - a) if a > b else (b, a - b)
    return m + math.log1p(math.exp(d))


def _log_plus(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """torch.logaddexp, with gradient 0 instead of nan where both terms are -inf."""
    if not (a.requires_grad or b.requires_grad):
        return torch.logaddexp(a, b)
    dead = torch.isneginf(a) & torch.isneginf(b)
    out = torch.logaddexp(torch.where(dead, 0.0, a), torch.where(dead, 0.0, b))
    return out.masked_fill(dead, -INF)


def _log_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """torch.logsumexp over dim, with gradient 0 instead of nan where every term is -inf."""
    if not x.requires_grad:
        return torch.logsumexp(x, dim)
    dead = torch.isneginf(x).all(dim, keepdim=True)
    return torch.logsumexp(torch.where(dead, 0.0, x), dim).masked_fill(dead.squeeze(dim), -INF)


def _tensors(a, b):
    """torch.maximum and friends want two tensors: lift a number to the other's dtype/device."""
    if not isinstance(a, torch.Tensor):
        a = torch.as_tensor(a, dtype=b.dtype, device=b.device)
    elif not isinstance(b, torch.Tensor):
        b = torch.as_tensor(b, dtype=a.dtype, device=a.device)
    return a, b


def _add(a, b):
    return a + b


def _mul(a, b):
    return a * b


# name -> (plus on tensors, plus on floats, times, tensor sum over dim, tensor prod over dim)
_OPS = {
    "real": (torch.add, _add, _mul, torch.sum, torch.prod),
    "max-plus": (torch.maximum, max, _add, torch.amax, torch.sum),
    "log": (_log_plus, _logaddexp, _add, _log_sum, torch.sum),
    "min-plus": (torch.minimum, min, _add, torch.amin, torch.sum),
}
_IDEMPOTENT = {"max-plus", "min-plus"}


@dataclass(frozen=True)
class Semiring:
    """A semiring <K, plus, times, zero, one>. Tensors or Python floats in, the same out."""

    name: str
    zero: float
    one: float

    def __post_init__(self):
        if self.name not in _OPS:
            raise RnnlensError(f"no semiring operations for {self.name!r}; valid: {', '.join(_OPS)}")

    def plus(self, a, b):
        """a (+) b, elementwise."""
        tensor_plus, float_plus = _OPS[self.name][:2]
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return tensor_plus(*_tensors(a, b))
        return float_plus(a, b)

    def times(self, a, b):
        """a (x) b, elementwise."""
        return _OPS[self.name][2](a, b)

    def sum(self, x, dim: int | None = None):
        """(+)-reduction of a tensor over dim (all elements if None), or of an iterable of floats.
        An empty reduction gives zero."""
        return self._reduce(x, dim, _OPS[self.name][3], self.plus, self.zero)

    def prod(self, x, dim: int | None = None):
        """(x)-reduction of a tensor over dim (all elements if None), or of an iterable of floats.
        An empty reduction gives one."""
        return self._reduce(x, dim, _OPS[self.name][4], self.times, self.one)

    @property
    def is_idempotent(self) -> bool:
        """a (+) a == a for every a (max and min): the sum picks one path, so the best path is
        the value, and its arguments can be traced back."""
        return self.name in _IDEMPOTENT

    @staticmethod
    def _reduce(x, dim, tensor_op, binary, identity):
        if not isinstance(x, torch.Tensor):
            return functools.reduce(binary, x, identity)
        if dim is None:
            x, dim = x.reshape(-1), 0
        dim = dim % x.dim()
        if x.shape[dim] == 0:           # amax/amin refuse empty reductions
            return x.new_full(x.shape[:dim] + x.shape[dim + 1:], identity)
        return tensor_op(x, dim)


REAL = Semiring("real", 0.0, 1.0)
MAX_PLUS = Semiring("max-plus", -INF, 0.0)
LOG = Semiring("log", -INF, 0.0)
MIN_PLUS = Semiring("min-plus", INF, 0.0)

SEMIRINGS = {"real": REAL, "max-plus": MAX_PLUS, "log": LOG, "min-plus": MIN_PLUS}


def get_semiring(name_or_semiring: str | Semiring) -> Semiring:
    """A Semiring from its name in SEMIRINGS (or the Semiring itself); RnnlensError otherwise."""
    if isinstance(name_or_semiring, Semiring):
        return name_or_semiring
    try:
        return SEMIRINGS[name_or_semiring]
    except (KeyError, TypeError):
        raise RnnlensError(f"unknown semiring {name_or_semiring!r}; valid: {', '.join(SEMIRINGS)}") from None
