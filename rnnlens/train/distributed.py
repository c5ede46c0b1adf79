"""Data-parallel training on torch.distributed, launched with torchrun.

`torchrun --nproc-per-node N -m rnnlens train ...` starts N copies of `rnnlens train`; each
finds RANK / WORLD_SIZE / LOCAL_RANK in its environment (`from_env`) and joins one process
group: gloo for CPU tensors and, where CUDA is available, NCCL for CUDA tensors (rank r uses
the GPU of its local rank). The result equals one process's with the same settings:

- train.batch_size is the global batch. Every rank builds the same global batches in the
  same seeded order (the iterators are seeded by train.seed) and takes a contiguous slice
  of rows: rank r gets rows [B*r//N, B*(r+1)//N) (`rows`), so B need not divide by N (the
  slices differ by at most one row). A rank whose slice is empty (a last batch smaller than
  N) runs one row with weight 0, so every rank joins every gradient all-reduce.
- Each rank's loss is the mean over its slice; it is weighted by the slice's share of the
  batch's loss units (examples, tokens, or scored positions: `loss_units`) times N, so the
  gradient that DistributedDataParallel averages is the gradient of the global batch's
  mean. Clipping acts on the all-reduced gradient, identical on every rank.
- The loss value (for train_loss and the NaN check) is all-reduced every step, so every
  rank takes the same decisions; evaluation is sharded the same way and its sums gathered,
  so early stopping and the time limit agree across ranks (the time limit is rank 0's).
- Only rank 0 writes: OUT.partial/, resume checkpoints, metrics.jsonl and the final model.
  A mid-epoch checkpoint holds the gathered (global) metric sums and carried LM state, so
  it is the checkpoint one process would write; `--resume` reads it on rank 0 and sends it
  to the others (no shared file system needed).
- Dropout masks cannot match one process's (each rank draws masks for its own rows; ranks
  > 0 draw from streams of their own), so runs agree to float tolerance only without dropout.

Messages between processes are tensors and JSON; nothing is pickled.

A process started without torchrun trains alone through `OneProcess`, the same interface with
nothing to share (every collective the identity, every row its own), so the trainer runs one
loop either way; `join()` returns one or the other.
"""
from __future__ import annotations

import json
import os
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from ..data.batching import Batch
from ..errors import RnnlensError
from ..metrics import merge_metrics

if TYPE_CHECKING:
    from .resume import Saved

ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


def launched() -> bool:
    """Whether this process was started by torchrun (or another launcher setting its env)."""
    return all(k in os.environ for k in ENV) and int(os.environ["WORLD_SIZE"]) > 1


