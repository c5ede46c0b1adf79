"""Linear-chain CRF against brute force over all K^T paths, hand sums, gradcheck, the
IOBES/BIO constraint tables, and a toy training run."""
import itertools

import pytest
import torch

from tests.support import max_diff
from rnnlens.heads.crf import LinearChainCRF, bio_constraints, iobes_constraints

D = torch.float64
K = 3
LENGTHS = [4, 1, 3, 2]


def make_crf(constraints=None, K=K):
    crf = LinearChainCRF(K, constraints).double()
    with torch.no_grad():                          # bigger than the init, so paths differ clearly
        for p in crf.parameters():
            p.normal_()
    return crf


def batch(lengths=LENGTHS, K=K):
    B, T = len(lengths), max(lengths)
    emissions = torch.randn(B, T, K, dtype=D)
    mask = torch.arange(T)[None] < torch.tensor(lengths)[:, None]
    tags = torch.randint(K, (B, T)).masked_fill(~mask, -100)   # pads hold junk
    return emissions, tags, mask


def hand_score(crf, em, path):
    """s(y) = start[y1] + sum emissions + sum transitions + end[yn], one path, one row."""
    trans, start, end = crf._params(D)
    s = start[path[0]] + end[path[-1]]
    for t, y in enumerate(path):
        s = s + em[t, y]
        if t:
            s = s + trans[path[t - 1], y]
    return s


def all_paths(n, K=K, allowed=None):
    for path in itertools.product(range(K), repeat=n):
        if allowed is None or allowed(path):
            yield list(path)


def path_ok(constraints):
    trans, start, end = constraints
    return lambda p: bool(start[p[0]] and end[p[-1]] and all(trans[a, b] for a, b in zip(p, p[1:])))


def test_log_partition_matches_brute_force():
    crf = make_crf()
    em, _, mask = batch()
    logz = crf.log_partition(em, mask)
    brute = torch.stack([torch.logsumexp(torch.stack([hand_score(crf, em[b, :n], p) for p in all_paths(n)]), 0)
                         for b, n in enumerate(LENGTHS)])
    assert logz.shape == (len(LENGTHS),) and logz.dtype == D
    assert max_diff(logz, brute) < 1e-10


def test_score_is_the_hand_sum():
    crf = make_crf()
    em, tags, mask = batch()
    s = crf.score(em, tags, mask)
    hand = torch.stack([hand_score(crf, em[b, :n], tags[b, :n].tolist()) for b, n in enumerate(LENGTHS)])
    assert max_diff(s, hand) < 1e-12
    # a tiny hand-worked case: K=2, one row of 2 tokens, path [0, 1]
    c = LinearChainCRF(2).double()
    with torch.no_grad():
        c.transitions.copy_(torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=D))
        c.start.copy_(torch.tensor([0.1, 0.2], dtype=D))
        c.end.copy_(torch.tensor([-0.3, 0.7], dtype=D))
    e = torch.tensor([[[1.0, 2.0], [3.0, 4.0]]], dtype=D)
    # 0.1 (start 0) + 1.0 (e[0,0]) + -1.0 (0->1) + 4.0 (e[1,1]) + 0.7 (end 1) = 4.8
    got = c.score(e, torch.tensor([[0, 1]]), torch.ones(1, 2, dtype=torch.bool))
    assert abs(got.item() - 4.8) < 1e-12


def test_decode_matches_brute_force_argmax():
    for _ in range(5):
        crf = make_crf()
        em, _, mask = batch()
        paths = crf.decode(em, mask)
        assert [len(p) for p in paths] == LENGTHS
        for b, n in enumerate(LENGTHS):
            best = max(all_paths(n), key=lambda p: hand_score(crf, em[b, :n], p).item())
            assert paths[b] == best
        _, best_score = crf.viterbi(em, mask)
        hand = torch.stack([hand_score(crf, em[b, :n], paths[b]) for b, n in enumerate(LENGTHS)])
        assert max_diff(best_score, hand) < 1e-12


def test_padding_does_not_matter():
    crf = make_crf()
    em, tags, mask = batch()
    em2 = em.clone()
    em2[~mask] = 1e3                               # junk under the pads
    assert max_diff(crf.log_partition(em, mask), crf.log_partition(em2, mask)) == 0
    assert max_diff(crf.score(em, tags, mask), crf.score(em2, tags.masked_fill(~mask, 2), mask)) == 0
    assert crf.decode(em, mask) == crf.decode(em2, mask)
    # a row alone gives the same numbers as inside the padded batch
    for b, n in enumerate(LENGTHS):
        one = crf.log_partition(em[b:b + 1, :n], mask[b:b + 1, :n])
        assert max_diff(one, crf.log_partition(em, mask)[b:b + 1]) < 1e-12


