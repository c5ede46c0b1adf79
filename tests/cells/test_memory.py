"""Recurrent memory networks: the memory block against hand-computed numbers and its loop
reference, masking, the RM/RMR models, sentence-level batching and log-probabilities,
training, checkpoints and the linear view of the LSTM below the block."""
import copy
import math

import pytest
import torch
from tests.support import max_diff

from rnnlens.analysis.lm import sentence_batch, sentence_logprobs, token_logprobs
from rnnlens.analysis.ngrams import explain
from rnnlens.cells.memory import MemoryBlock, memory_block_ref, memory_offsets
from rnnlens.data.batching import EOS, Example, SentenceIterator, same_length_batches, sentence_collate
from rnnlens.data.vocab import Vocab
from rnnlens.errors import RnnlensError
from rnnlens.models import RNNModel
from rnnlens.train.checkpoint import load_checkpoint, save_checkpoint
from rnnlens.config import Config, ModelConfig
from rnnlens.train.run import split_sentences
from rnnlens.train.trainer import Trainer, seed_everything

VARIANTS = [(t, c) for t in (False, True) for c in ("linear", "gated")]


def set_(param, rows):
    with torch.no_grad():
        param.copy_(torch.tensor(rows, dtype=param.dtype))


def hand_block(temporal=False, composition="linear"):
    """V = {pad, unk, a, b}, H = 2, N = 3: M[a] = e1, M[b] = e2, C[a] = (1, 2), C[b] = (3, 4)."""
    blk = MemoryBlock(4, 2, size=3, temporal=temporal, composition=composition).double()
    set_(blk.keys.weight, [[0, 0], [0, 0], [1, 0], [0, 1]])
    set_(blk.values.weight, [[0, 0], [0, 0], [1, 2], [3, 4]])
    if temporal:
        set_(blk.temporal_keys, [[0, 0], [1, 0], [5, 5]])       # row k: the word k back
        set_(blk.temporal_values, [[0, 0], [1, 1], [5, 5]])
    if composition == "linear":
        set_(blk.W_c.weight, [[0, 1], [1, 0]])                    # swaps h's coordinates
        set_(blk.W_c.bias, [0, 0])
    else:
        # z = r = sigmoid(0) = 1/2 and h~ = tanh(s): h^m = h/2 + tanh(s)/2
        w = torch.zeros(6, 2, dtype=torch.float64)
        w[4:] = torch.eye(2)
        set_(blk.W_s.weight, w.tolist())
        set_(blk.W_s.bias, [0] * 6)
        set_(blk.U_zr.weight, [[0, 0]] * 4)
        set_(blk.U.weight, [[0, 0]] * 2)
    return blk


# The sentence "a b": tokens (2, 3); LSTM states h_0 = (2, 0), h_1 = (1, 1).
TOKENS = torch.tensor([[2, 3]])
H_STATES = torch.tensor([[[2.0, 0.0], [1.0, 1.0]]], dtype=torch.float64)


def test_hand_computed_linear_block():
    out, attn, ctx = hand_block()(H_STATES, TOKENS, None)
    # t = 0: one slot (a), p = 1; s = C[a] = (1, 2); h^m = swap(2, 0) + s = (1, 4).
    # t = 1: logits M[b].h = 1, M[a].h = 1 -> p = (1/2, 1/2); s = (3,4)/2 + (1,2)/2 = (2, 3);
    #        h^m = swap(1, 1) + s = (3, 4).  Slot 2 does not exist at either step.
    assert attn[0].tolist() == [[1, 0, 0], [0.5, 0.5, 0]]
    assert ctx[0].tolist() == [[1, 2], [2, 3]]
    assert out[0].tolist() == [[1, 4], [3, 4]]


def test_hand_computed_temporal_block():
    out, attn, ctx = hand_block(temporal=True)(H_STATES, TOKENS, None)
    # t = 1: key of a (one word back) = M[a] + T_M[1] = (2, 0): logits (b, a) = (1, 2), so
    # p = (1, e) / (1 + e); value of a = C[a] + T_C[1] = (2, 3).  t = 0 uses row 0 only.
    e = math.e
    p = [1 / (1 + e), e / (1 + e)]
    assert max_diff(attn[0], torch.tensor([[1, 0, 0], [*p, 0]], dtype=torch.float64)) < 1e-15
    s1 = [p[0] * 3 + p[1] * 2, p[0] * 4 + p[1] * 3]
    assert max_diff(ctx[0], torch.tensor([[1, 2], s1], dtype=torch.float64)) < 1e-15
    assert max_diff(out[0, 1], torch.tensor([1 + s1[0], 1 + s1[1]], dtype=torch.float64)) < 1e-15


