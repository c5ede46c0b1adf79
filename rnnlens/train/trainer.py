"""A task-agnostic training loop.

The model provides forward(batch) -> output and loss(output, batch); its head provides
metrics(output, batch) -> summable dict and finalize(sums) -> metrics. The trainer does
the rest: optimizer, clipping, early stopping on dev, keeping the best weights, one JSON
line per epoch in metrics.jsonl, and a progress bar.
"""
from __future__ import annotations

import copy
import json
import math
import random
import time
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from ..errors import RnnlensError
from .config import TrainConfig


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    kinds = {"adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}
    return kinds[cfg.optimizer](params, lr=cfg.lr, weight_decay=cfg.weight_decay)


class Trainer:
    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, metrics_path: str | Path | None = None,
                 progress: bool = True, select: str = "accuracy"):
        self.model = model
        self.cfg = cfg
        self.metrics_path = Path(metrics_path) if metrics_path else None
        self.progress = progress
        self.select = select
        self.device = torch.device(cfg.device)
        self.optimizer = make_optimizer(model.parameters(), cfg)
        self.history: list[dict] = []
        self.best_epoch: int | None = None
        self.step = 0

    def _log(self, record: dict) -> None:
        self.history.append(record)
        if self.metrics_path is not None:
            with self.metrics_path.open("a", encoding="utf-8") as f:
                f.write(json.dumps(record) + "\n")

    @torch.no_grad()
    def evaluate(self, batches: Iterable) -> dict[str, float]:
        """Mean loss and the head's metrics over the batches, in eval mode."""
        self.model.eval()
        sums: dict[str, float] = {}
        loss_sum, n = 0.0, 0
        for batch in batches:
            batch = batch.to(self.device)
            out = self.model(batch)
            loss_sum += float(self.model.loss(out, batch)) * len(batch)
            n += len(batch)
            for k, v in self.model.head.metrics(out, batch).items():
                sums[k] = sums.get(k, 0.0) + v
        if n == 0:
            raise RnnlensError("cannot evaluate on an empty split")
        return {"loss": loss_sum / n, **self.model.head.finalize(sums)}

    def _train_epoch(self, epoch: int, batches) -> dict[str, float]:
        from tqdm.auto import tqdm

        self.model.train()
        sums: dict[str, float] = {}
        loss_sum, n = 0.0, 0
        bar = tqdm(batches, total=len(batches) if hasattr(batches, "__len__") else None,
                   desc=f"epoch {epoch}", disable=None if self.progress else True, leave=False,
                   dynamic_ncols=True, mininterval=0.5)
        for batch in bar:
            batch = batch.to(self.device)
            self.step += 1
            self.optimizer.zero_grad(set_to_none=True)
            out = self.model(batch)
            loss = self.model.loss(out, batch)
            if not torch.isfinite(loss):
                raise RnnlensError(f"loss became {loss.item()} at step {self.step} (epoch {epoch}); "
                                   "lower the learning rate or turn on clipping")
            loss.backward()
            if self.cfg.clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
            self.optimizer.step()
            loss_sum += loss.item() * len(batch)
            n += len(batch)
            with torch.no_grad():
                for k, v in self.model.head.metrics(out, batch).items():
                    sums[k] = sums.get(k, 0.0) + v
            if not bar.disable and self.step % 10 == 0:
                shown = self.model.head.finalize(sums)
                bar.set_postfix(loss=f"{loss_sum / n:.4f}", **{k: f"{v:.3f}" for k, v in shown.items()},
                                refresh=False)
        bar.close()
        return {"loss": loss_sum / max(n, 1), **self.model.head.finalize(sums)}

    def fit(self, train_batches, dev_batches=None) -> list[dict]:
        """Train for cfg.epochs, stopping early when dev `select` stops improving for
        cfg.patience epochs; the best epoch's weights are restored at the end."""
        self.model.to(self.device)
        # Dev metric first, lower dev loss breaks ties (a perfect dev accuracy can still improve).
        best, best_state, bad = (-math.inf, -math.inf), None, 0
        for epoch in range(1, self.cfg.epochs + 1):
            t0 = time.perf_counter()
            train = self._train_epoch(epoch, train_batches)
            record = {"epoch": epoch, "step": self.step, **{f"train_{k}": v for k, v in train.items()}}
            if dev_batches is not None:
                dev = self.evaluate(dev_batches)
                record.update({f"dev_{k}": v for k, v in dev.items()})
                score = (dev[self.select], -dev["loss"])
            else:
                score = (-train["loss"], 0.0)
            record["seconds"] = round(time.perf_counter() - t0, 3)
            if score > best:
                best, bad, self.best_epoch = score, 0, epoch
                best_state = copy.deepcopy(self.model.state_dict())
            else:
                bad += 1
            record["best_epoch"] = self.best_epoch
            self._log(record)
            if self.progress:
                shown = " ".join(f"{k}={v:.4f}" for k, v in record.items()
                                 if isinstance(v, float) and k != "seconds")
                print(f"epoch {epoch}: {shown}", flush=True)
            if bad >= self.cfg.patience:
                break
        if best_state is not None:
            self.model.load_state_dict(best_state)
        return self.history
