"""model.cell_bias false: every recurrent cell's bias terms are zero and stay zero through
training, checkpoints and a second training phase, for every registered cell."""
import pytest
import torch

from rnnlens.cells import CELLS
from rnnlens.config import Config
from rnnlens.data.batching import Batch
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel, cell_biases
from rnnlens.train.checkpoint import load_checkpoint, load_weights
from tests.support import UNTRAINED_WORDS, untrained_checkpoint


def _cfg(cell, **model):
    size = 9 if cell == "mm" else 6     # mm's hidden size is d*d
    emb = 3 if cell == "mm" else 5
    return Config.from_dict({"model": {"cell": cell, "embedding_dim": emb, "hidden_size": size, **model}})


def _batch():
    mask = torch.arange(7)[None] < torch.tensor([7, 4, 2])[:, None]
    tokens = torch.randint(2, 12, (3, 7), generator=torch.Generator().manual_seed(0)) * mask
    return Batch(tokens, mask, mask.sum(1), torch.tensor([0, 1, 0]))


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_biases_are_zero_untrained_and_every_other_weight_trains(cell):
    torch.manual_seed(0)
    cfg = _cfg(cell, cell_bias=False, bidirectional=True, layers=2, init_range=0.3)
    model = RNNModel(cfg.model, 12, "classify", ["a", "b"])
    held = cell_biases(model)
    if cell != "urn":                   # the URN has no bias term
        assert held
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    opt = torch.optim.Adagrad([p for p in model.parameters() if p.requires_grad], lr=0.1, weight_decay=0.1)
    for _ in range(2):
        batch = _batch()
        opt.zero_grad()
        model.loss(model(batch), batch).backward()
        opt.step()
    for name, p in model.named_parameters():
        if name in held:
            assert not p.requires_grad and p.grad is None and not p.any(), name
        elif name.startswith("encoder.cells"):
            assert not torch.equal(p, before[name]), f"{name} did not train"


@pytest.mark.parametrize("cell", sorted(CELLS))
def test_a_checkpoint_keeps_the_biases_held(cell, tmp_path):
    size = 9 if cell == "mm" else 4
    path = untrained_checkpoint(tmp_path / "m", cell=cell, cell_bias=False, hidden_size=size,
                                embedding_dim=3 if cell == "mm" else 4)
    model, cfg, _, _ = load_checkpoint(path)
    assert cfg.model.cell_bias is False
    assert all(not p.requires_grad and not p.any() for p in cell_biases(model).values())


def test_init_from_a_model_with_biases_is_refused(tmp_path):
    src = untrained_checkpoint(tmp_path / "m", cell="gru")
    model, _, _, _ = load_checkpoint(src)
    with torch.no_grad():
        for p in cell_biases(model).values():
            p.fill_(0.5)
    from rnnlens.train.checkpoint import save_checkpoint
    cfg = Config.from_dict({"model": {"embedding_dim": 4, "hidden_size": 4, "cell": "gru"}})
    (tmp_path / "biased").mkdir()
    save_checkpoint(tmp_path / "biased", model, cfg, Vocab(UNTRAINED_WORDS), ["negative", "positive"], "classify")
    held = RNNModel(_cfg("gru", cell_bias=False, embedding_dim=4, hidden_size=4).model, len(Vocab(UNTRAINED_WORDS)),
                    "classify", ["negative", "positive"])
    with pytest.raises(RnnlensError, match="model.cell_bias false"):
        load_weights(held, tmp_path / "biased", Vocab(UNTRAINED_WORDS), "classify", ["negative", "positive"])
    with pytest.raises(RnnlensError, match="model.cell_bias false"):      # an untrained model's own biases
        load_weights(held, src, Vocab(UNTRAINED_WORDS), "classify", ["negative", "positive"])
    zero = untrained_checkpoint(tmp_path / "zero", cell="gru", cell_bias=False)
    load_weights(held, zero, Vocab(UNTRAINED_WORDS), "classify", ["negative", "positive"])
    assert all(not p.requires_grad for p in cell_biases(held).values())


def test_forget_bias_needs_the_biases():
    with pytest.raises(RnnlensError, match="model.forget_bias needs"):
        _cfg("lstm", cell_bias=False, forget_bias=1.0)