def test_hand_computed_gated_block():
    out, _, ctx = hand_block(composition="gated")(H_STATES, TOKENS, None)
    t = math.tanh
    want = torch.tensor([[1 + t(1) / 2, t(2) / 2], [0.5 + t(2) / 2, 0.5 + t(3) / 2]], dtype=torch.float64)
    assert ctx[0].tolist() == [[1, 2], [2, 3]]
    assert max_diff(out[0], want) < 1e-15


def random_block(temporal, composition, bidirectional=False, V=12, H=5, N=4, seed=0):
    torch.manual_seed(seed)
    blk = MemoryBlock(V, H, size=N, temporal=temporal, composition=composition,
                      bidirectional=bidirectional).double()
    for p in blk.parameters():            # larger than the init, so the softmax is not flat
        torch.nn.init.normal_(p)
    B, T = 3, 7
    h = torch.randn(B, T, H, dtype=torch.float64, requires_grad=True)
    tokens = torch.randint(2, V, (B, T))
    mask = torch.arange(T)[None] < torch.tensor([7, 5, 2])[:, None]
    tokens[~mask] = 0
    return blk, h, tokens, mask


def plain_block(blk, h, tokens, mask):
    """The block written out from the paper's equations (NOTES.md), one (row, step, slot) at a
    time: slot k < N holds the word k back, slot N + j the word j + 2 ahead (bidirectional);
    p_k = exp(e_k) / sum_j exp(e_j), e_k = (M[x] + T_M[k]) . h_t over the slots that exist;
    s_t = sum_k p_k (C[x] + T_C[k]); h^m = W_c h + b_c + s, or the gated unit of eq. 4-7.
    Returns (h_m, attn, context) like MemoryBlock.forward."""
    B, T, H = h.shape
    N, K = blk.size, blk.slots
    attn, ctx, out = h.new_zeros(B, T, K), h.new_zeros(B, T, H), h.new_zeros(B, T, H)
    with torch.no_grad():
        for b in range(B):
            L = int(mask[b].sum())
            for t in range(T):
                s = h.new_zeros(H)
                if t < L:
                    slots = {k: t - k for k in range(N) if t - k >= 0}
                    if blk.bidirectional:
                        slots.update({N + j: t + 2 + j for j in range(N) if t + 2 + j < L})
                    key, val, e = {}, {}, {}
                    for k, pos in slots.items():
                        key[k] = blk.keys.weight[tokens[b, pos]].clone()
                        val[k] = blk.values.weight[tokens[b, pos]].clone()
                        if blk.temporal:
                            key[k] += blk.temporal_keys[k]
                            val[k] += blk.temporal_values[k]
                        e[k] = float(key[k] @ h[b, t])
                    top = max(e.values())
                    Z = sum(math.exp(v - top) for v in e.values())
                    for k in slots:
                        attn[b, t, k] = math.exp(e[k] - top) / Z
                        s += attn[b, t, k] * val[k]
                ctx[b, t] = s
                hb = h[b, t]
                if blk.composition == "linear":
                    out[b, t] = blk.W_c.weight @ hb + blk.W_c.bias + s
                else:
                    Ws, bs = blk.W_s.weight, blk.W_s.bias
                    Uz, Ur = blk.U_zr.weight[:H], blk.U_zr.weight[H:]
                    z = torch.sigmoid(Ws[:H] @ s + bs[:H] + Uz @ hb)
                    r = torch.sigmoid(Ws[H:2 * H] @ s + bs[H:2 * H] + Ur @ hb)
                    cand = torch.tanh(Ws[2 * H:] @ s + bs[2 * H:] + blk.U.weight @ (r * hb))
                    out[b, t] = (1 - z) * hb + z * cand
    return out, attn, ctx


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("temporal,composition", VARIANTS)
def test_block_equals_the_equations_written_out(temporal, composition, bidirectional):
    blk, h, tokens, mask = random_block(temporal, composition, bidirectional)
    fast = blk(h, tokens, mask)
    want = plain_block(blk, h.detach(), tokens, mask)
    for name, a, b in zip(("h_m", "attention", "context"), fast, want):
        print(name)
        assert max_diff(a.detach(), b) < 1e-12
    attn = fast[1].detach()
    assert float(attn[mask].max(-1).values.min()) < 0.99        # the softmax is not one-hot: weights matter


