"""Registry-wide sweep: what the design promises for every cell family, head and encoder, checked
for all of them (tests elsewhere check some of these for a few members only).

Models (every registered cell, the transformer and the memory networks, under the
classification, tagging and language-model heads, bidirectional where allowed), tiny sizes:
  - a padded batch gives the outputs and final states of each row run alone (eval, float64);
  - save_checkpoint then load_checkpoint gives bit-identical outputs;
  - every trainable parameter gets a gradient (none silently unused);
  - eval outputs are the same on two calls with every dropout set;
  - an empty batch (B = 0) and one-token rows run.
Cells: an empty batch through the fast path and the step reference; eval-mode gradients (what
captum attributes through) equal the step reference's; the decomposition's parts plus
remainder rebuild the states under pads on the left and inside a row, from a start state.
"""
from __future__ import annotations

import pytest
import torch

from tests.support import max_diff
from rnnlens.analysis import ngrams as ng
from rnnlens.cells import CELLS
from rnnlens.cells.memory import MemoryBlock, memory_block_ref
from rnnlens.config import Config
from rnnlens.data.batching import Batch
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.train.checkpoint import load_checkpoint, save_checkpoint

V, E, H = 10, 5, 4                    # hidden 4 = 2 x 2, as the mm cell needs
LABELS = {"classify": ["a", "b", "c"], "tag": ["O", "B-X", "I-X"], "lm": None}
DATA = {"classify": {}, "tag": {"task": "tag"}, "lm": {"corpus": "ptb"}}
MEMORY = {"rm": {"memory": "rm"}, "rmr-temporal": {"memory": "rmr", "memory_temporal": True},
          "rm-linear-bidirectional": {"memory": "rm", "memory_composition": "linear", "memory_bidirectional": True}}


def _cases():
    """(id, task, model settings) for every encoder x head the config accepts."""
    out = []
    for cell in CELLS:
        for task in ("classify", "tag", "lm"):
            out.append((f"{cell}-{task}", task, {"cell": cell}))
        for task in ("classify", "tag"):
            out.append((f"{cell}-{task}-bi", task, {"cell": cell, "bidirectional": True}))
    for task in ("classify", "tag"):
        out.append((f"transformer-{task}", task, {"cell": "transformer", "heads": 2}))
    for name, m in MEMORY.items():
        out.append((f"lstm-{name}-lm", "lm", {"cell": "lstm", "memory_size": 2, **m}))
    return out


CASES = _cases()
IDS = [c[0] for c in CASES]
CASES = [c[1:] for c in CASES]


def build(task: str, model: dict, **extra) -> tuple[Config, RNNModel]:
    data = {**DATA[task], **({"sentence_level": True} if "memory" in model else {})}
    cfg = Config.from_dict({"data": data, "model": {"embedding_dim": E, "hidden_size": H, **model, **extra}})
    torch.manual_seed(0)
    m = RNNModel(cfg.model, V, task, LABELS[task], sentence_level=cfg.data.sentence_level)
    with torch.no_grad():             # biases away from zero so that they matter
        for n, p in m.named_parameters():
            if "bias" in n:
                p.uniform_(-0.5, 0.5)
    return cfg, m


def make_batch(task: str, lengths=(5, 3, 1), T: int | None = None) -> Batch:
    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor(lengths, dtype=torch.long)
    T = T if T is not None else max(1, int(lengths.max()) if len(lengths) else 1)
    mask = torch.arange(T)[None] < lengths[:, None]
    tokens = torch.randint(2, V, (len(lengths), T), generator=g) * mask
    if task == "classify":
        targets = torch.randint(0, 3, (len(lengths),), generator=g)
    else:
        targets = torch.randint(0, 3, (len(lengths), T), generator=g) * mask
    return Batch(tokens, mask, lengths, targets)


def row(b: Batch, i: int) -> Batch:
    L = int(b.lengths[i])
    t = b.targets[i: i + 1] if b.targets.dim() == 1 else b.targets[i: i + 1, :L]
    return Batch(b.tokens[i: i + 1, :L], b.mask[i: i + 1, :L], b.lengths[i: i + 1], t)


def forward(model: RNNModel, b: Batch) -> torch.Tensor:
    model.reset_state()               # a stream LM would carry the state of the call before
    return model(b)


# --- models -------------------------------------------------------------------------------------