def test_nll_nonnegative_and_gradcheck():
    crf = make_crf()
    em, tags, mask = batch()
    nll = crf.nll(em, tags, mask)
    print("nll", nll.tolist())
    assert (nll >= 0).all()
    # the probabilities of all paths of a row sum to 1
    b, n = 2, LENGTHS[2]
    total = sum(torch.exp(-crf.nll(em[b:b + 1, :n], torch.tensor([p]), mask[b:b + 1, :n])) for p in all_paths(n))
    assert abs(total.item() - 1) < 1e-10

    em = em.clone().requires_grad_()
    params = (crf.transitions, crf.start, crf.end)
    leaves = (em, *[p.detach().clone().requires_grad_() for p in params])
    assert torch.autograd.gradcheck(lambda e, tr, st, en: _nll_with(e, tr, st, en, tags, mask), leaves)
    # and gradients reach the module's parameters
    crf.zero_grad()
    crf.nll(em, tags, mask).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in params)
    assert em.grad is not None


def _nll_with(e, tr, st, en, tags, mask):
    """nll as a plain function of the emissions and all three parameter tensors."""
    c = LinearChainCRF(tr.shape[0]).double()
    del c.transitions, c.start, c.end
    c.transitions, c.start, c.end = tr, st, en
    return c.nll(e, tags, mask)


def test_nll_gradcheck_with_constraints():
    tags = ["O", "B-X", "I-X", "E-X", "S-X"]
    crf = make_crf(iobes_constraints(tags), K=5)
    em, _, mask = batch([3, 1], K=5)
    gold = torch.tensor([[1, 3, 0], [4, -100, -100]])
    em = em.requires_grad_()
    assert torch.autograd.gradcheck(lambda e: crf.nll(e, gold, mask), (em,))


def test_iobes_and_bio_tables():
    tags = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    trans, start, end = iobes_constraints(tags)
    i = {t: n for n, t in enumerate(tags)}
    allowed = {(a, b) for a in tags for b in tags if trans[i[a], i[b]]}
    assert ("B-PER", "I-PER") in allowed and ("B-PER", "E-PER") in allowed
    assert ("I-PER", "I-PER") in allowed and ("I-PER", "E-PER") in allowed
    assert ("B-PER", "I-LOC") not in allowed and ("I-PER", "E-LOC") not in allowed
    assert ("B-PER", "O") not in allowed and ("B-PER", "B-PER") not in allowed and ("I-PER", "S-LOC") not in allowed
    assert ("O", "I-PER") not in allowed and ("E-PER", "I-PER") not in allowed and ("S-PER", "E-PER") not in allowed
    for a in ("O", "E-PER", "S-LOC"):
        for b in ("O", "B-LOC", "S-PER"):
            assert (a, b) in allowed
    # each row from B-/I- allows exactly I-X and E-X of its type; O/E/S rows allow O + 2 B + 2 S
    assert trans.sum(1).tolist() == [5, 2, 2, 5, 5, 2, 2, 5, 5]
    assert [t for t in tags if start[i[t]]] == ["O", "B-PER", "S-PER", "B-LOC", "S-LOC"]
    assert [t for t in tags if end[i[t]]] == ["O", "E-PER", "S-PER", "E-LOC", "S-LOC"]

    bio = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    trans, start, end = bio_constraints(bio)
    j = {t: n for n, t in enumerate(bio)}
    assert trans[j["B-PER"], j["I-PER"]] and trans[j["I-PER"], j["I-PER"]]
    assert not trans[j["O"], j["I-PER"]] and not trans[j["B-LOC"], j["I-PER"]] and not trans[j["I-LOC"], j["I-PER"]]
    assert trans[j["I-PER"], j["O"]] and trans[j["B-PER"], j["B-PER"]] and trans[j["I-LOC"], j["B-PER"]]
    assert start.tolist() == [True, True, False, True, False] and end.all()
    with pytest.raises(ValueError):
        iobes_constraints(["O", "PER"])
    with pytest.raises(ValueError):
        bio_constraints(["O", "S-PER"])