@pytest.mark.parametrize("bidirectional", [False, True])
@pytest.mark.parametrize("temporal,composition", VARIANTS)
def test_fast_block_equals_loop_reference_with_gradients(temporal, composition, bidirectional):
    blk, h, tokens, mask = random_block(temporal, composition, bidirectional)
    fast = blk(h, tokens, mask)
    ref = memory_block_ref(blk, h, tokens, mask)
    for a, b in zip(fast, ref):
        assert max_diff(a, b) < 1e-12
    weights = [torch.randn_like(x) for x in fast]
    params = [h, *blk.parameters()]
    g_fast = torch.autograd.grad(sum((w * x).sum() for w, x in zip(weights, fast)), params, allow_unused=True)
    g_ref = torch.autograd.grad(sum((w * x).sum() for w, x in zip(weights, ref)), params, allow_unused=True)
    for a, b in zip(g_fast, g_ref):
        assert (a is None) == (b is None)
        if a is not None:
            assert max_diff(a, b) < 1e-12


@pytest.mark.parametrize("bidirectional", [False, True])
def test_attention_sums_to_one_and_is_zero_before_the_start_and_on_padding(bidirectional):
    blk, h, tokens, mask = random_block(True, "gated", bidirectional)
    out, attn, ctx = blk(h, tokens, mask)
    N = blk.size
    lengths = mask.sum(1)
    offsets = memory_offsets(N, bidirectional)
    for b in range(3):
        for t in range(7):
            pos = t + offsets
            exists = (pos >= 0) & (pos < lengths[b]) & (t < lengths[b])
            assert torch.all(attn[b, t][~exists] == 0)            # exactly zero, not small
            if t < lengths[b]:
                assert abs(attn[b, t].sum().item() - 1) < 1e-12
                assert torch.all(attn[b, t][exists] > 0)
            else:
                assert torch.all(ctx[b, t] == 0)
    assert torch.isfinite(out).all()
    (out.sum() + attn.sum()).backward()                         # no NaN from the all-masked rows
    assert torch.isfinite(h.grad).all()


def test_bidirectional_offsets_skip_the_word_to_predict():
    assert memory_offsets(3, False).tolist() == [0, -1, -2]
    assert memory_offsets(3, True).tolist() == [0, -1, -2, 2, 3, 4]


def tiny_cfg(memory="rm", **kw):
    base = {"cell": "lstm", "embedding_dim": 6, "hidden_size": 5, "memory": memory, "memory_size": 3,
            "memory_temporal": True, "memory_composition": "gated"}
    return ModelConfig(**{**base, **kw})


VOCAB = Vocab([EOS] + [f"w{i}" for i in range(10)])


def sentences(n=6, seed=0):
    import random

    rng = random.Random(seed)
    return [[f"w{rng.randrange(10)}" for _ in range(rng.randint(1, 8))] for _ in range(n)]


@pytest.mark.parametrize("memory", ["rm", "rmr"])
def test_padded_batch_equals_each_sentence_alone(memory):
    model = RNNModel(tiny_cfg(memory, layers=2), len(VOCAB), "lm").double().eval()
    sents = sentences()
    batch = sentence_batch(VOCAB, sents)
    out = model.encode(batch)
    attn = model.attention(batch)
    assert attn.shape == (len(sents), batch.tokens.shape[1], 3)
    for b, s in enumerate(sents):
        one = sentence_batch(VOCAB, [s])
        L = len(s) + 1
        assert max_diff(out[b, :L], model.encode(one)[0]) < 1e-12
        assert max_diff(attn[b, :L], model.attention(one)[0]) < 1e-12


