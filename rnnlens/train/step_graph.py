"""A language model's whole training step on a GPU as one CUDA graph: forward, loss, backward,
gradient clipping and the optimizer's update, launched as one unit; and its evaluation step
(forward, loss and the head's sums) likewise.

Why: at the papers' sizes (20 x 35 tokens, 128-512 units) a step is a few hundred small
kernels, and launching them one by one from Python takes longer than running them: on one
H200, 286 training steps and the dev pass took 2.3 s for the 128-unit PTB model and 2.6 s for
the 512-unit one, hardly more for 16 times the products (benchmarks/cuda/lm-pace.txt). A replayed graph is one
launch. The cells' own loops over time are already graphs (rnnlens.ops.graphs); this takes
in everything around them.

When it runs (`StepGraphs.reason_off` says why not): a CUDA device, one process, torch's
fused Adam or SGD (their update skips itself on the device when told the step is not
finite, so no value has to come back to the host mid-step), no adaptive softmax, a
language model over a stream (its batches are dense: every row full length, the same shape
but the epoch's last), cells that read nothing back from the device (`Cell.capturable`: all
but the URN) and RNNLENS_STEP_GRAPHS not 0. A shape is captured the second time it
comes; the first runs eagerly, which also makes the optimizer's state. A graph holds the
learning rates and the optimizer it was captured with, so a change of either (lr decay, a
skipped batch halving the rate, train.reset_optimizer) captures anew; at most MAX_GRAPHS are
kept. A capture that fails (an operation that needs the host mid-step) trains that step
eagerly and turns the graphs off for the run, with a warning.

The step is the eager one's (Trainer._train_epoch) with its checks moved onto the device:
the loss and the gradient norm are computed as there, the update is skipped (`found_inf`)
where the eager step would not have made it (a non-finite loss; a non-finite gradient norm
where it checks the norm), and after the replay the trainer reads the loss and the norm and
handles a fault as it does eagerly (train.on_nan). The carried state of a language model
goes through fixed buffers: the step reads it from `carry_in` (the last step's final state,
copied in before each replay) and leaves its final state in the graph's output, which
`model._carry` then holds as after an eager step. A stream's first step (no state yet) runs
eagerly. An evaluation step's sums (`LMHead.metric_tensors`) are added up on the device and
read once, after the last batch (Trainer.evaluate).

`BACKEND = RerunBackend()` (tests) replaces CUDA graphs by one, which runs the captured function
again at every replay: it checks on a CPU that the buffers, the carried state and the
skipped updates give the eager step's training, which tests/train/test_step_graphs.py also
checks with real graphs where a GPU is present.
"""
from __future__ import annotations

import math
import warnings
from collections import OrderedDict

import torch

from ..data.batching import Batch
from ..ops.switches import switched_off

MAX_GRAPHS = 4        # a stream's full and last batch, in training and in evaluation
BACKEND = None         # tests: RerunBackend() in place of CUDA graphs (on any device)


class CudaBackend:
    """torch.cuda.CUDAGraph: capture records fn's kernels without running them; replay runs them
    on the same buffers and returns the outputs the capture made."""

    @staticmethod
    def capture(fn):
        g = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(g):
            outs = fn()
        return g, outs

    @staticmethod
    def replay(handle):
        g, outs = handle
        g.replay()
        return outs


class RerunBackend:
    """For tests: a 'graph' that runs fn again at every replay (and nothing at capture)."""

    def __init__(self):
        self.captures = 0
        self.replays = 0

    def capture(self, fn):
        self.captures += 1
        return fn

    def replay(self, handle):
        self.replays += 1
        return handle()


class _Graph:
    def __init__(self, handle, static: Batch, carry_in, optimizer):
        self.handle, self.static, self.carry_in = handle, static, carry_in
        self.optimizer = optimizer      # held, so that its id (in the key) is not another's