@pytest.mark.parametrize("task,model", CASES, ids=IDS)
def test_padded_batch_equals_each_row_alone(task, model):
    _, m = build(task, model)
    m = m.double().eval()
    b = make_batch(task)
    with torch.no_grad():
        out = forward(m, b)
        _, finals = m.encoder(b.tokens, b.mask)
        for i, L in enumerate(b.lengths.tolist()):
            alone = forward(m, row(b, i))
            got = out[i] if task == "classify" else out[i, :L]
            assert max_diff(got, alone[0]) < 1e-10
            if finals is not None:    # the transformer keeps no state
                _, fin_alone = m.encoder(row(b, i).tokens, row(b, i).mask)
                for f, fa in zip(finals, fin_alone):
                    assert max_diff(f[i], fa[0]) < 1e-10


@pytest.mark.parametrize("task,model", CASES, ids=IDS)
def test_checkpoint_round_trip_is_bit_identical(task, model, tmp_path):
    cfg, m = build(task, model)
    m.eval()
    b = make_batch(task)
    with torch.no_grad():
        out = forward(m, b)
    save_checkpoint(tmp_path, m, cfg, Vocab([f"w{i}" for i in range(V - 2)]), LABELS[task], task)
    loaded, *_ = load_checkpoint(tmp_path)
    assert not loaded.training
    with torch.no_grad():
        again = forward(loaded, b)
    print(f"max |diff| = {(out - again).abs().max().item():.3e}")
    assert torch.equal(out, again)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("task,model", CASES[:3], ids=IDS[:3])
def test_a_checkpoint_comes_back_in_the_precision_it_was_saved_in(task, model, dtype, tmp_path):
    """A model converted to float64 (for analysis, say) and saved loads as float64, bit-identical;
    a float32 one as float32."""
    cfg, m = build(task, model)
    m = m.to(dtype).eval()
    b = make_batch(task)
    with torch.no_grad():
        out = forward(m, b)
    save_checkpoint(tmp_path, m, cfg, Vocab([f"w{i}" for i in range(V - 2)]), LABELS[task], task)
    loaded, *_ = load_checkpoint(tmp_path)
    assert {p.dtype for p in loaded.parameters()} == {dtype}
    with torch.no_grad():
        assert torch.equal(out, forward(loaded, b))


OPTIONS = [("classify", {"cell": "gru", "spectral_norm": True}),
           ("classify", {"cell": "lstm", "spectral_norm": True, "spectral_norm_per_gate": True}),
           ("classify", {"cell": "gru", "mlp_hidden": 3, "output_bias": True, "pooling": "mean"}),
           ("classify", {"cell": "lstm", "cell_bias": False, "layers": 2}),
           ("classify", {"cell": "mm", "token_matrices": True, "embedding_dim": 4}),
           ("classify", {"cell": "urn", "truncation": 2, "word_dropout": "matrix"}),
           ("classify", {"cell": "va-w", "window": 2}),
           ("lm", {"cell": "gru", "tie_weights": True}),
           ("lm", {"cell": "elman", "tie_weights": True, "embedding_dim": 6}),
           ("lm", {"cell": "lstm", "adaptive_softmax": [4]})]


@pytest.mark.parametrize("task,model", OPTIONS, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items())
                         if isinstance(o, dict) else o)
def test_checkpoint_round_trip_with_model_options(task, model, tmp_path):
    test_checkpoint_round_trip_is_bit_identical(task, model, tmp_path)


@pytest.mark.parametrize("task,model", CASES, ids=IDS)
def test_every_trainable_parameter_gets_a_gradient(task, model):
    _, m = build(task, model)
    m.train()
    b = make_batch(task, (5, 5, 4))   # full rows: a max-plus bias can lose every max on short ones
    m.loss(forward(m, b), b).backward()
    unused = [n for n, p in m.named_parameters() if p.requires_grad and (p.grad is None or not p.grad.any())]
    assert not unused


@pytest.mark.parametrize("task,model", CASES, ids=IDS)
def test_eval_outputs_are_deterministic_with_every_dropout_set(task, model):
    drop = {"dropout": 0.5, "embedding_dropout": 0.5, "layer_dropout": 0.5, "recurrent_dropout": 0.5}
    _, m = build(task, model, **drop)
    m.eval()
    b = make_batch(task)
    with torch.no_grad():
        assert torch.equal(forward(m, b), forward(m, b))


@pytest.mark.parametrize("task,model", CASES, ids=IDS)
def test_empty_batch_and_one_token_rows(task, model):
    """B = 0 (isan's chunk size and the memory block's windows divided or reshaped by 0) and
    rows of one token."""
    _, m = build(task, model)
    m.eval()
    with torch.no_grad():
        empty = make_batch(task, (), T=1)
        out = forward(m, empty)
        assert out.shape[0] == 0
        one = make_batch(task, (1, 1))
        out = forward(m, one)
        assert torch.isfinite(out).all() and torch.isfinite(m.loss(out, one))