def lstm_states(model, row):
    """h_t [L,H] of the model's first LSTM layer on one unpadded row, run by torch.nn.LSTMCell
    with its weights in float64."""
    from tests.support import torch_step

    cell = model.encoder.lower.cells[0]
    H = cell.hidden_size
    step = torch_step("lstm", cell)
    s, hs = torch.zeros(2 * H, dtype=torch.float64), []
    with torch.no_grad():
        for x in model.embedding.weight.detach().double()[torch.as_tensor(row)]:
            s = step(x, s)
            hs.append(s[H:])
    return torch.stack(hs)


@pytest.mark.parametrize("bidirectional", [False, True])
def test_rm_model_is_lstm_then_block_then_softmax(bidirectional):
    """The RM model's attention, context and output, rebuilt from torch's LSTMCell, the block's
    equations and the head's linear map, sentence by sentence."""
    model = RNNModel(tiny_cfg(memory_bidirectional=bidirectional), len(VOCAB), "lm").double().eval()
    batch = sentence_batch(VOCAB, sentences())
    B, T = batch.tokens.shape
    h = torch.zeros(B, T, 5, dtype=torch.float64)
    for b in range(B):
        L = int(batch.mask[b].sum())
        h[b, :L] = lstm_states(model, batch.tokens[b, :L])
    hm, attn, ctx = plain_block(model.encoder.block, h, batch.tokens, batch.mask)
    m = batch.mask[..., None]
    assert max_diff(model.attention(batch), attn) < 1e-12
    assert max_diff(model.memory_context(batch), ctx) < 1e-12
    assert max_diff(model.encode(batch) * m, hm * m) < 1e-12
    with torch.no_grad():
        logits = model(batch)
    W, bias = model.head.out.weight, model.head.out.bias
    want = hm @ W.T + (bias if bias is not None else 0)
    assert max_diff(logits * m, want * m) < 1e-12


def test_pad_tokens_have_no_effect_and_float32_train_mode_runs():
    model = RNNModel(tiny_cfg(), len(VOCAB), "lm").double().eval()
    batch = sentence_batch(VOCAB, sentences())
    ref = model.encode(batch)
    batch.tokens[~batch.mask] = 5                          # any id at the pads
    assert max_diff(model.encode(batch), ref) == 0
    model32 = RNNModel(tiny_cfg(layer_dropout=0.3), len(VOCAB), "lm").train()
    seen = []
    hook = model32.encoder.block.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
    b32 = sentence_batch(VOCAB, sentences())
    try:
        out = model32(b32)
    finally:
        hook.remove()
    assert out.dtype == torch.float32 and torch.isfinite(out).all()
    # the attention kept is that of this forward, on the dropped-out states the block read
    dropped = seen[0]
    assert bool((dropped == 0).any()) and not torch.equal(dropped, model32.encoder.last["states"])
    block64 = copy.deepcopy(model32.encoder.block).double()
    want = plain_block(block64, dropped.double(), b32.tokens, b32.mask)[1]
    assert max_diff(model32.last_attention.double(), want) < 1e-5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_memory_model_on_cuda_matches_cpu():
    model = RNNModel(tiny_cfg(), len(VOCAB), "lm").double().eval()
    batch = sentence_batch(VOCAB, sentences())
    ref = model(batch)
    assert max_diff(model.cuda()(batch.to("cuda")).cpu(), ref) < 1e-10


def test_bidirectional_block_never_sees_the_word_to_predict():
    model = RNNModel(tiny_cfg(memory_bidirectional=True), len(VOCAB), "lm").double().eval()
    s = ["w1", "w2", "w3", "w4", "w5", "w6"]
    base = sentence_batch(VOCAB, [s])
    attn, ctx = model.attention(base), model.memory_context(base)
    assert attn.shape[-1] == 6
    for t in range(len(s)):                  # the input at t + 1 is the word predicted at t
        changed = sentence_batch(VOCAB, [s])
        changed.tokens[0, t + 1] = VOCAB.stoi["w9"]
        assert max_diff(model.attention(changed)[0, t], attn[0, t]) == 0
        assert max_diff(model.memory_context(changed)[0, t], ctx[0, t]) == 0
        if t + 2 < len(s) + 1:           # ... while the word after it is seen
            later = sentence_batch(VOCAB, [s])
            later.tokens[0, t + 2] = VOCAB.stoi["w9"]
            assert max_diff(model.memory_context(later)[0, t], ctx[0, t]) > 0


