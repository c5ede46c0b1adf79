"""CUDA graphs for the fused scans' loops over time on a GPU.

A fused scan's loop over time (rnnlens.ops.affine: the structured and LSTM-block scans,
forward and backward) issues a few small kernels a step: at batch 32 x hidden 256 each takes
a few microseconds on the GPU, and launching it from Python takes longer than running it, so
the loop is bound by launches, not by the GPU. `run(name, fn, *inputs)` captures the loop in
a CUDA graph and replays it: the inputs are copied into the graph's own buffers, the graph is
launched as one unit, and its outputs are copied out (the next replay writes the same
buffers). The copies are one pass over each tensor, small beside the loop.

`fn` is the eager loop itself, so the graph computes exactly what the eager loop computes;
tests/ops/test_cuda_graphs.py compares values and gradients with graphs on and off, over
replays with new inputs and several shapes.

When a graph is made. A graph serves one (name, shapes, dtypes, device, which inputs are
None). The first call of such a key runs eagerly; the second runs eagerly too and then
captures the graph (once more eagerly on the capture stream, then recorded without being
run), and later calls replay it. So shapes that
come once (the last, shorter batch of an epoch) never pay for a capture, and a training run
whose batches come in a few dozen lengths gets a graph for each of them. The graphs kept are
the most recently used, at most MAX_GRAPHS of them and at most MAX_BYTES of buffers together
(default: an eighth of the device's memory; a graph that alone needs more is never made).
Loops longer than MAX_STEPS steps run eagerly, and so does a loop whose capture failed (a
warning says so, once for its key). Everything else (CPU tensors, a stream that is
itself being captured, RNNLENS_CUDA_GRAPHS=0 or `set_enabled(False)`) runs `fn` directly.
"""
from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import Callable

import torch

from .switches import switched_off

MAX_GRAPHS = 128
MAX_STEPS = 1024
MAX_BYTES: int | None = None        # None: an eighth of the device's memory
SEEN_BEFORE_CAPTURE = 2             # a key's call that captures its graph (1: the first)

_enabled = not switched_off("RNNLENS_CUDA_GRAPHS")
_cache: OrderedDict = OrderedDict()     # key -> _Graph, least recently used first
_seen: dict = {}                        # key -> calls so far, for keys without a graph
_streams: dict = {}                     # device -> the stream graphs are captured on
_refused: set = set()                   # keys whose capture failed: they run eagerly from then on
_lock = threading.RLock()


class _Graph:
    def __init__(self, graph, inputs, outputs):
        self.graph, self.inputs, self.outputs = graph, inputs, outputs
        self.nbytes = sum(t.numel() * t.element_size() for t in (*inputs, *outputs) if t is not None)


def set_enabled(flag: bool) -> bool:
    """Turn the graphs on or off (also clears the kept graphs); returns the previous setting."""
    global _enabled
    old, _enabled = _enabled, bool(flag)
    clear()
    return old


def enabled() -> bool:
    return _enabled


def clear() -> None:
    """Drop every kept graph (their memory goes back to torch's allocator) and the call counts."""
    with _lock:
        _cache.clear()
        _seen.clear()
        _refused.clear()


def applies(t: torch.Tensor, steps: int) -> bool:
    """Whether `run` may use a graph for a loop of `steps` steps over tensors like t: not while
    autograd records (a backward with create_graph=True: a replay's outputs have no history)."""
    return (_enabled and t.is_cuda and 0 < steps <= MAX_STEPS and not torch.is_grad_enabled()
            and not torch.cuda.is_current_stream_capturing())


def _max_bytes(device: torch.device) -> int:
    if MAX_BYTES is not None:
        return MAX_BYTES
    return torch.cuda.get_device_properties(device).total_memory // 8


def _key(name: str, inputs) -> tuple:
    return (name, *((None if t is None else (tuple(t.shape), t.dtype, t.device)) for t in inputs))


def _capture(fn: Callable, inputs, stream) -> _Graph:
    """Capture fn over copies of inputs on `stream`, after one run of it there outside the
    capture (library handles and workspaces are made for that stream then)."""
    static_in = tuple(None if t is None else t.detach().clone() for t in inputs)
    graph = torch.cuda.CUDAGraph()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.no_grad():
        fn(*static_in)
        graph.capture_begin(capture_error_mode="thread_local")
        try:
            static_out = tuple(fn(*static_in))
        finally:
            graph.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return _Graph(graph, static_in, static_out)


def run(name: str, fn: Callable, *inputs: torch.Tensor | None) -> tuple:
    """fn(*inputs) -> tuple of tensors, through a CUDA graph where one is kept or due (see the
    module's docstring; the first tensor input decides, its dim 1 being the steps); the outputs
    are new tensors either way. fn must be a loop of tensor operations without host reads
    (.item(), .tolist()) or random numbers, whose work depends only on the inputs' shapes,
    dtypes and which are None. Where autograd records, fn runs as it is, recorded."""
    first = next(t for t in inputs if t is not None)
    if not applies(first, first.shape[1] if first.dim() > 1 else 0):
        return tuple(fn(*inputs))
    key = _key(name, inputs)
    device = first.device
    with _lock, torch.cuda.device(device):
        kept = _cache.get(key)
        if kept is not None:
            _cache.move_to_end(key)
            for buf, t in zip(kept.inputs, inputs):
                if buf is not None:
                    buf.copy_(t)
            kept.graph.replay()
            return tuple(o.clone() for o in kept.outputs)
        calls = _seen[key] = _seen.get(key, 0) + 1
        if len(_seen) > 16 * MAX_GRAPHS:            # a bounded count: forget the oldest half
            for k in list(_seen)[: len(_seen) // 2]:
                _seen.pop(k, None)
        out = tuple(fn(*inputs))                               # this call's result, eagerly
        if calls < SEEN_BEFORE_CAPTURE or key in _refused:
            return out
        limit = _max_bytes(device)
        need = sum(t.numel() * t.element_size() for t in (*inputs, *out) if t is not None)
        if need > limit:
            return out
        _seen.pop(key, None)
        stream = _streams.get(device)
        if stream is None:
            stream = _streams[device] = torch.cuda.Stream(device)
        try:
            kept = _cache[key] = _capture(fn, inputs, stream)
        except Exception as e:          # a loop that cannot be captured still runs, eagerly
            _refused.add(key)
            warnings.warn(f"rnnlens: no CUDA graph for {name} ({type(e).__name__}: {e}); it runs "
                          "step by step", RuntimeWarning, stacklevel=2)
            return out
        while len(_cache) > MAX_GRAPHS or sum(g.nbytes for g in _cache.values()) > limit:
            _cache.popitem(last=False)
        return out