@pytest.mark.parametrize("scheme", ["iobes", "bio", "table"])
def test_constrained_brute_force_and_decode(scheme):
    if scheme == "iobes":
        tags = ["O", "B-X", "I-X", "E-X", "S-X"]
        cons = iobes_constraints(tags)
    elif scheme == "bio":
        tags = ["O", "B-X", "I-X", "B-Y", "I-Y"]
        cons = bio_constraints(tags)
    else:                                          # a bare [K,K] table: start/end free
        tags = ["a", "b", "c", "d", "e"]
        trans = torch.rand(5, 5) > 0.4
        trans[:, 0] = trans[0, :] = True
        cons = (trans, torch.ones(5, dtype=torch.bool), torch.ones(5, dtype=torch.bool))
    Kc = len(tags)
    ok = path_ok(cons)
    lengths = [4, 1, 3, 2]
    for trial in range(4):
        crf = make_crf(cons if scheme != "table" else cons[0], K=Kc)
        em, _, mask = batch(lengths, K=Kc)
        em = em * 3                                 # strong emissions that often prefer bad moves
        logz = crf.log_partition(em, mask)
        brute = torch.stack([torch.logsumexp(torch.stack([hand_score(crf, em[b, :n], p)
                                                          for p in all_paths(n, Kc, ok)]), 0)
                             for b, n in enumerate(lengths)])
        assert max_diff(logz, brute) < 1e-10
        paths = crf.decode(em, mask)
        for b, n in enumerate(lengths):
            assert ok(paths[b]), (tags, paths[b])
            best = max(all_paths(n, Kc, ok), key=lambda p: hand_score(crf, em[b, :n], p).item())
            assert paths[b] == best
        # the unconstrained argmax would often break a rule; the constrained one never does
        gold = torch.tensor([p + [0] * (max(lengths) - len(p)) for p in paths])
        assert (crf.nll(em, gold, mask) >= -1e-12).all()


def test_decoded_paths_never_break_iobes_rules_on_large_batches():
    tags = ["O", "B-PER", "I-PER", "E-PER", "S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC"]
    cons = iobes_constraints(tags)
    crf = LinearChainCRF(len(tags), cons)
    lengths = torch.randint(1, 12, (64,))
    T = int(lengths.max())
    mask = torch.arange(T)[None] < lengths[:, None]
    em = torch.randn(64, T, len(tags)) * 10
    ok = path_ok(cons)
    paths = crf.decode(em, mask)
    assert all(ok(p) for p in paths) and [len(p) for p in paths] == lengths.tolist()


def test_float32_matches_float64():
    crf = make_crf()
    em, tags, mask = batch()
    crf32 = LinearChainCRF(K)
    crf32.load_state_dict({k: v.float() for k, v in crf.state_dict().items()})
    assert max_diff(crf32.nll(em.float(), tags, mask).double(), crf.nll(em, tags, mask)) < 1e-5
    assert crf32.decode(em.float(), mask) == crf.decode(em, mask)
    assert crf32.nll(em.float(), tags, mask).dtype == torch.float32


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_matches_cpu():
    crf = make_crf(iobes_constraints(["O", "B-X", "I-X", "E-X", "S-X"]), K=5)
    em, tags, mask = batch(K=5)
    tags = tags.clamp(min=0)
    cuda = LinearChainCRF(5, iobes_constraints(["O", "B-X", "I-X", "E-X", "S-X"])).double().cuda()
    cuda.load_state_dict(crf.state_dict())
    assert max_diff(cuda.log_partition(em.cuda(), mask.cuda()).cpu(), crf.log_partition(em, mask)) < 1e-10
    assert max_diff(cuda.nll(em.cuda(), tags.cuda(), mask.cuda()).cpu(), crf.nll(em, tags, mask)) < 1e-10
    assert cuda.decode(em.cuda(), mask.cuda()) == crf.decode(em, mask)
    cuda.float().nll(em.float().cuda(), tags.cuda(), mask.cuda()).sum().backward()
    assert cuda.transitions.grad.is_cuda


def test_training_lowers_nll_on_a_toy_tagging_problem():
    """Tag = a deterministic function of the token, emissions from a tiny linear layer:
    training the layer and the CRF together must lower the NLL and decode the tags."""
    V, Kt, B, T = 6, 3, 32, 7
    tag_of = torch.tensor([0, 1, 2, 0, 1, 2])
    tokens = torch.randint(V, (B, T))
    lengths = torch.randint(1, T + 1, (B,))
    mask = torch.arange(T)[None] < lengths[:, None]
    gold = tag_of[tokens]
    layer = torch.nn.Linear(V, Kt)
    crf = LinearChainCRF(Kt)
    opt = torch.optim.Adam([*layer.parameters(), *crf.parameters()], lr=0.1)
    x = torch.nn.functional.one_hot(tokens, V).float()

    def loss():
        return crf.nll(layer(x), gold, mask).mean()

    first = loss().item()
    for _ in range(60):
        opt.zero_grad()
        l = loss()
        l.backward()
        opt.step()
    last = loss().item()
    print(f"nll {first:.3f} -> {last:.3f}")
    assert last < 0.25 * first
    with torch.no_grad():
        paths = crf.decode(layer(x), mask)
    assert paths == [gold[b, :n].tolist() for b, n in enumerate(lengths.tolist())]