def test_sentence_batch_convention():
    batch = sentence_batch(VOCAB, [["w1", "w2"], ["w3"], ["zzz"]])
    eos, w = VOCAB.stoi[EOS], VOCAB.stoi
    assert batch.tokens.tolist() == [[eos, w["w1"], w["w2"]], [eos, w["w3"], 0], [eos, VOCAB.unk_id, 0]]
    assert batch.targets.tolist() == [[w["w1"], w["w2"], eos], [w["w3"], eos, 0], [VOCAB.unk_id, eos, 0]]
    assert batch.mask.sum(1).tolist() == [3, 2, 2]
    with pytest.raises(RnnlensError, match="<eos>"):
        sentence_batch(Vocab(["a"]), [["a"]])


@pytest.mark.parametrize("memory", [None, "rm", "rmr"])
def test_sentence_logprobs_sum_token_logprobs_and_ignore_batching(memory):
    model = RNNModel(tiny_cfg(memory), len(VOCAB), "lm", sentence_level=True).double()
    sents = sentences(9)
    batch = sentence_batch(VOCAB, sents)
    model.eval()
    logits = model(batch)                                   # a full forward
    per_token = torch.log_softmax(logits, -1).gather(-1, batch.targets[..., None])[..., 0]
    want = (per_token * batch.mask).sum(1)
    got = sentence_logprobs(model, VOCAB, sents)
    assert got.dtype == torch.float64 and got.shape == (9,)
    assert max_diff(got, want) < 1e-10
    for bs in (1, 2, 4):
        assert max_diff(sentence_logprobs(model, VOCAB, sents, batch_size=bs), got) < 1e-10
    rev = sentence_logprobs(model, VOCAB, sents[::-1] + [["w1"] * 20], batch_size=3)
    assert max_diff(rev[:9].flip(0), got) < 1e-10
    assert max_diff(token_logprobs(model, batch).sum(1), want) < 1e-10


def test_sentence_logprobs_with_adaptive_softmax_and_a_stream_model():
    vocab = Vocab([EOS] + [f"w{i}" for i in range(30)])
    cfg = tiny_cfg(None, hidden_size=16, adaptive_softmax=[5, 15])
    model = RNNModel(cfg, len(vocab), "lm").double().eval()      # carries state between batches
    assert model.carries_state
    sents = sentences(5)
    # each sentence alone from a zero state, scored by the adaptive softmax's own loss
    want = []
    for sent in sents:
        one = sentence_batch(vocab, [sent])
        model.reset_state()
        with torch.no_grad():
            want.append(-float(model.head.nll_sum(model(one), one)))
    want = torch.tensor(want, dtype=torch.float64)
    model(sentence_batch(vocab, sentences(3, seed=7)))      # leaves a carried state behind
    a = sentence_logprobs(model, vocab, sents)
    assert max_diff(a, want) < 1e-10
    assert max_diff(sentence_logprobs(model, vocab, sents), a) == 0     # nor does its own call leak


def test_every_sentence_exactly_once_per_epoch_in_same_length_batches():
    lengths = [3, 1, 3, 2, 3, 3, 1, 5, 2, 3, 3]
    for seed in range(3):
        order = same_length_batches(lengths, 2, shuffle=True, seed=seed)
        flat = sorted(i for b in order for i in b)
        assert flat == list(range(len(lengths)))
        assert all(len({lengths[i] for i in b}) == 1 and len(b) <= 2 for b in order)
    exs = [Example([f"w{i % 10}"] * n + [EOS]) for i, n in enumerate(lengths * 5)]
    it = SentenceIterator(exs, VOCAB, 4, shuffle=True, seed=0)
    seen = []
    for epoch in range(2):
        rows = [tuple(r[m].tolist()) for b in it for r, m in zip(b.targets, b.mask)]
        assert len(rows) == len(exs)                      # none skipped, none served twice
        assert sorted(rows) == sorted(tuple(VOCAB.encode(e.tokens)) for e in exs)
        seen.append(rows)
    assert seen[0] != seen[1]                              # a new order each epoch
    assert len(it) == len(list(it))


