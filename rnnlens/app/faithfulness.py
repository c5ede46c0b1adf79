"""The faithfulness study on a trained run: load the checkpoint and its data, then run
rnnlens.analysis.faithfulness on one split."""
from __future__ import annotations

from ..analysis.faithfulness import SENTENCE_TASKS, FaithfulnessResult, faithfulness
from ..errors import RnnlensError
from .run import Run


def run_on_checkpoint(model_dir, data_dir=None, split: str = "test", device: str = "cpu",
                      **kw) -> FaithfulnessResult:
    """Load an rnnlens checkpoint and its dataset (from data_dir, or where it was trained)
    and run `faithfulness` on the examples of `split`; kw go to `faithfulness`."""
    run = Run.load(model_dir, device=device, data_dir=data_dir)
    if run.task not in SENTENCE_TASKS:
        raise RnnlensError(f"faithfulness explains sentence-level models ({', '.join(SENTENCE_TASKS)}); "
                           f"this one is a {run.task!r} model")
    return faithfulness(run.model, run.split(split), run.vocab, **kw)
