"""The language-model head's fast path (its output layer through rnnlens.ops.linear, no masked
copy of the logits when a batch has no pad) against the plain reference: torch's F.linear and
boolean indexing, in values and gradients, for every form of the head (full softmax, tied,
tied through a projection, adaptive) with and without pads."""
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from rnnlens.heads.lm import LMHead


def _reference_nll(head: LMHead, states: torch.Tensor, batch) -> torch.Tensor:
    m = batch.mask
    if head.adaptive is not None:
        return head.adaptive(states[m], batch.targets[m]).loss * m.sum()
    h = states if head.proj is None else F.linear(states, head.proj.weight)
    logits = F.linear(h, head.out.weight, head.out.bias)
    return F.cross_entropy(logits[m], batch.targets[m], reduction="sum")


@pytest.mark.parametrize("form", ["full", "tied", "tied-proj", "adaptive"])
@pytest.mark.parametrize("pads", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_nll_and_gradients_match_the_reference(form, pads, dtype):
    torch.manual_seed(0)
    V, H = 40, 6
    emb = nn.Embedding(V, 4 if form == "tied-proj" else H)
    head = LMHead(H, V, embedding=emb, tie=form.startswith("tied"),
                  cutoffs=[10, 20] if form == "adaptive" else None).to(dtype)
    B, T = 3, 5
    mask = torch.ones(B, T, dtype=torch.bool)
    if pads:
        mask[1, 3:] = False
        mask[2, 1:] = False
    batch = SimpleNamespace(mask=mask, targets=torch.randint(0, V, (B, T)))
    states = torch.randn(B, T, H, dtype=dtype, requires_grad=True)
    params = [p for p in head.parameters() if p.requires_grad]
    got = head.nll_sum(head(states, batch), batch)
    g_got = torch.autograd.grad(got, [states, *params])
    want = _reference_nll(head, states, batch)
    g_want = torch.autograd.grad(want, [states, *params])
    tol = 1e-10 if dtype == torch.float64 else 1e-4
    assert torch.allclose(got, want, rtol=tol, atol=tol)
    for a, b in zip(g_got, g_want):
        assert torch.allclose(a, b, rtol=tol, atol=tol)
    # the loss is the mean over the real tokens, the same either way
    assert torch.allclose(head.loss(head(states, batch), batch), want / mask.sum(), rtol=tol, atol=tol)


def test_an_adaptive_softmax_tail_with_no_units_is_named_and_builds_without_torch_warnings():
    """torch gives tail cluster i input_size // 4**i units: with two cutoffs an 8-unit output
    leaves the second tail none (its words share its probability evenly). The head builds
    without torch's zero-element warning, and says which tails are empty."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert LMHead(8, 1000, cutoffs=[100, 500]).empty_tails() == [2]
        head = LMHead(16, 1000, cutoffs=[100, 500])
    assert [t[0].out_features for t in head.adaptive.tail] == [4, 1] and head.empty_tails() == []
    assert LMHead(8, 1000).empty_tails() == []


def test_a_list_flag_reads_commas_or_json_brackets():
    from rnnlens.config import parse_flag
    from rnnlens.errors import RnnlensError

    hint = list[int] | None
    assert parse_flag("2000,10000", hint, "x") == parse_flag("[2000, 10000]", hint, "x") == [2000, 10000]
    with pytest.raises(RnnlensError, match=r"x must be a comma-separated list of integers \(e.g. 2000,10000\)"):
        parse_flag("10,x", hint, "x")