def test_split_sentences_drops_empty_lines():
    stream = ["a", "b", EOS, EOS, "c", EOS, "d"]
    ex, empty = split_sentences(stream)
    assert [e.tokens for e in ex] == [["a", "b", EOS], ["c", EOS], ["d", EOS]] and empty == 1
    assert sentence_collate([[5, 6, 2]], 2).tokens.tolist() == [[2, 5, 6]]


def test_linear_view_explains_the_lstm_below_the_block():
    model = RNNModel(tiny_cfg(), len(VOCAB), "lm").double().eval()
    batch = sentence_batch(VOCAB, sentences())
    model.encode(batch)
    attended = model.encoder.last["states"]                    # what the block read
    states = model.states(batch)                               # the LSTM's [c; h]
    view = model.linear_view(batch)
    assert max_diff(states[..., view.readout] * batch.mask[..., None], attended * batch.mask[..., None]) < 1e-12
    w = torch.randn(5, dtype=torch.float64)
    with torch.no_grad():
        ex = explain(view, w, states)
    # the n-grams and the state, rebuilt from torch's LSTMCell unrolled to first order
    from tests.support import first_order_ngrams, torch_step

    cell = model.encoder.lower.cells[0]
    for b in range(len(batch)):
        L = int(batch.mask[b].sum())
        x = model.embedding.weight.detach()[batch.tokens[b, :L]]
        v = first_order_ngrams(torch_step("lstm", cell), x, 10)[..., 5:]          # h half of [c; h]
        assert max_diff(ex.model[b, :L, 0], lstm_states(model, batch.tokens[b, :L]) @ w) < 1e-12
        assert max_diff(ex.context[b, :L, 0], v.sum(1) @ w) < 1e-12
        assert max_diff(ex.scores[b, L - 1, :L, 0], v[L - 1] @ w) < 1e-12
    assert max_diff(ex.context + ex.remainder, ex.model) < 1e-12
    assert float(ex.remainder.abs().max()) > 1e-4              # the LSTM is not its first-order view
    want = plain_block(model.encoder.block, attended, batch.tokens, batch.mask)
    assert max_diff(model.memory_context(batch), want[2]) < 1e-12
    assert max_diff(model.attention(batch), want[1]) < 1e-12
    deep = RNNModel(tiny_cfg(layers=3), len(VOCAB), "lm")
    with pytest.raises(RnnlensError, match="single-layer"):
        deep.linear_view(batch)


def test_attention_needs_a_memory_block():
    model = RNNModel(tiny_cfg(None), len(VOCAB), "lm")
    with pytest.raises(RnnlensError, match="no memory block"):
        model.attention(sentence_batch(VOCAB, [["w1"]]))


