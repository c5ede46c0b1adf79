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


def merge_metrics(into: dict, new: dict) -> None:
    """Numbers add up; lists (predictions for F1-style metrics) are concatenated."""
    for k, v in new.items():
        if isinstance(v, list):
            into.setdefault(k, []).extend(v)
        else:
            into[k] = into.get(k, 0.0) + v


def _reset(model) -> None:
    if hasattr(model, "reset_state"):
        model.reset_state()


class Trainer:
    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, metrics_path: str | Path | None = None,
                 progress: bool = True, select: tuple[str, str] | None = None):
        self.model = model
        self.cfg = cfg
        self.metrics_path = Path(metrics_path) if metrics_path else None
        self.progress = progress
        # (metric, "max" | "min"): what early stopping and the best checkpoint follow
        self.select = select or getattr(model.head, "select", ("accuracy", "max"))
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
        _reset(self.model)
        merged: dict = {}
        loss_sum, n = 0.0, 0
        for batch in batches:
            batch = batch.to(self.device)
            out = self.model(batch)
            head = self.model.head
            if hasattr(head, "loss_and_metrics"):
                loss, metrics = head.loss_and_metrics(out, batch)
            else:
                loss, metrics = self.model.loss(out, batch), head.metrics(out, batch)
            loss_sum += loss.item() * len(batch)
            n += len(batch)
            merge_metrics(merged, metrics)
        if n == 0:
            raise RnnlensError("cannot evaluate on an empty split")
        return {"loss": loss_sum / n, **self.model.head.finalize(merged)}

    def _train_epoch(self, epoch: int, batches) -> dict[str, float]:
        from tqdm.auto import tqdm

        self.model.train()
        _reset(self.model)
        track = getattr(self.model.head, "train_metrics", True)
        sums: dict = {}
        loss_sum, n = 0.0, 0
        # Without a terminal (a log file, CI) the bar is off; a line a minute shows progress.
        last_line, total = time.perf_counter(), len(batches) if hasattr(batches, "__len__") else None
        bar = tqdm(batches, total=total,
                   desc=f"epoch {epoch}", disable=None if self.progress else True, leave=False,
                   dynamic_ncols=True, mininterval=0.5)
        for i, batch in enumerate(bar, 1):
            batch = batch.to(self.device)
            self.step += 1
            self.optimizer.zero_grad(set_to_none=True)
            out = self.model(batch)
            loss = self.model.loss(out, batch)
            if not torch.isfinite(loss):
                raise RnnlensError(f"loss became {loss.item()} at step {self.step} (epoch {epoch}); "
                                   "lower the learning rate or turn on clipping")
            if self.cfg.loss_average == "sentence":   # sum over each sentence's tokens / sentences
                (loss * (batch.mask.sum() / len(batch))).backward()
            else:
                loss.backward()
            if self.cfg.clip:
                torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip)
            self.optimizer.step()
            loss_sum += loss.item() * len(batch)
            n += len(batch)
            if track:
                with torch.no_grad():
                    merge_metrics(sums, self.model.head.metrics(out, batch))
            if bar.disable and self.progress and time.perf_counter() - last_line > 60:
                last_line = time.perf_counter()
                done = f"{i}/{total}" if total else str(i)
                print(f"epoch {epoch}: batch {done}, loss {loss_sum / n:.4f}", flush=True)
            if not bar.disable and self.step % 10 == 0:
                shown = self.model.head.finalize(sums) if track else {}
                bar.set_postfix(loss=f"{loss_sum / n:.4f}",
                                **{k: f"{v:.3f}" for k, v in shown.items() if isinstance(v, (int, float))},
                                refresh=False)
        bar.close()
        return {"loss": loss_sum / max(n, 1), **(self.model.head.finalize(sums) if track else {})}

    def fit(self, train_batches, dev_batches=None) -> list[dict]:
        """Train for cfg.epochs, stopping early when dev `select` stops improving for
        cfg.patience epochs; the best epoch's weights are restored at the end."""
        self.model.to(self.device)
        # Dev metric first, lower dev loss breaks ties (a perfect dev accuracy can still improve).
        best, best_state, bad = (-math.inf, -math.inf), None, 0
        name, direction = self.select
        sign = 1.0 if direction == "max" else -1.0
        start = time.perf_counter()
        for epoch in range(1, self.cfg.epochs + 1):
            t0 = time.perf_counter()
            train = self._train_epoch(epoch, train_batches)
            record = {"epoch": epoch, "step": self.step, **{f"train_{k}": v for k, v in train.items()}}
            if dev_batches is not None:
                dev = self.evaluate(dev_batches)
                record.update({f"dev_{k}": v for k, v in dev.items()})
                score = (sign * dev[name], -dev["loss"])
            else:
                score = (-train["loss"], 0.0)
            record["seconds"] = round(time.perf_counter() - t0, 3)
            if score > best:
                best, bad, self.best_epoch = score, 0, epoch
                best_state = copy.deepcopy(self.model.state_dict())
            else:
                bad += 1
                if self.cfg.lr_decay < 1.0:
                    for group in self.optimizer.param_groups:
                        group["lr"] *= self.cfg.lr_decay
            if self.cfg.lr_halve_after is not None and epoch >= self.cfg.lr_halve_after:
                for group in self.optimizer.param_groups:   # a fixed schedule, dev or not
                    group["lr"] *= 0.5
            record["best_epoch"] = self.best_epoch
            record["lr"] = self.optimizer.param_groups[0]["lr"]      # for the next epoch
            self._log(record)
            if self.progress:
                shown = " ".join(f"{k}={v:.4f}" for k, v in record.items()
                                 if isinstance(v, float) and k not in ("seconds", "lr"))
                print(f"epoch {epoch}: {shown}", flush=True)
            if bad >= self.cfg.patience:
                break
            limit = self.cfg.time_limit
            if limit is not None and epoch < self.cfg.epochs:
                spent = time.perf_counter() - start
                # stop when the next epoch, at the mean pace so far, would end past the limit
                if spent + spent / epoch > limit:
                    self._log({"stopped": "time_limit", "after_epoch": epoch, "seconds_spent": round(spent, 3)})
                    if self.progress:
                        print(f"stopping after epoch {epoch}: time limit {limit:g} s", flush=True)
                    break
        if best_state is not None:
            self.model.load_state_dict(best_state)
        return self.history
