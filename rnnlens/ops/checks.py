"""Argument checks for the scans' public functions, before any kernel reads a pointer.

The C++ kernels trust their arguments' shapes (they index raw memory), so a mask, a
coefficient or a start state of the wrong shape must be refused here, with an InputError (a
ValueError) naming it, rather than read past its end.
"""
from __future__ import annotations

import torch

from ..errors import InputError


def expect(name: str, t: torch.Tensor | None, *shape: int | None) -> None:
    """t (skipped when None) must be a tensor of exactly `shape` (None: any size there)."""
    if t is None:
        return
    ok = isinstance(t, torch.Tensor) and t.dim() == len(shape) and \
        all(want is None or have == want for have, want in zip(t.shape, shape))
    if not ok:
        got = tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise InputError(f"{name} must be of shape {want}, got {got}")


def mask_of(mask: torch.Tensor | None, B: int, T: int) -> torch.Tensor | None:
    """mask [B,T] as bool (any dtype is taken as mask != 0), or None; InputError otherwise."""
    if mask is None:
        return None
    expect("mask", mask, B, T)
    return mask if mask.dtype == torch.bool else mask != 0
