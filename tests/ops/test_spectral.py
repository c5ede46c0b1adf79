"""Per-gate spectral normalisation (rnnlens.ops.spectral) against the exact per-block
computation, its gradients, and every registered cell built with it: each gate block bounded,
training and a checkpoint round trip."""
import pytest
import torch

from rnnlens.ops.spectral import _PerGateSpectralNorm, gate_blocks, per_gate_spectral_norm, spectral_norm_ref


@pytest.mark.parametrize("k", [1, 3, 4])
def test_each_block_is_divided_by_its_largest_singular_value(k):
    torch.manual_seed(0)
    lin = torch.nn.Linear(6, 6 * k, bias=False).double()
    with torch.no_grad():
        lin.weight.mul_(torch.arange(1, 6 * k + 1, dtype=torch.float64)[:, None])   # blocks of unlike norms
    raw = lin.weight.detach().clone()
    per_gate_spectral_norm(lin, "weight")
    lin.train()
    for _ in range(50):
        W = lin.weight                                 # one power iteration per access in training
    torch.testing.assert_close(W, spectral_norm_ref(raw, k), rtol=1e-8, atol=1e-8)
    norms = torch.linalg.matrix_norm(W.detach().view(k, 6, 6), ord=2)
    torch.testing.assert_close(norms, torch.ones(k, dtype=torch.float64), rtol=1e-8, atol=1e-8)
    if k > 1:                                          # the stack as a whole is not bounded by 1
        assert torch.linalg.matrix_norm(W.detach(), ord=2) > 1.01


def test_gradients_are_those_of_w_over_u_w_v():
    """In eval mode (u, v fixed) the weight is W_k / (u_k^T W_k v_k): its gradient is that
    expression's (gradcheck, float64), as torch's spectral_norm's is."""
    torch.manual_seed(1)
    W = torch.randn(12, 4, dtype=torch.float64)
    sn = _PerGateSpectralNorm(W, 3).eval()
    u, v = sn._u.clone(), sn._v.clone()

    def ref(w):
        B = w.view(3, 4, 4)
        return (B / torch.einsum("ki,kij,kj->k", u, B, v)[:, None, None]).reshape(12, 4)

    x = W.clone().requires_grad_()
    torch.testing.assert_close(sn(x), ref(x), rtol=1e-12, atol=1e-12)
    assert torch.autograd.gradcheck(lambda w: sn(w), (x,))
    g = torch.randn(12, 4, dtype=torch.float64)
    torch.testing.assert_close(torch.autograd.grad(sn(x), x, g)[0], torch.autograd.grad(ref(x), x, g)[0])


def test_gate_blocks():
    assert gate_blocks(torch.empty(12, 4)) == 3 and gate_blocks(torch.empty(4, 4)) == 1
    assert gate_blocks(torch.empty(10, 4)) == 1


def _recurrent_cells():
    from rnnlens.cells import CELLS
    from rnnlens.config import ModelConfig
    from rnnlens.encoder import build_cell

    out = []
    for name in CELLS:
        try:
            cell = build_cell(ModelConfig(cell=name, embedding_dim=6, hidden_size=5), 6)
        except Exception:
            continue
        if cell.recurrent_weights():
            out.append(name)
    return out


@pytest.mark.parametrize("name", _recurrent_cells())
def test_every_cell_with_a_recurrent_matrix_takes_per_gate_norm(name, tmp_path):
    """Every registered cell that names a recurrent matrix: built with spectral_norm_per_gate,
    each gate block's norm ends near 1 or below after training forwards, the model trains, and
    a checkpoint loads back to the same outputs."""
    from rnnlens.config import Config
    from rnnlens.data.batching import Batch
    from rnnlens.data.vocab import Vocab
    from rnnlens.models import RNNModel
    from rnnlens.train.checkpoint import load_checkpoint, save_checkpoint

    torch.manual_seed(0)
    cfg = Config.from_dict({"model": {"cell": name, "embedding_dim": 6, "hidden_size": 5, "spectral_norm": True,
                                      "spectral_norm_per_gate": True}})
    model = RNNModel(cfg.model, 12, "classify", ["a", "b"])
    b = Batch(torch.randint(2, 12, (3, 4)), torch.ones(3, 4, dtype=torch.bool), torch.full((3,), 4),
              torch.tensor([0, 1, 1]))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model.train()
    for _ in range(20):
        opt.zero_grad()
        model.loss(model(b), b).backward()
        opt.step()
    for module, pname in model.encoder.cells[0].recurrent_weights():
        W = getattr(module, pname).detach()
        k = gate_blocks(W)
        assert torch.linalg.matrix_norm(W.view(k, -1, W.shape[1]), ord=2).max() < 1.05
    model.eval()
    save_checkpoint(tmp_path, model, cfg, Vocab([f"w{i}" for i in range(10)]), ["a", "b"])
    loaded, *_ = load_checkpoint(tmp_path)
    torch.testing.assert_close(loaded(b), model(b), rtol=1e-6, atol=1e-6)


def test_per_gate_needs_spectral_norm():
    from rnnlens.config import Config
    from rnnlens.errors import RnnlensError

    with pytest.raises(RnnlensError, match="spectral_norm_per_gate needs model.spectral_norm"):
        Config.from_dict({"model": {"cell": "gru", "spectral_norm_per_gate": True}})
