"""Argument checks for the scans' public functions, before any kernel reads a pointer.

The C++ kernels trust their arguments' shapes (they index raw memory), so a mask, a
coefficient or a start state of the wrong shape must be refused here, with an InputError (a
ValueError) naming it, rather than read past its end.
"""
from __future__ import annotations

import operator

import torch

from ..errors import InputError


def shape_of(t) -> tuple | str:
    """What an error message says was given: a tensor's shape, else the type's name."""
    return tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__


def expect(name: str, t: torch.Tensor | None, *shape: int | None) -> None:
    """t (skipped when None) must be a tensor of exactly `shape` (None: any size there)."""
    if t is None:
        return
    ok = isinstance(t, torch.Tensor) and t.dim() == len(shape) and \
        all(want is None or have == want for have, want in zip(t.shape, shape))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise InputError(f"{name} must be of shape {want}, got {shape_of(t)}")


def integer(name: str, value, low: int = 0, high: int | None = None, what: str = "") -> int:
    """value as an int in [low, high) (high None: >= low), else InputError naming it (and
    `what` it is); a bool is not an integer here."""
    try:
        i = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        i = None
    if i is None or i < low or (high is not None and i >= high):
        span = f"in [{low}, {high})" if high is not None else f">= {low}"
        raise InputError(f"{name} must be {what + ', ' if what else ''}an integer {span}, got {value!r}")
    return i


def mask_of(mask: torch.Tensor | None, B: int, T: int) -> torch.Tensor | None:
    """mask [B,T] as bool (any dtype is taken as mask != 0), or None; InputError otherwise."""
    if mask is None:
        return None
    expect("mask", mask, B, T)
    return mask if mask.dtype == torch.bool else mask != 0
