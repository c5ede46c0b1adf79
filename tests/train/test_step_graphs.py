"""A language model's training step as one graph (rnnlens.train.step_graph) trains as the eager
step does: for every registered cell, through the re-running backend on the CPU (the
buffers, the carried state, the update skipped on a non-finite step, captures anew when the
learning rate changes, the eager fallback when a capture fails), and through real CUDA graphs
where a GPU is present."""
import math
import warnings

import pytest
import torch

from tests.support import max_diff
from rnnlens.cells import CELLS
from rnnlens.config import Config
from rnnlens.data.batching import BatchIterator, BPTTIterator, Example
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.train import step_graph
from rnnlens.train.trainer import Trainer, seed_everything

STREAM = [1 + (i * 7 + i // 3) % 11 for i in range(600)]     # 15 steps an epoch
SIZES = {"embedding_dim": 8, "hidden_size": 8, "dropout": 0.2}


def fit(model_cfg: dict, train_cfg: dict | None = None, device: str = "cpu", epochs: int = 2):
    cfg = Config.from_dict({"data": {"task": "lm"}, "model": {**SIZES, **model_cfg},
                            "train": {"epochs": epochs, "optimizer": "adam", "lr": 0.01, "clip": 1.0,
                                      "device": device, **(train_cfg or {})}})
    seed_everything(0)
    model = RNNModel(cfg.model, 13, "lm")
    trainer = Trainer(model, cfg.train, progress=False)
    trainer.fit(BPTTIterator(STREAM, 4, 10), BPTTIterator(STREAM[:300], 4, 10))
    return model, trainer


def strip(history):
    return [{k: v for k, v in r.items() if k != "seconds"} for r in history]


def close(a, b, tol):
    assert len(a) == len(b)
    for ra, rb in zip(strip(a), strip(b)):
        assert ra.keys() == rb.keys()
        for k in ra:
            if isinstance(ra[k], float):
                assert math.isclose(ra[k], rb[k], rel_tol=tol, abs_tol=tol), (k, ra[k], rb[k])
            else:
                assert ra[k] == rb[k], (k, ra[k], rb[k])


def lm_config(name: str) -> dict:
    return {"cell": name, **({"hidden_size": 9} if name == "mm" else {})}     # mm: d*d units


@pytest.fixture
def rerun(monkeypatch):
    backend = step_graph.RerunBackend()
    monkeypatch.setattr(step_graph, "BACKEND", backend)
    return backend


@pytest.mark.parametrize("name", sorted(CELLS))
def test_every_cell_trains_the_same_through_the_graphed_step(name, monkeypatch):
    cfg = lm_config(name)
    train = {"on_nan": "skip"}          # a product of free word matrices can overflow: skipped alike
    ref_model, ref = fit(cfg, train)
    backend = step_graph.RerunBackend()
    monkeypatch.setattr(step_graph, "BACKEND", backend)
    model, trainer = fit(cfg, train)
    close(trainer.history, ref.history, 1e-6)
    if not all(getattr(m, "capturable", True) for m in model.modules()):
        assert trainer._graphs is None                # trained eagerly (the URN)
        return
    assert trainer._graphs is not None and trainer._graphs.off is None
    assert {k[0] for k in trainer._graphs.seen} == {"train", "eval"}
    assert backend.captures >= 2 and backend.replays >= 20     # of 30 steps (a stream's first, a new shape's or rate's first: eager)
    close(trainer.history, ref.history, 1e-6)
    for (k, a), (_, b) in zip(model.state_dict().items(), ref_model.state_dict().items()):
        assert max_diff(a, b) < 1e-5, k


def test_sgd_without_clipping_trains_the_same(monkeypatch):
    cfg = {"cell": "gru"}
    train = {"optimizer": "sgd", "lr": 0.5, "clip": None}
    ref_model, ref = fit(cfg, train)
    backend = step_graph.RerunBackend()
    monkeypatch.setattr(step_graph, "BACKEND", backend)
    model, trainer = fit(cfg, train)
    assert backend.replays >= 25
    close(trainer.history, ref.history, 1e-6)


def nan_at(monkeypatch, step: int):
    """Make the training loss of the given training call NaN (counted over the run)."""
    loss, calls = RNNModel.loss, [0]

    def nan_loss(self, out, batch):
        value = loss(self, out, batch)
        calls[0] += self.training
        return value * float("nan") if self.training and calls[0] == step else value
    monkeypatch.setattr(RNNModel, "loss", nan_loss)
    return calls


def test_a_skipped_step_is_skipped_on_the_device_and_the_new_rate_captured_anew(monkeypatch):
    cfg, train = {"cell": "lstm"}, {"on_nan": "skip"}
    calls = nan_at(monkeypatch, 9)
    ref_model, ref = fit(cfg, train)
    assert [r for r in ref.history if "skipped" in r], "the eager run skipped a batch"
    calls[0] = 0
    backend = step_graph.RerunBackend()
    monkeypatch.setattr(step_graph, "BACKEND", backend)
    model, trainer = fit(cfg, train)
    # training: [4,10] at lr 0.01 and again at the halved 0.005, the last [4,9] in epoch 2;
    # evaluation: [4,10], the last [4,4] in epoch 2
    assert backend.captures == 5
    close(trainer.history, ref.history, 1e-6)
    for (k, a), (_, b) in zip(model.state_dict().items(), ref_model.state_dict().items()):
        assert max_diff(a, b) < 1e-5, k


def test_a_non_finite_step_stops_as_the_eager_one_does(monkeypatch, rerun):
    nan_at(monkeypatch, 9)
    with pytest.raises(RnnlensError, match="loss became nan at step 9"):
        fit({"cell": "gru"})
    assert rerun.replays >= 1


def test_a_failed_capture_trains_on_eagerly_with_a_warning(monkeypatch):
    cfg = {"cell": "gru"}
    ref_model, ref = fit(cfg)

    class Failing(step_graph.RerunBackend):
        def capture(self, fn):
            raise RuntimeError("operation not permitted when stream is capturing")
    monkeypatch.setattr(step_graph, "BACKEND", Failing())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, trainer = fit(cfg)
    assert any("could not be captured" in str(w.message) for w in caught)
    assert trainer._graphs.off.startswith("operation not permitted")
    close(trainer.history, ref.history, 0)


def test_the_graphs_apply_only_where_they_can(monkeypatch):
    cfg = Config.from_dict({"model": {**SIZES, "cell": "gru"}, "train": {"optimizer": "adam"}})

    def reason(model, train=None):
        c = Config.from_dict({"model": {**SIZES, "cell": "gru"}, "train": {"optimizer": "adam", **(train or {})}})
        return step_graph.StepGraphs.reason_off(Trainer(model, c.train, progress=False))
    lm = RNNModel(cfg.model, 13, "lm")
    assert reason(lm) == "not a CUDA device"
    monkeypatch.setattr(step_graph, "BACKEND", step_graph.RerunBackend())
    assert reason(lm) is None
    assert "fused" in reason(lm, {"optimizer": "adagrad"})
    assert reason(RNNModel(cfg.model, 13, "lm", sentence_level=True)) == "not a language model over a stream"
    assert reason(RNNModel(cfg.model, 13, "classify", labels=["a", "b"])) == "not a language model over a stream"
    adaptive = Config.from_dict({"data": {"task": "lm"}, "model": {**SIZES, "cell": "gru", "adaptive_softmax": [4]}})
    assert "adaptive" in reason(RNNModel(adaptive.model, 13, "lm"))
    monkeypatch.setenv("RNNLENS_STEP_GRAPHS", "0")
    assert reason(lm) == "RNNLENS_STEP_GRAPHS=0"


def test_a_padded_batch_runs_eagerly(rerun):
    """Only dense batches are graphed: a classifier's padded batches never reach a capture."""
    vocab = Vocab.build([["a", "b", "c"]])
    batches = list(BatchIterator([Example(["a", "b"][: 1 + i % 2], 0) for i in range(8)], vocab, 4))
    assert all(not b.dense for b in batches)
    assert all(b.dense for b in BPTTIterator(STREAM, 4, 10))


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@CUDA
@pytest.mark.parametrize("name", ["lstm", "gru", "mvma-g", "gru-variant", "lstm-approx", "rrnn-b-gated", "elman"])
def test_cuda_graphed_steps_train_as_the_eager_ones(name, monkeypatch):
    """Without dropout the same kernels run on the same numbers: the histories agree closely."""
    cfg = {**lm_config(name), "dropout": 0.0}
    monkeypatch.setenv("RNNLENS_STEP_GRAPHS", "0")
    ref_model, ref = fit(cfg, device="cuda")
    assert ref._graphs is None
    monkeypatch.delenv("RNNLENS_STEP_GRAPHS")
    model, trainer = fit(cfg, device="cuda")
    assert trainer._graphs is not None and trainer._graphs.off is None, trainer._graphs.off
    assert {k[0] for k in trainer._graphs.graphs} == {"train", "eval"}
    close(trainer.history, ref.history, 1e-4)
    for (k, a), (_, b) in zip(model.state_dict().items(), ref_model.state_dict().items()):
        assert max_diff(a, b) < 1e-3, k


@CUDA
def test_cuda_graphed_steps_with_dropout_repeat_from_a_seed_and_train_as_well(monkeypatch):
    """With dropout: a graphed run repeats itself from the same seed, and trains as well as the
    eager one (its masks need not be the eager run's draws)."""
    cfg = lm_config("lstm")
    monkeypatch.setenv("RNNLENS_STEP_GRAPHS", "0")
    _, ref = fit(cfg, device="cuda")
    monkeypatch.delenv("RNNLENS_STEP_GRAPHS")
    _, a = fit(cfg, device="cuda")
    _, b = fit(cfg, device="cuda")
    assert a._graphs.off is None
    close(a.history, b.history, 1e-5)
    assert math.isclose(a.history[-1]["dev_loss"], ref.history[-1]["dev_loss"], rel_tol=0.05)


class HostReadsRefused(step_graph.RerunBackend):
    """A re-running backend under which every read of a tensor's value on the host (item, bool,
    float, int, tolist, numpy, cpu) and every op whose output's size depends on values (nonzero,
    unique, masked_select, indexing by a boolean mask) raises: on a GPU each is a
    synchronisation that a CUDA graph capture refuses, so a step that passes here makes none of
    them from Python."""

    METHODS = ("item", "__bool__", "__float__", "__int__", "tolist", "numpy", "cpu", "nonzero", "unique",
               "masked_select")
    FUNCTIONS = ("nonzero", "unique", "masked_select", "argwhere")

    def replay(self, handle):
        saved_m = {n: getattr(torch.Tensor, n) for n in self.METHODS}
        saved_f = {n: getattr(torch, n) for n in self.FUNCTIONS}
        getitem = torch.Tensor.__getitem__

        def refuse(name):
            def f(*a, **k):
                raise AssertionError(f"{name} inside a graphed step: a host read")
            return f

        def checked_getitem(self, index):
            parts = index if isinstance(index, tuple) else (index,)
            if any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in parts):
                raise AssertionError("indexing by a boolean mask inside a graphed step: a host read")
            return getitem(self, index)
        try:
            for n in self.METHODS:
                setattr(torch.Tensor, n, refuse(f"Tensor.{n}"))
            for n in self.FUNCTIONS:
                setattr(torch, n, refuse(f"torch.{n}"))
            torch.Tensor.__getitem__ = checked_getitem
            return super().replay(handle)
        finally:
            for n, f in saved_m.items():
                setattr(torch.Tensor, n, f)
            for n, f in saved_f.items():
                setattr(torch, n, f)
            torch.Tensor.__getitem__ = getitem


@pytest.mark.parametrize("cpp", ["on", "off"])
@pytest.mark.parametrize("name", sorted(CELLS))
def test_no_cell_reads_a_value_back_in_a_graphed_step(name, cpp, monkeypatch):
    """Every cell a graphed step takes reads nothing back from the device, through the C++
    kernels and through the PyTorch paths a GPU runs (RNNLENS_CPP=0); the one that must read
    (the URN) says so and trains eagerly."""
    if cpp == "off":
        monkeypatch.setenv("RNNLENS_CPP", "0")
    backend = HostReadsRefused()
    monkeypatch.setattr(step_graph, "BACKEND", backend)
    model, trainer = fit(lm_config(name), {"on_nan": "skip"}, epochs=1)
    if not all(getattr(m, "capturable", True) for m in model.modules()):
        assert trainer._graphs is None and backend.replays == 0
        assert "reads values back" in step_graph.StepGraphs.reason_off(trainer)
    else:
        assert backend.replays >= 8


def test_the_host_read_guard_refuses_what_a_capture_would():
    guard = HostReadsRefused()
    x = torch.arange(4.0)
    for read in (lambda: x[x > 1], lambda: x.sum().item(), lambda: bool(x.any()), lambda: torch.nonzero(x),
                 lambda: x.unique(), lambda: float(x[0]), lambda: x.cpu()):
        with pytest.raises(AssertionError, match="host read"):
            guard.replay(read)
    assert torch.equal(guard.replay(lambda: x[1:] * 2 + x[torch.tensor([0, 1, 2])]), torch.tensor([2.0, 5.0, 8.0]))
    assert x[x > 1].tolist() == [2.0, 3.0]           # put back after each replay