@pytest.mark.parametrize("model", [{"cell": "transformer", "heads": 2}, {"cell": "gru", "bidirectional": True},
                                   {"cell": "lstm", "layers": 2}], ids=["transformer", "bidirectional", "two-layers"])
def test_encoders_without_a_linear_view_say_so(model):
    """A documented limitation: the decomposition explains one-layer, one-direction recurrent
    encoders; the others refuse with a clear error, never a wrong view."""
    _, m = build("classify", model)
    with pytest.raises(RnnlensError, match="transformer|single-layer"):
        m.linear_view(make_batch("classify"))


def test_memory_block_and_its_reference_take_an_empty_batch():
    block = MemoryBlock(V, H, size=2, temporal=True)
    torch.nn.init.normal_(block.temporal_keys)
    torch.nn.init.normal_(block.temporal_values)
    h, tokens, mask = torch.randn(0, 3, H), torch.zeros(0, 3, dtype=torch.long), torch.zeros(0, 3, dtype=torch.bool)
    for got in (block(h, tokens, mask), memory_block_ref(block, h, tokens, mask)):
        assert [tuple(t.shape) for t in got] == [(0, 3, H), (0, 3, 2), (0, 3, H)]


# --- cells --------------------------------------------------------------------------------------

def make_cell(name: str, dtype=torch.float64):
    torch.manual_seed(1)
    cell = CELLS[name](E, H).to(dtype)
    with torch.no_grad():
        for n, p in cell.named_parameters():
            if "bias" in n:
                p.uniform_(-1, 1)
    return cell


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("name", list(CELLS))
def test_an_empty_batch_runs_through_every_cell_and_its_reference(name, dtype):
    cell = make_cell(name, dtype).eval()
    x = torch.randn(0, 3, E, dtype=dtype)
    for mask in (None, torch.ones(0, 3, dtype=torch.bool)):
        for run in (cell, cell.forward_ref):
            out, final = run(x, mask)
            assert out.shape == (0, 3, H) and final.shape == (0, cell.state_size)


@pytest.mark.parametrize("name", list(CELLS))
def test_eval_mode_gradients_equal_the_references(name):
    """Captum attributes through the cell in eval mode, which may take other fast paths than
    training; the gradients to the inputs and every parameter are the step reference's."""
    cell = make_cell(name).eval()
    x = torch.randn(3, 5, E, dtype=torch.float64, requires_grad=True)
    mask = torch.arange(5)[None] < torch.tensor([5, 3, 1])[:, None]
    out, fin = cell(x, mask)
    ref, ref_fin = cell.forward_ref(x, mask)
    w = torch.randn_like(out)
    params = [p for p in cell.parameters() if p.requires_grad]
    # (a max-plus state is -inf before any path: those entries carry no gradient)
    g1 = torch.autograd.grad((out * w).sum() + torch.nan_to_num(fin, neginf=0.0).sum(), [x, *params])
    g2 = torch.autograd.grad((ref * w).sum() + torch.nan_to_num(ref_fin, neginf=0.0).sum(), [x, *params])
    for a, b in zip(g1, g2):
        assert max_diff(a, b) < 1e-9


MASKS = {"left": [[1, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 1]],
         "interior": [[1, 0, 1, 1, 0, 1], [1, 1, 0, 0, 1, 1], [0, 1, 0, 0, 0, 0]]}


@pytest.mark.parametrize("which", list(MASKS))
@pytest.mark.parametrize("name", list(CELLS))
def test_parts_plus_remainder_rebuild_the_states_under_any_mask(name, which):
    torch.manual_seed(2)
    cell = CELLS[name](E, H).double().eval()
    x = torch.randn(3, 6, E, dtype=torch.float64)
    mask = torch.tensor(MASKS[which], dtype=torch.bool)
    view = cell.linear_view(x, mask)
    states = cell.scan(x, mask)[0]
    if view.semiring != "real":       # max-plus: the state is the best n-gram, the max of the parts
        assert view.exact
        assert max_diff(ng.ngram_vectors(view).max(2).values[mask], states[mask]) == 0
        return
    s0 = 0.3 * torch.randn(3, cell.state_size, dtype=torch.float64)
    if name in ("urn", "linear-rnn"):
        s0[:, -1] = 1.0               # u = 1: the state after a first token
    states = cell.scan(x, mask, s0)[0]
    view = cell.linear_view(x, mask, s0)
    parts = ng.ngram_vectors(view).sum(2) + ng.initial_part(view)
    rest = ng.remainder(view, states)
    assert max_diff((parts + rest)[mask], states[mask]) < 1e-9
    if view.exact:
        assert max_diff(rest[mask], torch.zeros_like(rest[mask])) < 1e-9
