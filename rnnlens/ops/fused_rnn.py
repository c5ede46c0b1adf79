"""torch's fused RNN kernels (oneDNN or ATen on the CPU, cuDNN on a GPU) over right-padded
rows of different lengths without packing them: see `rnn_by_length`. The cells' Python step
loops (rnnlens/cells/classic.py) are the reference; tests/cells/test_fused_classic.py
compares values, final states and gradients."""
from __future__ import annotations

import torch


def rnn_by_length(kernel, x, hx, weights, lengths, train: bool, lstm: bool):
    """torch's unpacked RNN kernel over right-padded rows of different lengths: rows sorted
    by length, and the time cut at each distinct length; each piece runs the rows still going
    from the states the piece before left, so every row's outputs and final state are exact
    (its pads get zeros, for hold_at_pads). -> (out [B,T,H], res with the final states as
    the packed kernel returns them: res[1] = h [1,B,H], and for the LSTM res[2] = c)."""
    B, T, _ = x.shape
    order = torch.argsort(lengths, descending=True, stable=True)
    sorted_len = lengths[order].tolist()
    back = torch.argsort(order).to(x.device)
    order = order.to(x.device)
    cuts = sorted(set(sorted_len))
    xs = x.index_select(0, order)
    state = [h.index_select(1, order) for h in hx] if lstm else [hx.index_select(1, order)]
    pieces, done, rows = [], [], B                               # rows: those still going, a prefix
    sizes = [c - p for p, c in zip([0, *cuts], cuts)]
    for chunk, end, size in zip(xs.split([*sizes, T - cuts[-1]], 1), cuts, sizes):   # (the last: no row's)
        h = tuple(t[:, :rows].contiguous() for t in state) if lstm else state[0][:, :rows].contiguous()
        r = kernel(chunk[:rows], h, weights, True, 1, 0.0, train, False, True)
        out = r[0]
        if rows < B:
            out = torch.cat([out, out.new_zeros(B - rows, size, out.shape[-1])], 0)
        pieces.append(out)
        state = list(r[1:])
        keep = sum(1 for n in sorted_len if n > end)             # the rows that end here: rows keep..rows-1
        done.append([t[:, keep:rows] for t in state])
        state, rows = [t[:, :keep] for t in state], keep
    out = torch.cat(pieces, 1)
    if cuts[-1] < T:                                             # columns no row reaches
        out = torch.cat([out, out.new_zeros(B, T - cuts[-1], out.shape[-1])], 1)
    finals = [torch.cat([d[i] for d in reversed(done)], 1).index_select(1, back) for i in range(len(done[0]))]
    return out.index_select(0, back), (None, *finals)