@dataclass
class Dist:
    """This process's place in the group, and the collectives the trainer needs."""

    rank: int
    world: int
    local_rank: int

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # --- collectives (all on CPU tensors: gloo) -----------------------------------------
    def all_sum(self, values: list[float]) -> list[float]:
        """Elementwise sum over ranks (float64)."""
        import torch.distributed as dist

        t = torch.tensor(values, dtype=torch.float64)
        dist.all_reduce(t)
        return t.tolist()

    def broadcast_bytes(self, data: bytes | None) -> bytes:
        """Rank 0's bytes on every rank."""
        import torch.distributed as dist

        n = torch.tensor([len(data) if self.is_main else 0], dtype=torch.int64)
        dist.broadcast(n, 0)
        buf = (torch.frombuffer(bytearray(data), dtype=torch.uint8) if self.is_main and n.item()
               else torch.empty(int(n.item()), dtype=torch.uint8))
        if n.item():
            dist.broadcast(buf, 0)
        return bytes(buf.numpy().tobytes()) if n.item() else b""

    def broadcast_json(self, obj=None):
        """Rank 0's JSON-able object on every rank."""
        data = json.dumps(obj).encode("utf-8") if self.is_main else None
        return json.loads(self.broadcast_bytes(data).decode("utf-8"))

    def gather_rows(self, t: torch.Tensor) -> torch.Tensor:
        """Every rank's tensor concatenated along dim 0, in rank order (sizes may differ)."""
        import torch.distributed as dist

        src = t.detach().cpu().contiguous()
        sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(self.world)]
        dist.all_gather(sizes, torch.tensor([src.shape[0]], dtype=torch.int64))
        sizes = [int(s.item()) for s in sizes]
        most = max(sizes)
        pad = torch.zeros((max(most, 1), *src.shape[1:]), dtype=src.dtype)
        pad[: src.shape[0]] = src
        parts = [torch.empty_like(pad) for _ in range(self.world)]
        dist.all_gather(parts, pad)
        return torch.cat([p[:n] for p, n in zip(parts, sizes)])

    def gather_json(self, obj) -> list:
        """Every rank's JSON-able object, in rank order."""
        data = torch.frombuffer(bytearray(json.dumps(obj).encode("utf-8")), dtype=torch.uint8)
        return [json.loads(bytes(p.numpy().tobytes()).decode("utf-8")) for p in _split_rows(self, data)]

    def merged(self, sums: dict) -> dict:
        """Metric sums of all ranks merged (numbers add up, lists concatenate in rank order)."""
        out: dict = {}
        for part in self.gather_json(sums):
            merge_metrics(out, part)
        return out

    # --- the model and the data -----------------------------------------------------------
    def wrap(self, model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        """The model with its loss (WithLoss) in DistributedDataParallel, which also makes rank
        0's weights everyone's."""
        from torch.nn.parallel import DistributedDataParallel as DDP

        # An adaptive softmax's tail clusters are not used by every batch; every other model
        # uses all its parameters (check_used checks that after the first step).
        unused = bool(getattr(getattr(model, "cfg", None), "adaptive_softmax", None))
        ids = [device.index] if device.type == "cuda" else None
        return DDP(WithLoss(model), device_ids=ids, find_unused_parameters=unused)

    @staticmethod
    def check_used(net) -> None:
        """After the first backward: every trainable parameter got a gradient (else DDP,
        told that none is unused, would hang or fail at the next step)."""
        if net.find_unused_parameters:
            return
        missing = [n for n, p in net.module.named_parameters() if p.requires_grad and p.grad is None]
        if missing:
            raise RnnlensError(f"data-parallel training: parameter(s) {', '.join(missing[:5])} got no gradient "
                               "from the first batch; train this model in one process")

    def rows(self, n: int) -> tuple[int, int]:
        """This rank's rows [lo, hi) of a batch of n rows."""
        return n * self.rank // self.world, n * (self.rank + 1) // self.world

    def shard(self, batch: Batch, units) -> tuple[Batch, list[float]]:
        """This rank's slice of a global batch, and the slice's share of the batch's loss
        units under each counting function of `units` (0 for an empty slice, which is
        replaced by the batch's first row so that the rank still runs)."""
        lo, hi = self.rows(len(batch))
        part = _slice(batch, lo, hi) if hi > lo else _slice(batch, 0, 1)
        shares = []
        for count in units:
            total = float(count(batch))
            shares.append(float(count(part)) / total if hi > lo and total > 0 else 0.0)
        return part, shares

    def units(self, model, sentence_average: bool = False):
        """The counting function `shard` weighs a slice's loss by (`loss_units`)."""
        return loss_units(model, sentence_average)

    def train_device(self, device: str) -> torch.device:
        """The device this rank trains on (`rank_device`)."""
        return rank_device(self, device)

    def scale_objective(self, objective: torch.Tensor, grad_share: float) -> torch.Tensor:
        """The slice's loss weighted so that DDP's average over ranks is the global batch's
        gradient: the sum of the shares."""
        return objective * (grad_share * self.world)

    def find_resume(self, out) -> "Saved":
        """resume.find_resume(out) on rank 0, sent to every rank (the others need no access
        to OUT.partial/). Rank 0's error ends every rank (the others quietly, exit code 2)."""
        from .resume import find_resume, read_checkpoint

        msg, data, error = None, None, None
        if self.is_main:
            try:
                saved = find_resume(out)
                data = saved.path.read_bytes()
                msg = {"path": str(saved.path)}
            except (RnnlensError, OSError) as e:
                error = e if isinstance(e, RnnlensError) else RnnlensError(f"cannot read {out}: {e}")
                msg = {"error": str(error)}
        msg = self.broadcast_json(msg)
        if "error" in msg:
            if self.is_main:
                raise error
            raise SystemExit(2)
        data = self.broadcast_bytes(data)
        return saved if self.is_main else read_checkpoint(Path(msg["path"]), data=data)

    @staticmethod
    def close() -> None:
        """Leave the process group."""
        shutdown()


class OneProcess:
    """Training in this process alone, with Dist's interface: rank 0 of a world of one, which
    holds every row of every batch, writes everything, and whose collectives return what they
    are given. The model with its loss is WithLoss, as DDP would wrap it."""

    rank, world, local_rank = 0, 1, 0
    is_main = True

    @staticmethod
    def all_sum(values: list[float]) -> list[float]:
        return list(values)

    @staticmethod
    def broadcast_bytes(data: bytes | None) -> bytes:
        return data or b""

    @staticmethod
    def broadcast_json(obj=None):
        return obj

    @staticmethod
    def gather_rows(t: torch.Tensor) -> torch.Tensor:
        return t

    @staticmethod
    def gather_json(obj) -> list:
        return [obj]

    @staticmethod
    def merged(sums: dict) -> dict:
        return sums

    @staticmethod
    def wrap(model: torch.nn.Module, device: torch.device) -> torch.nn.Module:
        return WithLoss(model)

    @staticmethod
    def check_used(net) -> None:
        """Nothing to check: no other process waits for a gradient."""

    @staticmethod
    def rows(n: int) -> tuple[int, int]:
        return 0, n

    @staticmethod
    def shard(batch: Batch, units) -> tuple[Batch, list[float]]:
        """The whole batch, which holds all of each count of `units`."""
        return batch, [1.0] * len(units)

    @staticmethod
    def units(model, sentence_average: bool = False):
        """None: `shard` needs no counts here (so any task trains, whatever its loss averages)."""
        return None

    @staticmethod
    def train_device(device: str) -> torch.device:
        return torch.device(device)

    @staticmethod
    def scale_objective(objective: torch.Tensor, grad_share: float) -> torch.Tensor:
        return objective

    @staticmethod
    def find_resume(out) -> "Saved":
        from .resume import find_resume

        return find_resume(out)

    @staticmethod
    def close() -> None:
        """No process group to leave."""


class WithLoss(torch.nn.Module):
    """batch -> (output, loss): the model and its loss in one forward, so that DDP sees every
    use of a parameter (a CRF's transitions and an adaptive softmax are used by the loss)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model

    def forward(self, batch: Batch):
        out = self.model(batch)
        return out, self.model.loss(out, batch)


def _slice(b: Batch, lo: int, hi: int) -> Batch:
    t = b.targets[lo:hi] if b.targets is not None else None
    extra = {k: v[lo:hi] for k, v in b.extra.items()}
    return Batch(b.tokens[lo:hi], b.mask[lo:hi], b.lengths[lo:hi], t, extra)


def _split_rows(d: Dist, data: torch.Tensor) -> list[torch.Tensor]:
    import torch.distributed as dist

    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(d.world)]
    dist.all_gather(sizes, torch.tensor([data.numel()], dtype=torch.int64))
    sizes = [int(s.item()) for s in sizes]
    pad = torch.zeros(max(max(sizes), 1), dtype=torch.uint8)
    pad[: data.numel()] = data
    parts = [torch.empty_like(pad) for _ in range(d.world)]
    dist.all_gather(parts, pad)
    return [p[:n] for p, n in zip(parts, sizes)]


def loss_units(model, sentence_average: bool = False):
    """The counting function whose total a model's loss is the mean over: examples
    (classification, regression, relations, agreement, CRF tagging: per sentence), tokens (a
    language model), or scored positions (Dyck and cross-serial next-symbol prediction).
    sentence_average: the unit of train.loss_average 'sentence' (sentences)."""
    task = getattr(model, "task", None)
    if sentence_average or task in ("classify", "regress", "relation", "agreement", "tag"):
        return lambda b: len(b)
    if task == "lm":
        return lambda b: int(b.mask.sum())
    if task in ("dyck", "crossserial"):
        head = model.head
        return lambda b: int(head.target_mask(b).sum())
    raise RnnlensError(f"data-parallel training does not know how the {task!r} loss averages; "
                       "train it in one process")


def join() -> Dist | OneProcess:
    """Join the process group torchrun set up (OneProcess when not launched by torchrun):
    gloo, plus NCCL for CUDA tensors where CUDA is available."""
    if not launched():
        return OneProcess()
    import torch.distributed as dist

    if not dist.is_available():
        raise RnnlensError("this torch has no torch.distributed: train in one process")
    rank, world, local = (int(os.environ[k]) for k in ENV)
    if not dist.is_initialized():
        if not dist.is_gloo_available():
            raise RnnlensError("torch.distributed has no gloo backend here: train in one process")
        cuda_too = torch.cuda.is_available() and dist.is_nccl_available()
        dist.init_process_group(backend="cpu:gloo,cuda:nccl" if cuda_too else "gloo")
        import atexit
        atexit.register(shutdown)    # every way out, errors included, leaves the group cleanly
    return Dist(rank, world, local)


def rank_device(d: Dist, device: str) -> torch.device:
    """The device rank d trains on: train.device, or for cuda the GPU of its local rank."""
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RnnlensError("train.device is cuda but no CUDA device is available")
        if d.local_rank >= torch.cuda.device_count():
            raise RnnlensError(f"local rank {d.local_rank} has no GPU of its own ({torch.cuda.device_count()} "
                               "visible): start at most one process per GPU (--nproc-per-node)")
        dev = torch.device("cuda", d.local_rank)
        torch.cuda.set_device(dev)
    elif dev.type != "cpu":
        raise RnnlensError(f"data-parallel training runs on cpu or cuda, not {dev.type}")
    return dev


@contextmanager
def main_writes(d: Dist | OneProcess, make, elsewhere):
    """Rank 0 (or the only process) runs in the context `make()` gives (the output folder);
    the others get `elsewhere` (a path they never write to). If entering fails on rank 0,
    its error ends every rank (the others quietly, exit code 2)."""
    with ExitStack() as stack:
        value, error = elsewhere, None
        if d.is_main:
            try:
                value = stack.enter_context(make())
            except RnnlensError as e:
                error = e
        if d.broadcast_json(None if error is None else str(error)) is not None and not d.is_main:
            raise SystemExit(2)
        if error is not None:
            raise error
        yield value


def shutdown() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