class StepGraphs:
    """The trainer's graphed steps; `step(batch)` runs one or returns None (run it eagerly)."""

    def __init__(self, trainer):
        self.trainer = trainer
        self.backend = BACKEND if BACKEND is not None else CudaBackend()
        self.graphs: OrderedDict = OrderedDict()
        self.seen: dict = {}
        self.off: str | None = None

    @staticmethod
    def reason_off(trainer) -> str | None:
        """Why graphed steps do not apply to this trainer (None: they do)."""
        if switched_off("RNNLENS_STEP_GRAPHS"):
            return "RNNLENS_STEP_GRAPHS=0"
        if BACKEND is None and trainer.device.type != "cuda":
            return "not a CUDA device"
        if trainer.dist.world != 1:
            return "several processes"
        model = trainer.model
        if getattr(model, "task", None) != "lm" or not getattr(model, "stream_lm", False):
            return "not a language model over a stream"
        if getattr(model.head, "adaptive", None) is not None:
            return "an adaptive softmax (its clusters are picked on the host)"
        if not all(getattr(m, "capturable", True) for m in model.modules()):
            return "a cell that reads values back from the device (the URN's distinct words)"
        if not all(g.get("fused") for g in trainer.optimizer.param_groups) or \
                not isinstance(trainer.optimizer, (torch.optim.Adam, torch.optim.SGD)):
            return "not torch's fused Adam or SGD"
        return None

    def _key(self, batch: Batch, kind: str) -> tuple:
        t = self.trainer
        shapes = (tuple(batch.tokens.shape), tuple(batch.targets.shape))
        if kind == "eval":
            return ("eval", *shapes)
        lrs = tuple(float(g["lr"]) for g in t.optimizer.param_groups)
        return ("train", *shapes, id(t.optimizer), lrs)

    def step(self, batch: Batch):
        """(out, loss, grad_norm) of this training batch's step run through a graph, the update
        made (or skipped on the device where the eager step would not make it); the loss and
        the norm are 0-d device tensors. None: the step was not run (the caller runs it
        eagerly)."""
        return self._run(batch, "train")

    def eval_step(self, batch: Batch):
        """(loss, {metric: 0-d tensor}) of this evaluation batch's forward run through a graph
        (the head's `metric_tensors`), or None (the caller runs it eagerly)."""
        return self._run(batch, "eval")

    def _run(self, batch: Batch, kind: str):
        model = self.trainer.model
        if self.off is not None or not batch.dense:
            return None
        if model.carries_state and model._carry is None:
            # a stream's first step runs eagerly: it starts from no state, which is not a state
            # of zeros for every cell (max-plus's zero is -inf; MM and VM start from g(x_1))
            return None
        key = self._key(batch, kind)
        g = self.graphs.get(key)
        if g is None:
            self.seen[key] = self.seen.get(key, 0) + 1
            if self.seen[key] < 2:
                return None
            g = self._capture(batch, kind)
            if g is None:
                return None
            self.graphs[key] = g
            while len(self.graphs) > MAX_GRAPHS:
                self.graphs.popitem(last=False)
        self.graphs.move_to_end(key)
        return self._replay(g, batch)

    def _replay(self, g: _Graph, batch: Batch):
        model = self.trainer.model
        s = g.static
        s.tokens.copy_(batch.tokens, non_blocking=True)
        s.targets.copy_(batch.targets, non_blocking=True)
        if g.carry_in is not None:           # the stream's state so far: the last step's
            for c, cur in zip(g.carry_in, model._carry):
                if c is not cur:
                    c.copy_(cur)
        *outs, carry_out = self.backend.replay(g.handle)
        if carry_out is not None:
            model._carry = list(carry_out)
        return tuple(outs)

    def _capture(self, batch: Batch, kind: str) -> _Graph | None:
        t = self.trainer
        model, opt = t.model, t.optimizer
        dev = t.device
        static = Batch(batch.tokens.to(dev).clone(), batch.mask.to(dev).clone(), batch.lengths.to(dev).clone(),
                       batch.targets.to(dev).clone(), batch.extra, dense=True)
        before = model._carry
        carry_in = [c.detach().clone() for c in before] if model.carries_state else None

        def carried():
            return model._carry if carry_in is not None else None

        if kind == "eval":
            def fn():
                if carry_in is not None:
                    model._carry = carry_in
                with torch.no_grad(), t._autocast(graph=True):
                    out = model(static)
                    loss, sums = model.head.metric_tensors(out, static)
                return loss, sums, carried()
        else:
            fn = self._train_fn(static, carry_in, carried)
        try:
            handle = self.backend.capture(fn)
        except RuntimeError as e:
            first = (str(e).strip().splitlines() or [type(e).__name__])[0]
            self.off = first
            warnings.warn(f"the {'training' if kind == 'train' else 'evaluation'} step could not be captured "
                          f"as a CUDA graph ({first}); going on without graphs", RuntimeWarning, stacklevel=3)
            model._carry = before
            if kind == "train":
                opt.zero_grad(set_to_none=True)
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            return None
        if carry_in is not None:
            model._carry = carry_in          # this step starts from it (copied into it at replay)
        return _Graph(handle, static, carry_in, opt)

    def _train_fn(self, static: Batch, carry_in, carried):
        """The training step on the static batch: forward, loss, backward, clipping, and the
        fused update told (found_inf) where the eager step would not have made it."""
        t = self.trainer
        model, opt = t.model, t.optimizer
        found = torch.zeros((), device=t.device)
        params = [p for p in model.parameters() if p.requires_grad]
        check_grad = bool(t.cfg.clip) or t.cfg.on_nan == "skip"
        max_norm = t.cfg.clip or math.inf

        def fn():
            opt.zero_grad(set_to_none=True)   # (a capture starts with none: its grads are its own)
            if carry_in is not None:
                model._carry = carry_in
            with t._autocast(graph=True):
                out, loss = t._net(static)
            loss.backward()                  # (a stream's loss is the mean over its tokens)
            norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
            bad = ~torch.isfinite(loss)
            if check_grad:
                bad = bad | ~torch.isfinite(norm)
            found.copy_(bad.to(found.dtype))
            capturable = [g.get("capturable") for g in opt.param_groups]
            opt.found_inf = found            # the fused update skips itself where found is 1
            for g in opt.param_groups:
                if "capturable" in g:
                    g["capturable"] = True
            try:
                opt.step()
            finally:
                del opt.found_inf
                for g, c in zip(opt.param_groups, capturable):
                    if "capturable" in g:
                        g["capturable"] = c
            return out, loss.detach(), norm.detach(), carried()
        return fn
