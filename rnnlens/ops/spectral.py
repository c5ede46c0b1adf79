"""Spectral normalisation of a stacked recurrent matrix, one gate block at a time.

torch.nn.utils.parametrizations.spectral_norm divides a weight by its largest singular value.
A GRU or LSTM keeps its recurrent matrices stacked, W_h = [W_hr; W_hz; W_hn] ([3H, H]) or
[W_hi; W_hf; W_hg; W_ho] ([4H, H]), so applied to W_h it bounds the stack as one matrix,
while a cell written with one matrix per gate (as the implicit-ngrams authors' cells are)
has each gate's W_h* normalised by its own. `per_gate_spectral_norm(module, name)` does the
latter: every H x H block of the [k*H, H] weight is divided by its own largest singular
value, each estimated as torch's is (one power iteration per forward in training mode, from
vectors kept as buffers, 15 at the start). With k = 1 it is torch's spectral_norm.
`spectral_norm_ref` is the plain computation it is tested against (exact SVD per block).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils import parametrize


def gate_blocks(weight: torch.Tensor) -> int:
    """How many H x H blocks a [k*H, H] recurrent weight stacks (1 if its rows are not a
    multiple of its columns)."""
    rows, cols = weight.shape
    return rows // cols if rows % cols == 0 else 1


class _PerGateSpectralNorm(nn.Module):
    def __init__(self, weight: torch.Tensor, blocks: int, n_power_iterations: int = 1, eps: float = 1e-12):
        super().__init__()
        if weight.ndim != 2 or weight.shape[0] % blocks:
            raise ValueError(f"a [k*H, H] weight with k = {blocks} blocks, got {tuple(weight.shape)}")
        self.blocks, self.n_power_iterations, self.eps = blocks, n_power_iterations, eps
        W = self._blocks(weight.detach())
        u = F.normalize(W.new_empty(blocks, W.shape[1]).normal_(0, 1), dim=-1, eps=eps)
        v = F.normalize(W.new_empty(blocks, W.shape[2]).normal_(0, 1), dim=-1, eps=eps)
        self.register_buffer("_u", u)
        self.register_buffer("_v", v)
        self._power_method(W, 15)

    def _blocks(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.view(self.blocks, weight.shape[0] // self.blocks, weight.shape[1])

    @torch.autograd.no_grad()
    def _power_method(self, W: torch.Tensor, n: int) -> None:
        for _ in range(n):
            self._u = F.normalize(torch.bmm(W, self._v[..., None])[..., 0], dim=-1, eps=self.eps, out=self._u)
            self._v = F.normalize(torch.bmm(W.transpose(1, 2), self._u[..., None])[..., 0], dim=-1,
                                  eps=self.eps, out=self._v)

    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        W = self._blocks(weight)
        if self.training:
            self._power_method(W, self.n_power_iterations)
        u = self._u.clone(memory_format=torch.contiguous_format)
        v = self._v.clone(memory_format=torch.contiguous_format)
        sigma = (u[:, :, None] * W * v[:, None, :]).sum((1, 2))        # u_k^T W_k v_k
        return (W / sigma[:, None, None]).reshape(weight.shape)

    def right_inverse(self, value: torch.Tensor) -> torch.Tensor:
        return value                     # as torch's: assigning sets the unnormalised weight


def per_gate_spectral_norm(module: nn.Module, name: str = "weight") -> nn.Module:
    """Normalise module.<name> ([k*H, H]) block by block (see the module docstring)."""
    weight = getattr(module, name)
    parametrize.register_parametrization(module, name, _PerGateSpectralNorm(weight, gate_blocks(weight)))
    return module


def spectral_norm_ref(weight: torch.Tensor, blocks: int) -> torch.Tensor:
    """Each H x H block of a [k*H, H] weight divided by its exact largest singular value."""
    W = weight.view(blocks, weight.shape[0] // blocks, weight.shape[1])
    return (W / torch.linalg.matrix_norm(W, ord=2)[:, None, None]).reshape(weight.shape)