def test_paper_init_forget_bias_and_uniform_range():
    model = RNNModel(tiny_cfg("rmr", init_range=0.05, forget_bias=1.0, layers=2), len(VOCAB), "lm")
    for name, p in model.named_parameters():
        if "bias_ih" in name:
            H = p.shape[0] // 4
            assert torch.all(p[H: 2 * H] == 1.0), name
        elif "bias_hh" in name:
            assert torch.all(p[p.shape[0] // 4: p.shape[0] // 2] == 0.0), name
        else:
            assert p.abs().max() <= 0.05, name
    assert torch.all(model.embedding.weight[0] == 0)
    assert not model.carries_state


def test_the_upper_recurrent_layer_takes_the_model_settings_as_the_lower_ones_do():
    """RMR's second recurrent layer is built as every other layer: the model's recurrent
    dropout and clamp (Cell.configure) and the spectral norm on its recurrent weights."""
    from torch.nn.utils import parametrize

    model = RNNModel(tiny_cfg("rmr", cell="mvma-g", clamp=3.0, recurrent_dropout=0.2, spectral_norm=True),
                     len(VOCAB), "lm")
    lower, upper = model.encoder.lower.cells[0], model.encoder.upper
    for cell in (lower, upper):
        assert cell.recurrent_dropout == 0.2 and cell.clamp == 3.0
        assert cell.recurrent_weights() and all(parametrize.is_parametrized(m, n) for m, n in cell.recurrent_weights())


def test_config_validation_of_memory_fields():
    ok = {"data": {"corpus": "ptb", "sentence_level": True}, "model": {"cell": "lstm", "memory": "rm"}}
    Config.from_dict(ok)
    bad = [({"model": {"memory": "rnn"}}, "not one of rm, rmr"),
           ({"model": {"memory_composition": "sum"}}, "not one of linear, gated"),
           ({"model": {"memory_size": 0}}, r"memory_size must be in \[1, 1048576\]"),
           ({"data": {"sentence_level": False}}, "needs data.sentence_level"),
           ({"model": {"bidirectional": True}}, "one-direction"),
           ({"model": {"cell": "gru", "forget_bias": 1.0}}, "forget_bias is for the lstm"),
           ({"train": {"lr_halve_after": 0}}, "lr_halve_after must be >= 1"),
           ({"train": {"loss_average": "word"}}, "not one of token, sentence")]
    for over, msg in bad:
        d = {k: {**ok.get(k, {}), **over.get(k, {})} for k in ("data", "model", "train")}
        with pytest.raises(RnnlensError, match=msg):
            Config.from_dict(d)


def test_sentence_loss_average_scales_the_gradient_by_tokens_per_sentence():
    batch = sentence_batch(VOCAB, sentences())
    steps = {}
    for average in ("token", "sentence"):
        cfg = Config.from_dict({"data": {"corpus": "ptb", "sentence_level": True},
                                "model": {"cell": "lstm", "embedding_dim": 6, "hidden_size": 5, "memory": "rm"},
                                "train": {"optimizer": "sgd", "lr": 1e-3, "epochs": 1, "clip": None,
                                          "loss_average": average}})
        torch.manual_seed(0)
        model = RNNModel(cfg.model, len(VOCAB), "lm", sentence_level=True).double()
        before = model.head.out.weight.detach().clone()
        Trainer(model, cfg.train, progress=False).fit([batch])
        steps[average] = model.head.out.weight.detach() - before
    ratio = float(batch.mask.sum()) / len(batch)
    assert max_diff(steps["sentence"], ratio * steps["token"]) < 1e-12


def copy_task(n, seed=0):
    """Sentences "wK w. w. w. wK": the last word repeats the first, 4 words back, which the
    memory block can read directly."""
    import random

    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = f"w{rng.randrange(10)}"
        out.append(Example([k] + [f"w{rng.randrange(10)}" for _ in range(3)] + [k, EOS]))
    return out


def test_tiny_rm_training_lowers_the_loss():
    seed_everything(0)
    cfg = Config.from_dict({"data": {"corpus": "ptb", "sentence_level": True},
                            "model": {"cell": "lstm", "embedding_dim": 16, "hidden_size": 16, "memory": "rm",
                                      "memory_size": 5, "memory_temporal": True, "init_range": 0.05,
                                      "forget_bias": 1.0},
                            "train": {"optimizer": "sgd", "lr": 1.0, "epochs": 6, "batch_size": 20,
                                      "lr_halve_after": 4, "patience": 10}})
    model = RNNModel(cfg.model, len(VOCAB), "lm", sentence_level=True)
    train = SentenceIterator(copy_task(1000), VOCAB, 20, seed=0)
    dev = SentenceIterator(copy_task(60, seed=1), VOCAB, 20, shuffle=False)
    trainer = Trainer(model, cfg.train, progress=False)
    before = trainer.evaluate(dev)["ppl"]
    history = trainer.fit(train, dev)
    after = trainer.evaluate(dev)["ppl"]
    print(before, after)
    assert after < 0.6 * before          # random words alone allow 10; the copied word lowers it
    assert [h["lr"] for h in history] == [1.0, 1.0, 1.0, 0.5, 0.25, 0.125]   # lr of the next epoch


def test_checkpoint_roundtrip_of_a_memory_model(tmp_path):
    cfg = Config.from_dict({"data": {"corpus": "ptb", "sentence_level": True},
                            "model": {"cell": "lstm", "embedding_dim": 6, "hidden_size": 5, "memory": "rm",
                                      "memory_size": 4, "memory_temporal": True,
                                      "memory_composition": "linear", "memory_bidirectional": True}})
    model = RNNModel(cfg.model, len(VOCAB), "lm", sentence_level=True).eval()
    batch = sentence_batch(VOCAB, sentences())
    ref, ref_attn = model(batch), model.attention(batch)
    save_checkpoint(tmp_path, model, cfg, VOCAB, None, "lm")
    loaded, cfg2, _, _ = load_checkpoint(tmp_path)
    assert cfg2.model.memory_bidirectional and not loaded.carries_state
    assert max_diff(loaded(batch), ref) == 0
    assert max_diff(loaded.attention(batch), ref_attn) == 0


def test_ptb_sentence_level_predicts_every_stream_token_once(shared_data):
    from rnnlens.train.run import batches, build_vocab, load_data

    cfg = Config.from_dict({"data": {"corpus": "ptb", "data_dir": str(shared_data), "sentence_level": True},
                            "model": {"cell": "lstm", "memory": "rm"}})
    data = load_data(cfg)
    assert [len(data.splits[k]) for k in ("train", "dev", "test")] == [42_068, 3_370, 3_761]   # the lines
    vocab = build_vocab(cfg, data)
    test = batches(cfg, "lm", data.splits["test"], vocab, train=False)
    assert isinstance(test, SentenceIterator)
    assert sum(int(b.mask.sum()) for b in test) == 82_430     # the stream's tokens, <eos> included


@pytest.mark.parametrize("memory", ["rm", "rmr"])
def test_ngram_attribution_adds_up_through_the_block(memory):
    """The LSTM under the block is decomposed, the block (and RMR's upper LSTM) read through
    the gradient: output = offset + sum of n-gram contributions + remainder."""
    from rnnlens.analysis.attribution import NGramAttribution

    torch.manual_seed(0)
    model = RNNModel(tiny_cfg(memory), len(VOCAB), "lm", sentence_level=True).double().eval()
    batch = sentence_batch(VOCAB, sentences(3, seed=4))
    t = int(batch.mask.sum(1).min()) - 1
    goal = [-1] * batch.tokens.shape[1]
    goal[t] = 2
    a = NGramAttribution(model, vocab=VOCAB).attribute_positions(batch, goal)[t]
    want = model(batch)[:, t, 2]
    rebuilt = a.offset + a.total + a.remainder
    print(memory, (rebuilt - want).abs().max().item(), a.remainder.abs().max().item())
    assert torch.allclose(a.output, want, atol=1e-12) and torch.allclose(rebuilt, want, atol=1e-10)

    # independently: w_t = df/dh_t for the LSTM's outputs h_t (autograd, the layers above
    # kept), v_{i:t} from torch's LSTMCell unrolled to first order (the [c; h] state)
    from tests.support import first_order_ngrams, torch_step

    leaf = {}

    def swap(module, args, output):
        leaf["h"] = output[0].detach().requires_grad_()
        return (leaf["h"], output[1])

    hook = model.encoder.lower.register_forward_hook(swap)
    try:
        f = model(batch)[:, t, 2]
    finally:
        hook.remove()
    w = torch.autograd.grad(f.sum(), leaf["h"])[0]                        # [B,T,H]
    h, f = leaf["h"].detach(), f.detach()
    cell = model.encoder.lower.cells[0]
    H = cell.hidden_size
    for b in range(len(batch)):
        L = int(batch.mask[b].sum())
        x = model.embedding.weight.detach()[batch.tokens[b, :L]]
        v = first_order_ngrams(torch_step("lstm", cell), x, 2 * H)[..., H:]   # [end, start, H]
        wb = w[b, :L]
        total = float(torch.einsum("th,tih->", wb, v))
        rem = float(torch.einsum("th,th->", wb, h[b, :L] - v.sum(1)))
        offset = float(f[b]) - float((wb * h[b, :L]).sum())
        print(b, total, float(a.total[b]), rem, float(a.remainder[b]), offset, float(a.offset[b]))
        assert abs(total - float(a.total[b])) < 1e-10
        assert abs(rem - float(a.remainder[b])) < 1e-10
        assert abs(offset - float(a.offset[b])) < 1e-10
        assert abs(total) > 1e-4 and abs(rem) > 1e-6           # both parts carry something
