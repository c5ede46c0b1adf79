"""A task-agnostic training loop.

The model provides forward(batch) -> output and loss(output, batch); its head provides
metrics(output, batch) -> summable dict and finalize(sums) -> metrics. The trainer does
the rest: optimizer, clipping, early stopping on dev, keeping the best weights, one JSON
line per epoch in metrics.jsonl, and a progress bar.

With train.precision "bf16" the forward and the loss run under torch.autocast to bfloat16 on
the model's device type, in training and in evaluation; the backward, the clipping and the
optimizer step run outside it, on float32 parameters and gradients (bfloat16 has float32's
range, so no loss scaling is needed). The cells keep their recurrent state in float32
(rnnlens/ops/precision.py).
"""
from __future__ import annotations

import contextlib
import copy
import math
import random
import time
from pathlib import Path
from typing import Iterable

import numpy as np
import torch

from ..config import TrainConfig, parse_select
from ..errors import RnnlensError
from ..metrics import COUNT_KEYS, merge_metrics, scores_line
from ..outfiles import json_text
from .distributed import OneProcess


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


FUSED_DEVICES = {"adagrad": ("cpu",), "adam": ("cpu", "cuda"), "sgd": ("cpu", "cuda")}


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The config's optimizer over params, in torch's fused implementation where it has one for
    the parameters' device (Adagrad: the CPU; Adam, SGD: the CPU and CUDA): one pass over each
    parameter a step instead of one per operation. The same update up to rounding; measured
    on one thread, a step over a 100,000 x 300 embedding took 10 ms instead of 78 (Adagrad)
    and 27 instead of 107 (Adam), which is most of a large-vocabulary step's optimizer time.
    Elsewhere (another device, parameters on several, a torch without it) the default one."""
    params = list(params)
    kind = {"adagrad": torch.optim.Adagrad, "adam": torch.optim.Adam, "sgd": torch.optim.SGD}[cfg.optimizer]
    devices = {p.device.type for p in params}
    fusable = devices <= set(FUSED_DEVICES[cfg.optimizer]) and all(p.is_floating_point() for p in params)
    if len(devices) == 1 and fusable:
        try:
            return kind(params, lr=cfg.lr, weight_decay=cfg.weight_decay, fused=True)
        except (RuntimeError, TypeError, ValueError):
            pass                          # a torch or a dtype without the fused kernel
    return kind(params, lr=cfg.lr, weight_decay=cfg.weight_decay)


def check_precision(model: torch.nn.Module, cfg: TrainConfig) -> None:
    """RnnlensError unless the model's parameters suit cfg.precision: bf16 autocast trains
    float32 parameters (autocast leaves float64 alone, and the optimizer must see float32)."""
    if cfg.precision == "float32":
        return
    other = sorted({str(p.dtype).removeprefix("torch.") for p in model.parameters()
                    if p.is_floating_point() and p.dtype != torch.float32})
    if other:
        raise RnnlensError(f"train.precision {cfg.precision} trains float32 parameters under bfloat16 autocast; "
                           f"this model has {', '.join(other)} parameters: use precision float32, or a float32 model")


def _loss_count(model):
    """How many units a batch's mean loss is the mean over (`distributed.loss_units`: examples,
    tokens or scored positions), so that a split's loss is the mean over all its units however
    it is batched (a language model's dev loss is then log dev perplexity); rows for a model
    whose task names no unit."""
    from .distributed import loss_units

    try:
        return loss_units(model)
    except RnnlensError:
        return len


def _reset(model) -> None:
    if hasattr(model, "reset_state"):
        model.reset_state()


MAX_SKIPS_IN_A_ROW = 10      # on_nan "skip": more non-finite batches in a row than this stop


class Trainer:
    """checkpoints (a resume.Checkpoints, optional): save the whole training state after
    every epoch and every `checkpoints.every` steps, and continue from `checkpoints.resume`.

    dist (a distributed.Dist, optional): data-parallel training, this process being one
    rank of it (see rnnlens.train.distributed): each rank trains on its slice of every
    batch, and only rank 0 writes metrics and checkpoints. Without it the process trains
    alone (distributed.OneProcess: the same calls, nothing shared)."""

    def __init__(self, model: torch.nn.Module, cfg: TrainConfig, metrics_path: str | Path | None = None,
                 progress: bool = True, select: tuple[str, str] | None = None, checkpoints=None,
                 dist=None):
        check_precision(model, cfg)
        self.model = model
        self.cfg = cfg
        self.dist = dist = dist if dist is not None else OneProcess()
        self.metrics_path = Path(metrics_path) if metrics_path and dist.is_main else None
        self.progress = progress
        # (metric, "max" | "min"): what early stopping and the best checkpoint follow
        self.select = select or (parse_select(cfg.select) if cfg.select
                                 else model.head.select)
        self.device = dist.train_device(cfg.device)
        self._units = dist.units(model)          # what the head's loss is the mean over
        self._grad_units = dist.units(model, cfg.loss_average == "sentence")
        self._count = _loss_count(model)         # the reported loss's weights: the same units, here
        self._net = None                   # the model and its loss (WithLoss, in DDP across processes)
        self._used_checked = False         # DDP: every parameter got a gradient (checked once)
        self.optimizer = make_optimizer(model.parameters(), cfg)
        self.checkpoints = checkpoints
        self.history: list[dict] = []
        self.best_epoch: int | None = None
        self.step = 0
        # the loop's state, all of it saved in a resume checkpoint
        self.epoch = 0                     # epochs finished
        self.finished = False              # no more epochs to train (the last, or a stop)
        # dev metric first, lower dev loss breaks ties (a perfect dev accuracy can still improve)
        self._best: tuple[float, float] = (-math.inf, -math.inf)
        self._best_state: dict | None = None
        self._bad = 0                      # epochs without improvement
        self._bad_decay = 0                # of those, the ones since the last lr decay
        self._skips = 0                    # non-finite batches skipped in a row
        self._start = time.perf_counter()  # minus the seconds trained before a resume
        self._resume_pos: dict | None = None   # where in an epoch a resumed run continues
        self._data_epoch = None            # the data order's epoch counter at this epoch's start
        self._graphs = None                # step_graph.StepGraphs where a step can be one CUDA graph

    def _autocast(self, graph: bool = False):
        """The context the forward and the loss run in: bfloat16 autocast on the model's device
        type with precision bf16, else nothing. graph: for a step captured in a CUDA graph,
        where autocast must not keep its casts between calls (torch's rule for graphs)."""
        if self.cfg.precision == "bf16":
            return torch.autocast(device_type=self.device.type, dtype=torch.bfloat16,
                                  cache_enabled=False if graph else None)
        return contextlib.nullcontext()

    def _log(self, record: dict) -> None:
        self.history.append(record)
        if self.metrics_path is not None:
            try:
                with self.metrics_path.open("a", encoding="utf-8") as f:
                    f.write(json_text(record) + "\n")
            except OSError as e:
                raise self.write_failed(self.metrics_path, e) from None

    def write_failed(self, path: Path, e: OSError) -> RnnlensError:
        """One line for a write that failed (a full disk), saying what is kept."""
        if self.checkpoints is not None:
            return self.checkpoints.write_failed(path, e)
        return RnnlensError(f"{(e.strerror or str(e)).strip()} while writing {path}")

    @torch.no_grad()
    def evaluate(self, batches: Iterable, each=None, details: dict | None = None) -> dict[str, float]:
        """Mean loss and the head's metrics over the batches, in eval mode. each(output,
        batch), where given, sees every batch's model output (a confusion matrix counted in
        the same pass); a `details` dict, where given, gets the head's report beyond its
        numbers (Head.details: a tagger's scores per entity type)."""
        self.model.eval()
        _reset(self.model)
        merged: dict = {}
        loss_sum, n, rows = 0.0, 0, 0    # n: the loss's units (examples, tokens, positions)
        d = self.dist
        graphs = self._graphs if each is None else None
        on_device: dict = {}             # the graphed batches' sums, added up on the device
        for batch in batches:
            size = len(batch)            # this rank's slice; the sums are added up below
            units = self._count(batch)   # the global batch's, counted before it is sliced
            rows += size
            n += units
            lo, hi = d.rows(size)
            if hi == lo:
                continue
            batch, (share,) = d.shard(batch, [self._units])
            batch = batch.to(self.device)
            graphed = graphs.eval_step(batch) if graphs is not None else None
            if graphed is not None:      # the forward as one CUDA graph (step_graph.py)
                loss, sums = graphed
                for k, v in {"loss": loss.double() * (share * units), **sums}.items():
                    on_device[k] = v.double() + on_device[k] if k in on_device else v.double()
                continue
            with self._autocast():
                out = self.model(batch)
                loss, metrics = self.model.head.loss_and_metrics(out, batch)
            if each is not None:
                each(out, batch)
            loss_sum += loss.item() * share * units    # the batch's mean loss: the shares' weighted sum
            merge_metrics(merged, metrics)
        if on_device:
            loss_sum += float(on_device.pop("loss"))
            merge_metrics(merged, {k: float(v) for k, v in on_device.items()})
        loss_sum = d.all_sum([loss_sum])[0]
        merged = d.merged(merged)
        if rows == 0:
            raise RnnlensError("cannot evaluate on an empty split")
        if details is not None:
            details.update(self.model.head.details(merged))
        return {"loss": loss_sum / max(n, 1), **self.model.head.finalize(merged)}

    # --- checkpoints ------------------------------------------------------------------
    def _save(self, batches, pos: dict | None) -> None:
        """A resume checkpoint: after an epoch (pos None) or within one (pos: batches done,
        the epoch's sums so far)."""
        from .resume import optimizer_state, prefixed, rng_state

        rng_js, tensors = rng_state()
        opt_js, opt_t = optimizer_state(self.optimizer)
        tensors.update(opt_t)
        tensors.update(prefixed("model.", self.model.state_dict()))
        if self._best_state is not None:
            tensors.update(prefixed("best.", self._best_state))
        carry = getattr(self.model, "_carry", None) if pos else None
        if pos is not None:              # the run's state as one process would hold it
            pos = {**pos, "sums": self.dist.merged(pos["sums"])}
            carry = [self.dist.gather_rows(c) for c in carry] if carry else carry
        if not self.dist.is_main:
            return
        for i, c in enumerate(carry or []):
            tensors[f"carry.{i}"] = c.detach().cpu().clone()
        state = {
            "step": self.step, "epoch": self.epoch if pos is None else pos["epoch"],
            "batches_done": 0 if pos is None else pos["batches_done"],
            "finished": self.finished,
            "data_epoch": (getattr(batches, "epoch", None) if pos is None else self._data_epoch),
            "sums": None if pos is None else {"loss_sum": pos["loss_sum"], "n": pos["n"], "metrics": pos["sums"]},
            "carry": len(carry or []),
            "best": list(self._best), "bad": self._bad, "bad_decay": self._bad_decay, "best_epoch": self.best_epoch, "skips": self._skips,
            "has_best_state": self._best_state is not None,
            "history": self.history, "seconds": time.perf_counter() - self._start,
            "rng": rng_js, "optimizer": opt_js,
        }
        self.checkpoints.save(state, tensors)

    def _restore(self, saved, batches) -> None:
        from .resume import load_optimizer_state, set_rng_state, unprefixed

        s, t = saved.state, saved.tensors
        try:
            self.model.load_state_dict(unprefixed("model.", t), strict=True)
        except RuntimeError as e:
            first = str(e).strip().splitlines()[0]
            raise RnnlensError(f"{saved.path} does not fit the model of this config: {first}") from None
        load_optimizer_state(self.optimizer, s["optimizer"], t)
        self.step, self.finished = s["step"], s["finished"]
        self.epoch = s["epoch"] - (1 if s["batches_done"] else 0)     # epochs finished
        self._best, self._bad, self.best_epoch = tuple(s["best"]), s["bad"], s["best_epoch"]
        self._bad_decay = s.get("bad_decay", self._bad)     # checkpoints written before it: every bad epoch
        self._skips = s["skips"]
        self._best_state = unprefixed("best.", t) if s["has_best_state"] else None
        self.history = list(s["history"])
        self._start = time.perf_counter() - s["seconds"]
        if s["data_epoch"] is not None and hasattr(batches, "epoch"):
            batches.epoch = s["data_epoch"]
        if s["batches_done"]:
            sums = s["sums"]
            self._resume_pos = {"batches_done": s["batches_done"], "loss_sum": sums["loss_sum"], "n": sums["n"],
                                "sums": sums["metrics"],
                                "carry": [t[f"carry.{i}"].to(self.device) for i in range(s["carry"])] or None}
            carry = self._resume_pos["carry"]          # this rank's rows of the carried state;
            self._resume_pos["carry"] = [c[slice(*self.dist.rows(len(c)))] for c in carry] if carry else None
            if not self.dist.is_main:                  # rank 0 holds the sums of every rank so far
                self._resume_pos["sums"] = {}
        if self.metrics_path is not None:   # the lines logged after the checkpoint go
            tmp = self.metrics_path.with_name(self.metrics_path.name + ".tmp")
            try:
                tmp.write_text("".join(json_text(r) + "\n" for r in self.history), encoding="utf-8")
                tmp.replace(self.metrics_path)
            except OSError as e:
                tmp.unlink(missing_ok=True)
                raise self.write_failed(self.metrics_path, e) from None
        set_rng_state(s["rng"], t)

    def _fault(self, what: str, epoch: int) -> None:
        """A non-finite loss or gradient at this step: stop, or skip the batch and halve lr."""
        where = f"at step {self.step} (epoch {epoch})"
        if self.cfg.on_nan == "skip" and self._skips < MAX_SKIPS_IN_A_ROW:
            self._skips += 1
            for group in self.optimizer.param_groups:
                group["lr"] *= 0.5
            lr = self.optimizer.param_groups[0]["lr"]
            self._log({"skipped": what, "step": self.step, "epoch": epoch, "lr": lr})
            from .resume import warn
            warn(f"{what} {where}; batch skipped, lr halved to {lr:.3g} (train.on_nan: skip)")
            return
        if self.cfg.on_nan == "skip":
            raise RnnlensError(f"{what} {where}, the {MAX_SKIPS_IN_A_ROW + 1}th batch in a row; "
                               "stopping (lower the learning rate or turn on clipping)")
        ck = self.checkpoints
        if ck is not None and ck.last_step is not None:
            tail = (f"the last good checkpoint (step {ck.last_step}) is kept: continue with "
                    f"`{ck.hint or 'rnnlens train --resume OUT'} --on-nan skip`, or start again with a "
                    "lower learning rate")
        else:
            tail = "lower the learning rate, turn on clipping, or skip such batches with --on-nan skip"
        raise RnnlensError(f"{what} {where}; {tail}")

    def _batches(self, batches, skip: int):
        """This epoch's batches, the first `skip` left out (resuming mid-epoch)."""
        if not skip:
            return batches
        if hasattr(batches, "start"):        # the iterators of rnnlens.data.batching skip cheaply
            batches.start = skip
            return batches
        import itertools
        return itertools.islice(iter(batches), skip, None)

    def _backward(self, loss, batch, grad_share, check_grad: bool) -> str | None:
        """Backpropagate the batch's finite loss (clipping the gradient if asked); returns what
        went wrong (a non-finite gradient norm) or None."""
        d = self.dist
        objective = loss
        if self.cfg.loss_average == "sentence":   # sum over each sentence's tokens / sentences
            objective = loss * (batch.mask.sum() / len(batch))
        objective = d.scale_objective(objective, grad_share)   # DDP averages over ranks
        objective.backward()
        if not self._used_checked:
            d.check_used(self._net)
            self._used_checked = True
        if check_grad:
            norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.cfg.clip or math.inf)
            if not torch.isfinite(norm):
                return f"gradient norm became {norm.item()}"
        return None

    def _train_epoch(self, epoch: int, batches) -> dict[str, float]:
        from tqdm.auto import tqdm

        self.model.train()
        _reset(self.model)
        track = self.model.head.train_metrics
        pos, self._resume_pos = self._resume_pos, None
        sums: dict = pos["sums"] if pos else {}
        loss_sum, n = (pos["loss_sum"], pos["n"]) if pos else (0.0, 0)
        skip = pos["batches_done"] if pos else 0
        if pos and pos["carry"] is not None:
            self.model._carry = pos["carry"]
        self._data_epoch = getattr(batches, "epoch", None)
        every = self.checkpoints.every if self.checkpoints is not None else None
        check_grad = bool(self.cfg.clip) or self.cfg.on_nan == "skip"
        # Without a terminal (a log file, CI) the bar is off; a line a minute shows progress.
        last_line, total = time.perf_counter(), len(batches) if hasattr(batches, "__len__") else None
        bar = tqdm(self._batches(batches, skip), total=total, initial=skip,
                   desc=f"epoch {epoch}", disable=None if self.progress else True, leave=False,
                   dynamic_ncols=True, mininterval=0.5)
        d = self.dist
        for i, batch in enumerate(bar, skip + 1):
            size = len(batch)                 # the global batch's, under data parallelism
            units = self._count(batch)        # what its mean loss is the mean over
            lo, hi = d.rows(size)
            mine = hi > lo                    # whether this rank's slice holds rows
            batch, (share, grad_share) = d.shard(batch, [self._units, self._grad_units])
            batch = batch.to(self.device)
            self.step += 1
            graphed = self._graphs.step(batch) if self._graphs is not None else None
            if graphed is not None:           # the whole step as one CUDA graph (step_graph.py)
                out, loss, norm = graphed
                value = loss.item() * share
                fault = None                  # where there is one, the update was skipped on the device
                if not math.isfinite(value):
                    fault = f"loss became {value}"
                elif check_grad and not math.isfinite(norm := norm.item()):
                    fault = f"gradient norm became {norm}"
            else:
                self.optimizer.zero_grad(set_to_none=True)
                with self._autocast():            # the backward below runs outside it
                    out, loss = self._net(batch)  # (output, loss), from the slice
                # the batch's loss: under data parallelism the shares' sum, the same on every rank
                value = d.all_sum([loss.item() * share if share else 0.0])[0]
                if not math.isfinite(value):
                    fault = f"loss became {value}"
                else:
                    fault = self._backward(loss, batch, grad_share, check_grad)
            if fault is not None:
                self._fault(fault, epoch)     # raises, or skips this batch
                self.optimizer.zero_grad(set_to_none=True)
            else:
                self._skips = 0
                if graphed is None:           # (the graph made its update itself)
                    self.optimizer.step()
                loss_sum += value * units
                n += units
                if track and mine:
                    with torch.no_grad():
                        merge_metrics(sums, self.model.head.metrics(out, batch))
            if every and self.step % every == 0 and i != total:
                self._save(batches, {"epoch": epoch, "batches_done": i, "loss_sum": loss_sum, "n": n, "sums": sums})
            if bar.disable and self.progress and time.perf_counter() - last_line > 60:
                last_line = time.perf_counter()
                done = f"{i}/{total}" if total else str(i)
                print(f"epoch {epoch}: batch {done}, loss {loss_sum / max(n, 1):.4f}", flush=True)
            if not bar.disable and self.step % 10 == 0:
                shown = self.model.head.finalize(sums) if track and sums else {}
                bar.set_postfix(loss=f"{loss_sum / max(n, 1):.4f}",
                                **{k: f"{v:.3f}" for k, v in shown.items() if isinstance(v, (int, float))},
                                refresh=False)
        bar.close()
        if track:
            sums = d.merged(sums)
        return {"loss": loss_sum / max(n, 1), **(self.model.head.finalize(sums) if track else {})}

    def _check_select(self, dev_batches) -> None:
        """Before any training, that a train.select the config names can be followed: a dev
        split to score it on, and a metric of that name among the dev metrics (read from the
        first dev batch)."""
        if not self.cfg.select:
            return
        name = self.select[0]
        if name == "last":
            return
        if dev_batches is None:
            raise RnnlensError(f"train.select {self.cfg.select!r} picks the epoch by a dev metric, and this run has "
                               "no dev split: give one, or select 'last'")
        if name == "loss":
            return
        first = next(iter(dev_batches), None)
        if first is None:
            return
        have = self.evaluate([first])
        if name not in have:
            raise RnnlensError(f"train.select: the dev metrics have no {name!r}; they are "
                               f"{', '.join(sorted(k for k, v in have.items() if isinstance(v, (int, float))))}")

    def fit(self, train_batches, dev_batches=None) -> list[dict]:
        """Train for cfg.epochs, stopping early when dev `select` stops improving for
        cfg.patience epochs; the best epoch's weights are restored at the end. With
        checkpoints, the state is saved after every epoch (and every `every` steps), and a
        run with `checkpoints.resume` continues where that checkpoint left off."""
        self.model.to(self.device)
        name, direction = self.select
        sign = 1.0 if direction == "max" else -1.0
        d = self.dist
        if self.cfg.batch_size < d.world:
            raise RnnlensError(f"train.batch_size {self.cfg.batch_size} is the global batch, shared by "
                               f"{d.world} processes: it must be at least {d.world}")
        self._net = d.wrap(self.model, self.device)
        self._check_select(dev_batches)
        from . import step_graph

        if step_graph.StepGraphs.reason_off(self) is None:
            self._graphs = step_graph.StepGraphs(self)
        if self.checkpoints is not None and self.checkpoints.resume is not None:
            self._restore(self.checkpoints.resume, train_batches)
        else:
            self._start = time.perf_counter()
        if d.rank:                            # dropout masks of its own on every rank
            torch.manual_seed(self.cfg.seed + 1_000_003 * d.rank + self.step)
        epoch = self.epoch
        while not self.finished and epoch < self.cfg.epochs:
            epoch += 1
            t0 = time.perf_counter()
            train = self._train_epoch(epoch, train_batches)
            record = {"epoch": epoch, "step": self.step, **{f"train_{k}": v for k, v in train.items()}}
            if dev_batches is not None:
                dev = self.evaluate(dev_batches)
                record.update({f"dev_{k}": v for k, v in dev.items()})
            if name == "last":                # keep the final weights (the end of a schedule)
                score = (float(epoch), 0.0)
            elif dev_batches is not None:
                if name not in dev:
                    raise RnnlensError(f"train.select: the dev metrics have no {name!r}; they are "
                                       f"{', '.join(sorted(k for k, v in dev.items() if isinstance(v, (int, float))))}")
                score = (sign * dev[name], -dev["loss"])
            else:
                score = (-train["loss"], 0.0)
            record["seconds"] = round(time.perf_counter() - t0, 3)
            if score > self._best:
                self._best, self._bad, self._bad_decay, self.best_epoch = score, 0, 0, epoch
                self._best_state = copy.deepcopy(self.model.state_dict())
            else:
                self._bad += 1
                self._bad_decay += 1
                if self.cfg.lr_decay < 1.0 and self._bad_decay >= self.cfg.lr_decay_patience:
                    self._bad_decay = 0
                    for group in self.optimizer.param_groups:
                        group["lr"] *= self.cfg.lr_decay
            if self.cfg.lr_halve_after is not None and epoch >= self.cfg.lr_halve_after:
                for group in self.optimizer.param_groups:   # a fixed schedule, dev or not
                    group["lr"] *= 0.5
            if self.cfg.reset_optimizer:        # the next epoch starts from a fresh state, at the same lr
                lrs = [group["lr"] for group in self.optimizer.param_groups]
                self.optimizer = make_optimizer(self.model.parameters(), self.cfg)
                for group, lr in zip(self.optimizer.param_groups, lrs):
                    group["lr"] = lr
            record["best_epoch"] = self.best_epoch
            record["lr"] = self.optimizer.param_groups[0]["lr"]      # for the next epoch
            self._log(record)
            if self.progress:
                shown = scores_line({k: v for k, v in record.items()
                                     if isinstance(v, float) or k.rsplit("_", 1)[-1] in COUNT_KEYS},
                                    skip=("seconds", "lr"))
                print(f"epoch {epoch}: {shown}", flush=True)
            stop = self._bad >= self.cfg.patience
            limit = self.cfg.time_limit
            if not stop and limit is not None and epoch < self.cfg.epochs:
                spent = time.perf_counter() - self._start
                spent = d.all_sum([spent if d.is_main else 0.0])[0]     # rank 0's clock decides for all
                # stop when the next epoch, at the mean pace so far, would end past the limit
                if spent + spent / epoch > limit:
                    self._log({"stopped": "time_limit", "after_epoch": epoch, "seconds_spent": round(spent, 3),
                               "time_limit": limit})
                    if self.progress:
                        print(f"stopping after epoch {epoch}: time limit {limit:g} s", flush=True)
                    stop = True
            self.epoch = epoch
            self.finished = stop or epoch >= self.cfg.epochs
            if self.checkpoints is not None:
                self._save(train_batches, None)
        if self._best_state is not None:
            self.model.load_state_dict(self._best_state)
        return self.history
