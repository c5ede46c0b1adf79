import os
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[1]


def shared_data_dir() -> Path:
    """Real datasets: $RNNLENS_DATA, else ../shared/data beside the repository."""
    return Path(os.environ.get("RNNLENS_DATA", REPO.parent / "shared" / "data"))


@pytest.fixture
def shared_data() -> Path:
    d = shared_data_dir()
    if not d.is_dir():
        pytest.skip(f"real data not found at {d} (set RNNLENS_DATA)")
    return d


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def max_diff(a, b) -> float:
    """Largest absolute difference, printed before asserting (DESIGN habit 1)."""
    d = (a - b).abs().max().item() if a.numel() else 0.0
    print(f"max |diff| = {d:.3e}")
    return d


# `rnnlens` in a process that SIGKILLs itself at its KILL_AT-th training step (under torchrun:
# every rank at the same step), so where a run dies does not depend on timing. Run it as a
# script file or with `python -c KILLER ARGS...`.
KILLER = """
import os, signal, sys
from rnnlens.models import RNNModel
from rnnlens.cli import main
at, calls, loss = int(os.environ["KILL_AT"]), [0], RNNModel.loss
def killing_loss(self, out, batch):
    if self.training:
        calls[0] += 1
        if calls[0] == at:
            os.kill(os.getpid(), signal.SIGKILL)
    return loss(self, out, batch)
RNNModel.loss = killing_loss
sys.exit(main(sys.argv[1:]))
"""


def copy_torch_weights(model, user) -> None:
    """Give an rnnlens RNNModel the weights of a plain module with .emb (nn.Embedding), .rnn (a
    one-layer torch RNN/GRU/LSTM) and .out (nn.Linear): its torch twin in the tests."""
    cell = model.encoder.cells[0]
    with torch.no_grad():
        model.embedding.weight.copy_(user.emb.weight)
        for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
            getattr(cell, name).copy_(getattr(user.rnn, name + "_l0"))
        model.head.out.weight.copy_(user.out.weight)
        model.head.out.bias.copy_(user.out.bias)


def run_cli(capsys, *argv):
    """rnnlens.cli.main's exit code (argparse's SystemExit included), stdout, stderr."""
    from rnnlens.cli import main

    try:
        code = main([str(a) for a in argv])
    except SystemExit as e:
        code = e.code
    out, err = capsys.readouterr()
    return code, out, err
