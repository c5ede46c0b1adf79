"""Gradient checkpointing over time chunks (model.checkpoint_chunk, encoder.run_cell): the
same outputs, final states and gradients as one call, padded batches and recurrent dropout
included; cells that cannot be split refuse."""
import pytest
import torch
from tests.support import max_diff

from rnnlens.cells import CELLS
from rnnlens.data.batching import Batch
from rnnlens.encoder import run_cell
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.config import Config, ModelConfig

CELLS_CHECKED = ["gru", "lstm", "mvma-g", "rrnn-f", "rrnn-b-gated", "urn"]


def padded(B=4, T=23, E=6, lengths=(23, 17, 9, 1)):
    x = torch.randn(B, T, E, dtype=torch.float64, requires_grad=True)
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    return x, mask


def run_and_grads(cell, x, mask, chunk, seed=1):
    torch.manual_seed(seed)                      # the same recurrent dropout mask in both runs
    out, fin = run_cell(cell, x, mask, None, chunk)
    g = torch.Generator().manual_seed(2)
    loss = (out * torch.randn(out.shape, generator=g, dtype=out.dtype)).sum() + (fin * fin).sum()
    params = [p for p in cell.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [x, *params])
    return out, fin, grads


@pytest.mark.parametrize("name", CELLS_CHECKED)
@pytest.mark.parametrize("dropout", [0.0, 0.3])
def test_chunked_cell_equals_one_call(name, dropout):
    cell = CELLS[name](6, 6).double().train()
    cell.recurrent_dropout = dropout
    x, mask = padded()
    ref = run_and_grads(cell, x, mask, None)
    for chunk in (1, 5, 8):
        got = run_and_grads(cell, x, mask, chunk)
        assert max_diff(got[0], ref[0]) < 1e-12          # outputs, pads included
        assert max_diff(got[1], ref[1]) < 1e-12          # final states
        for a, b in zip(got[2], ref[2]):                 # d/dx and every parameter (relative:
            assert max_diff(a, b) < 1e-12 * (1 + b.abs().max().item())   # the URN's reach 1e5)


def test_chunked_cell_without_mask_and_in_eval_mode():
    cell = CELLS["gru"](6, 6).double().train()
    x, _ = padded()
    ref = run_and_grads(cell, x, None, None)
    got = run_and_grads(cell, x, None, 4)
    assert max_diff(got[0], ref[0]) < 1e-12
    assert all(max_diff(a, b) < 1e-12 * (1 + b.abs().max().item()) for a, b in zip(got[2], ref[2]))
    cell.eval()                                          # no checkpointing outside training
    with torch.no_grad():
        assert max_diff(run_cell(cell, x, None, None, 4)[0], cell(x)[0]) == 0


def batch(T=19, V=30, lengths=(19, 12, 5)):
    g = torch.Generator().manual_seed(3)
    B = len(lengths)
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    tokens = torch.randint(2, V, (B, T), generator=g) * mask
    return Batch(tokens, mask, mask.sum(1), torch.tensor([0, 1, 0]))


@pytest.mark.parametrize("name", ["gru", "lstm", "mvma-g", "rrnn-f", "urn"])
def test_model_with_checkpoint_chunk_matches_without(name):
    kw = {"cell": name, "embedding_dim": 6, "hidden_size": 6, "layers": 2, "bidirectional": True,
          "recurrent_dropout": 0.2, "layer_dropout": 0.1}
    if name == "urn":
        kw.update(embedding_dim=15, layers=1, bidirectional=False)   # its words are n(n-1)/2 vectors
    torch.manual_seed(0)
    plain = RNNModel(ModelConfig(**kw), 30, "classify", ["a", "b"]).double().train()
    chunked = RNNModel(ModelConfig(**kw, checkpoint_chunk=4), 30, "classify", ["a", "b"]).double().train()
    chunked.load_state_dict(plain.state_dict())
    b = batch()
    results = []
    for model in (plain, chunked):
        torch.manual_seed(5)
        loss = model.loss(model(b), b)
        grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
        results.append((loss, grads))
    assert max_diff(results[1][0], results[0][0]) < 1e-12
    for a, c in zip(results[0][1], results[1][1]):
        if a is not None:
            assert max_diff(c, a) < 1e-12 * (1 + a.abs().max().item())


def test_checkpoint_chunk_config_and_cells_that_cannot_be_split():
    with pytest.raises(RnnlensError, match="checkpoint_chunk"):
        Config.from_dict({"model": {"checkpoint_chunk": 0}})
    with pytest.raises(RnnlensError, match="checkpoint_chunk"):
        Config.from_dict({"model": {"cell": "transformer", "checkpoint_chunk": 8}})
    assert Config.from_dict({"model": {"checkpoint_chunk": 64}}).model.checkpoint_chunk == 64
    with pytest.raises(RnnlensError, match="first token"):          # MVM: g at each call's first token
        RNNModel(ModelConfig(cell="mvm-g", checkpoint_chunk=4), 30)
    x, mask = padded()
    with pytest.raises(RnnlensError, match="first token"):
        run_cell(CELLS["vm"](6, 6).double().train(), x, mask, None, 4)
