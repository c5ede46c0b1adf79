"""The faithfulness study on a trained run: load the checkpoint and its data, then run
rnnlens.analysis.faithfulness on one split."""
from __future__ import annotations

from ..analysis.faithfulness import SENTENCE_TASKS, FaithfulnessResult, faithfulness
from ..errors import RnnlensError
from ..train.checkpoint import load_checkpoint
from ..train.run import load_data


def run_on_checkpoint(model_dir, data_dir=None, split: str = "test", device: str = "cpu",
                      **kw) -> FaithfulnessResult:
    """Load an rnnlens checkpoint and its dataset (from data_dir, or where it was trained)
    and run `faithfulness` on the examples of `split`; kw go to `faithfulness`."""
    model, cfg, vocab, meta = load_checkpoint(model_dir, device=device)
    task = meta.get("task", "classify")
    if task not in SENTENCE_TASKS:
        raise RnnlensError(f"faithfulness explains sentence-level models ({', '.join(SENTENCE_TASKS)}); "
                           f"this one is a {task!r} model")
    if data_dir is not None:
        cfg.data.data_dir = str(data_dir)
    cfg.data.max_train_examples = None
    data = load_data(cfg)
    if data.task != task or data.labels != meta.get("labels"):
        raise RnnlensError("the data found now does not have the task and labels the model was trained on")
    if split not in data.splits:
        raise RnnlensError(f"split {split!r} is not available; available: {', '.join(data.splits)}")
    return faithfulness(model, data.splits[split], vocab, **kw)
