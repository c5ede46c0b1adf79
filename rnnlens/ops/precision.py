"""Mixed precision: how the recurrences run under torch.autocast.

Under `torch.autocast(device_type, dtype=torch.bfloat16)` (or float16) torch runs matrix
products in the lower precision and returns it. A recurrence must not carry its state in it:
bfloat16 keeps 8 bits of mantissa, so an increment smaller than 1/256 of the state is lost
(an LSTM cell state at 1.0 no longer takes increments of 1e-3), and a gate near 1 is rounded
to a step of 1/256 (a forget gate of 0.998 becomes 0.996 or 1.0), which over hundreds of
steps decides what the state remembers. So, throughout rnnlens:

- matrix products of inputs and weights run in the autocast dtype (`ops.linear.linear`,
  like torch.nn.functional.linear);
- what a product gives is taken to float32 before the gates and coefficients are formed
  from it (`full_precision`);
- the fused scans (`ops.affine`, `ops.elementwise`) take every input in float32 and run
  with autocast off (`no_autocast`, and `no_autocast_backward` on their backward), so the
  state and its per-step products stay float32 on every device.

Parameters, gradients and optimizer state stay float32: a gradient comes back in the dtype
of the tensor it belongs to. float64 tensors are never touched (autocast leaves them alone).

    autocast_dtype(device_type)   the dtype autocast is enabled with there, or None
    full_precision(t)             t in float32 where it is bfloat16 or float16, else t itself
    no_autocast(device_type)      a context with autocast off for that device type
    no_autocast_backward(fn)      decorates an autograd.Function's backward to run with
                                  autocast off for its gradients' device type
"""
from __future__ import annotations

import contextlib
import functools

import torch

LOW_PRECISION = (torch.bfloat16, torch.float16)


def autocast_dtype(device_type: str) -> torch.dtype | None:
    """The dtype of the enabled torch.autocast for `device_type` ("cpu", "cuda"), or None."""
    try:
        if not torch.is_autocast_enabled(device_type):
            return None
        return torch.get_autocast_dtype(device_type)
    except (TypeError, AttributeError, RuntimeError):   # torch < 2.4: per-device functions
        if device_type == "cpu":
            return torch.get_autocast_cpu_dtype() if torch.is_autocast_cpu_enabled() else None
        if device_type == "cuda":
            return torch.get_autocast_gpu_dtype() if torch.is_autocast_enabled() else None
        return None


def full_precision(t: torch.Tensor | None) -> torch.Tensor | None:
    """t as float32 where it is bfloat16 or float16 (differentiably: its gradient comes back
    in t's dtype); any other tensor, and None, unchanged."""
    if t is not None and t.dtype in LOW_PRECISION:
        return t.float()
    return t


def no_autocast(device_type: str):
    """A context with autocast off for `device_type` (a no-op context where it is off already)."""
    if autocast_dtype(device_type) is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type, enabled=False)


def no_autocast_backward(backward):
    """Decorator for the backward of a torch.autograd.Function whose forward runs in float32
    with autocast off: the backward does too, even when `.backward()` is called inside an
    autocast region (where torch.mm would otherwise return the lower precision)."""
    @functools.wraps(backward)
    def wrapper(ctx, *grads):
        device = next((g.device.type for g in grads if isinstance(g, torch.Tensor)), "cpu")
        with no_autocast(device):
            return backward(ctx, *grads)
    return wrapper
