"""WFSAs over semirings (rational-recurrences §2-§5): Forward == brute-force path sums in
four semirings with and without ε-moves, Viterbi's path is a real path with the Forward
score, the paper's automata B, C, F reproduce eq. 4, eq. 11-13 and the z_t equations of
§5.1 on hand-worked numbers, DOT structure, and clear errors."""
import itertools
import math
import shutil
import subprocess

import pytest
import torch

from tests.support import max_diff
from rnnlens.analysis.wfsa import make_b, make_c, make_f, make_isan, make_ngram
from rnnlens.analysis.wfsa_core import WFSA, Path, Transition, path_ngram
from rnnlens.errors import RnnlensError
from rnnlens.ops.semiring import get_semiring

D = torch.float64
SEMIRINGS = ["real", "max-plus", "log", "min-plus"]
ALPHABET = "abc"


def rand_weights(shape, semiring, gen, p_zero=0.3):
    """Random weights of the semiring with about p_zero of them its zero."""
    sr = get_semiring(semiring)
    if semiring == "real":
        w = torch.rand(shape, generator=gen, dtype=D) * 2 - 1
    else:
        w = torch.randn(shape, generator=gen, dtype=D)
    return torch.where(torch.rand(shape, generator=gen, dtype=D) < p_zero,
                       torch.full(shape, sr.zero, dtype=D), w)


def rand_eps(Q, semiring, kind, gen):
    """None; an acyclic random ε-graph (strictly upper triangular); or one with a cycle
    (the upper-triangular part plus a back edge q_{Q-1} -> q0 and an ε self-loop on q1)."""
    if kind == "none":
        return None
    sr = get_semiring(semiring)
    e = rand_weights((Q, Q), semiring, gen, p_zero=0.5)
    e = torch.where(torch.ones(Q, Q, dtype=torch.bool).triu(1), e, torch.full_like(e, sr.zero))
    e[0, 1] = rand_weights((), semiring, gen, p_zero=0.0)           # at least one edge
    if kind == "cycle":
        e[Q - 1, 0] = rand_weights((), semiring, gen, p_zero=0.0)
        e[1, 1] = rand_weights((), semiring, gen, p_zero=0.0)
    return e


def rand_wfsa(Q, semiring, eps_kind="none", seed=0, max_eps=None, tau_form="dict"):
    gen = torch.Generator().manual_seed(seed)
    lam = rand_weights((Q,), semiring, gen)
    rho = rand_weights((Q,), semiring, gen)
    lam[0] = rand_weights((), semiring, gen, p_zero=0.0)
    rho[-1] = rand_weights((), semiring, gen, p_zero=0.0)
    mats = {a: rand_weights((Q, Q), semiring, gen) for a in ALPHABET}
    eps = rand_eps(Q, semiring, eps_kind, gen)
    if eps_kind == "cycle" and max_eps is None:
        max_eps = 2
    tau = {"dict": mats, "callable": lambda a: mats[a],
           "table": torch.stack([mats[a] for a in ALPHABET])}[tau_form]
    return WFSA(lam, rho, tau, eps, max_eps=max_eps, semiring=semiring)


def strings(max_len, seed, per_len=2):
    """Every string of length <= 2, then per_len random ones of each length up to max_len."""
    gen = torch.Generator().manual_seed(seed)
    out = ["".join(s) for n in range(3) for s in itertools.product(ALPHABET, repeat=n)]
    for n in range(3, max_len + 1):
        for _ in range(per_len):
            out.append("".join(ALPHABET[i] for i in torch.randint(3, (n,), generator=gen).tolist()))
    return out


def assert_close(a, b, tol=1e-10):
    a, b = torch.as_tensor(a, dtype=D), torch.as_tensor(b, dtype=D)
    both_inf = torch.isinf(a) & torch.isinf(b) & (torch.sign(a) == torch.sign(b))
    d = torch.where(both_inf, torch.zeros_like(a), (a - b).abs())
    print(f"max |diff| = {d.max().item() if d.numel() else 0.0:.3e}")
    assert bool((d <= tol * (1 + torch.where(both_inf, torch.zeros_like(a), b.abs()))).all()), (a, b)


# ---------------------------------------------------------------- (a) Forward == brute force
CASES = [(Q, "none", 5) for Q in (2, 3, 4)] + [(2, "acyclic", 5), (3, "acyclic", 4),
                                               (4, "acyclic", 3), (2, "cycle", 4), (3, "cycle", 3)]


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("Q,eps_kind,max_len", CASES)
def test_forward_equals_brute_force(semiring, Q, eps_kind, max_len):
    for seed in range(1 if eps_kind == "cycle" else 2):      # a cycle multiplies the paths
        A = rand_wfsa(Q, semiring, eps_kind, seed=seed)
        for x in strings(max_len, seed, per_len=1):
            assert_close(A.forward(x), A.brute_force(x))


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_epsilon_cycle_cap_counts_paths(semiring):
    """q0 <-ε-> q1: each cap K admits exactly the ε-runs of length <= K, so Forward and the
    enumeration agree for every K and the score changes with K."""
    sr = get_semiring(semiring)
    z, one = sr.zero, sr.one
    w = -1.0 if semiring == "min-plus" else 1.0          # min-plus: only negative loops pay off
    eps = torch.tensor([[z, 0.5 * w], [0.25 * w, z]], dtype=D)
    tau = {a: torch.tensor([[0.5, z], [z, 0.75]], dtype=D) for a in "ab"}
    scores = []
    for K in range(4):
        A = WFSA([one, z], [z, one], tau, eps, max_eps=K, semiring=semiring)
        assert A.eps_steps == K
        for x in ["", "a", "ab", "aba"]:
            assert_close(A.forward(x), A.brute_force(x))
        scores.append(A.forward("ab").item())
    assert len(set(scores)) == 4
    # real semiring by hand, x = "" : paths q0 -ε-> q1 (0.5), q0 -ε-> q1 -ε-> q0 -ε-> q1
    # (0.5 * 0.25 * 0.5 = 0.0625): K=0 -> 0, K=1 -> 0.5, K=2 -> 0.5, K=3 -> 0.5625
    if semiring == "real":
        got = [WFSA([1.0, 0.0], [0.0, 1.0], tau, eps, max_eps=K).forward("").item() for K in range(4)]
        assert got == [0.0, 0.5, 0.5, 0.5625]


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_tau_forms_prefixes_and_batches_agree(semiring):
    ref = rand_wfsa(3, semiring, "acyclic", seed=3)
    x = "abcab"
    assert_close(rand_wfsa(3, semiring, "acyclic", seed=3, tau_form="callable").forward(x),
                 ref.forward(x))
    ids = torch.tensor([ALPHABET.index(a) for a in x])          # token ids index a tau table
    assert_close(rand_wfsa(3, semiring, "acyclic", seed=3, tau_form="table").forward(ids),
                 ref.forward(x))
    prefixes = ref.forward_prefixes(x)
    assert prefixes.shape == (5,)
    assert_close(prefixes, torch.stack([ref.forward(x[:t]) for t in range(1, 6)]))
    assert ref.forward_prefixes("").shape == (0,)
    # three automata sharing the structure, stacked on a batch dim [3, ...]
    parts = [rand_wfsa(3, semiring, "acyclic", seed=s) for s in (4, 5, 6)]
    batched = WFSA(torch.stack([p.lam for p in parts]), torch.stack([p.rho for p in parts]),
                   lambda a: torch.stack([p.tau(a) for p in parts]),
                   torch.stack([p.eps for p in parts]), semiring=semiring)
    assert batched.forward(x).shape == (3,)
    assert batched.forward_prefixes(x).shape == (5, 3)
    assert_close(batched.forward(x), torch.stack([p.forward(x) for p in parts]))
    assert_close(batched.brute_force("abc"), torch.stack([p.brute_force("abc") for p in parts]))


# log-F: states no path reaches yet are -inf on every term; LOG.plus/sum give them gradient 0
@pytest.mark.parametrize("semiring,automaton", [("real", "F"), ("log", "B"), ("log", "F")])
def test_gradients_match_brute_force(semiring, automaton):
    gen = torch.Generator().manual_seed(7)
    w = torch.rand(3, 4, generator=gen, dtype=D).requires_grad_()
    gamma = torch.tensor(0.5, dtype=D, requires_grad=True)
    idx = {a: i for i, a in enumerate(ALPHABET)}
    fs = [lambda a, k=k: w[idx[a], k] for k in range(4)]

    def build():
        if automaton == "B":
            return make_b(fs[0], fs[1], semiring=semiring)
        return make_f(*fs, gamma, 0.3, 0.7, semiring=semiring)

    wrt = (w, gamma) if automaton == "F" else (w,)
    g_fwd = torch.autograd.grad(build().forward("abcba"), wrt, allow_unused=True)
    g_ref = torch.autograd.grad(build().brute_force("abcba"), wrt, allow_unused=True)
    for a, b in zip(g_fwd, g_ref):
        assert max_diff(a, b) < 1e-10


# ---------------------------------------------------------------- (b) Viterbi
@pytest.mark.parametrize("semiring", ["max-plus", "min-plus"])
@pytest.mark.parametrize("Q,eps_kind", [(2, "none"), (4, "none"), (3, "acyclic"), (3, "cycle")])
def test_viterbi_path_is_valid_and_scores_forward(semiring, Q, eps_kind):
    for seed in range(3):
        A = rand_wfsa(Q, semiring, eps_kind, seed=seed)
        for x in strings(5, seed, per_len=1):
            score, path = A.viterbi(x)
            assert_close(score, A.forward(x))
            A.check_path(path, x)                       # adjacent, derives x, <= K ε-moves
            assert path.string == list(x)
            if math.isfinite(score.item()):
                assert_close(A.path_score(path), score)
            # no enumerated path beats it
            best = max if semiring == "max-plus" else min
            if len(x) <= 3:
                assert_close(best(A.path_score(p) for p in A.paths(x)), score)


# ---------------------------------------------------------------- (c) the paper's automata
MU = {"a": 2.0, "b": 3.0, "c": 5.0}
PHI = {"a": 0.5, "b": 0.25, "c": 0.125}


def mu(a):
    return MU[a]


def phi(a):
    return PHI[a]


def test_b_figure1_eq4_by_hand():
    """x = abc, μ = (2, 3, 5), φ = (1/2, 1/4, 1/8). Eq. 4:
    B[abc] = μ(a)φ(b)φ(c) + μ(b)φ(c) + μ(c) = 2/32 + 3/8 + 5 = 0.0625 + 0.375 + 5 = 5.4375;
    prefixes B[a] = 2, B[ab] = μ(a)φ(b) + μ(b) = 0.5 + 3 = 3.5; the empty string gets 0̄.
    Proposition 7: these are c_t = φ(x_t) c_{t-1} + μ(x_t) from c_0 = 0."""
    B = make_b(mu, phi)
    assert B.forward("abc").item() == 5.4375
    assert B.brute_force("abc").item() == 5.4375
    assert B.forward_prefixes("abc").tolist() == [2.0, 3.5, 5.4375]
    assert B.forward("").item() == 0.0
    c, states = 0.0, []
    for a in "abc":
        c = phi(a) * c + mu(a)                         # eq. 6 / 23c
        states.append(c)
    assert states == [2.0, 3.5, 5.4375]
    # max-plus (Example 15, eq. 21c): max(2 + 1/4 + 1/8, 3 + 1/8, 5) = 5, μ taken at 'c'
    Bm = make_b(mu, phi, semiring="max-plus")
    score, path = Bm.viterbi("abc")
    assert score.item() == 5.0 == Bm.forward("abc").item()
    assert path_ngram(path) == [(2, "c")]
    assert [(t.src, t.dst) for t in path] == [(0, 0), (0, 0), (0, 1)]
    # x = cab: max(5 + 1/2 + 1/4, 2 + 1/4, 3) = 5.75, the unigram is 'c' at position 0
    score, path = Bm.viterbi("cab")
    assert score.item() == 5.75 and path_ngram(path) == [(0, "c")]
    # min-plus: min(2.375, 3.125, 5) = 2.375, the unigram 'a' at 0
    score, path = make_b(mu, phi, semiring="min-plus").viterbi("abc")
    assert score.item() == 2.375 and path_ngram(path) == [(0, "a")]


def test_b_batched_is_the_elementwise_recurrence():
    """d = 4 automata B_i at once (μ, φ return [d] vectors) give the cell c_t = f ⊙ c + u."""
    gen = torch.Generator().manual_seed(1)
    U = {a: torch.randn(4, generator=gen, dtype=D) for a in ALPHABET}
    F = {a: torch.rand(4, generator=gen, dtype=D) for a in ALPHABET}
    B = make_b(U.__getitem__, F.__getitem__)
    x = "abcca"
    c, states = torch.zeros(4, dtype=D), []
    for a in x:
        c = F[a] * c + U[a]
        states.append(c)
    assert max_diff(B.forward_prefixes(x), torch.stack(states)) < 1e-12
    assert max_diff(B.brute_force(x), states[-1]) < 1e-12


MU1 = {"a": 1.0, "b": 2.0, "c": 4.0}
PHI1 = {"a": 0.5, "b": 0.5, "c": 0.25}
MU2 = {"a": 3.0, "b": 1.0, "c": 2.0}
PHI2 = {"a": 0.5, "b": 0.25, "c": 0.5}


def test_c_figure2_eq11_13_by_hand():
    """x = abc. Eq. 12: β_1 = μ1(a) = 1, β_2 = β_1 φ1(b) + μ1(b) = 0.5 + 2 = 2.5,
    β_3 = 2.5 * 0.25 + 4 = 4.625 (eq. 13: β_2 = μ1(a)φ1(b) + μ1(b)).
    Eq. 11: C[x_:1] = 0 * φ2(a) + β_0 μ2(a) = 0, C[x_:2] = 0 + β_1 μ2(b) = 1,
    C[x_:3] = 1 * φ2(c) + β_2 μ2(c) = 0.5 + 5 = 5.5. By bigram paths: (a,b) 1*1*0.5 +
    (a,c) 1*0.5*2 + (b,c) 2*2 = 0.5 + 1 + 4 = 5.5."""
    C = make_c(MU1.__getitem__, PHI1.__getitem__, MU2.__getitem__, PHI2.__getitem__)
    assert C.forward_prefixes("abc").tolist() == [0.0, 1.0, 5.5]
    assert C.brute_force("abc").item() == 5.5
    beta = WFSA(C.lam, [0.0, 1.0, 0.0], C.tau)         # same automaton, q1 final: β_t
    assert beta.forward_prefixes("abc").tolist() == [1.0, 2.5, 4.625]
    # the bigram behind the max-plus score: max(1+1+0.5, 1+0.5+2, 2+2) = 4, (b, c)
    Cm = make_c(MU1.__getitem__, PHI1.__getitem__, MU2.__getitem__, PHI2.__getitem__,
                semiring="max-plus")
    score, path = Cm.viterbi("abc")
    assert score.item() == 4.0 and path_ngram(path) == [(1, "b"), (2, "c")]
    # (a, c) is a nonconsecutive bigram: it wins when φ1 is not down-weighting
    score, path = make_c(MU1.__getitem__, lambda a: 5.0, MU2.__getitem__, PHI2.__getitem__,
                         semiring="max-plus").viterbi("abc")
    assert score.item() == 1 + 5 + 2 and path_ngram(path) == [(0, "a"), (2, "c")]


def test_f_figure4_z_recurrence_by_hand():
    """F with C's weights, γ = 1/2, ρ1 = 1/4, ρ2 = 1/2 on x = abc. The z_t equations of
    §5.1 start from λ(q0) = 1 and its ε-closure z_0 = (1, 0, 0, γ) (the paper's "z_0 = 0"
    must exclude q0 and q3: eq. 19 with c_0 = 0 still adds r ⊙ u_1^(2)):
      t=1: z1 = 1, z2 = (0 + 0.5) * 3 = 1.5,                 F = 0.25 + 0.75 = 1
      t=2: z1 = 0.5 + 2 = 2.5, z2 = 1.5/4 + (1 + 0.5) * 1 = 1.875,  F = 0.625 + 0.9375 = 1.5625
      t=3: z1 = 2.5/4 + 4 = 4.625, z2 = 1.875/2 + 3 * 2 = 6.9375, F = 1.15625 + 3.46875 = 4.625"""
    F = make_f(MU1.__getitem__, PHI1.__getitem__, MU2.__getitem__, PHI2.__getitem__,
               0.5, 0.25, 0.5)
    assert F.eps_steps == 1
    assert F.forward_prefixes("abc").tolist() == [1.0, 1.5625, 4.625]
    assert F.brute_force("abc").item() == 4.625
    # the same numbers from the z_t equations as a plain loop (and eq. 19 with r = γ)
    z0, z1, z2, z3, out = 1.0, 0.0, 0.0, 0.5, []
    for a in "abc":
        z1, z2 = z1 * PHI1[a] + z0 * MU1[a], z2 * PHI2[a] + (z1 + z3) * MU2[a]
        z0, z3 = 1.0, 0.5
        out.append(0.25 * z1 + 0.5 * z2)
    assert out == [1.0, 1.5625, 4.625]


def test_f_viterbi_takes_the_epsilon_shortcut():
    """Max-plus F, γ = 10, ρ1 = -100, ρ2 = 0, x = ab. Candidates ending in q2:
    ε then μ2(a) then φ2(b): 10 + 3 + 0.25 = 13.25; wait on q0, ε, μ2(b): 10 + 1 = 11;
    bigram μ1(a) μ2(b): 1 + 1 = 2. Best 13.25, a unigram at position 0 reached via q3."""
    F = make_f(MU1.__getitem__, PHI1.__getitem__, MU2.__getitem__, PHI2.__getitem__,
               10.0, -100.0, 0.0, semiring="max-plus")
    score, path = F.viterbi("ab")
    assert score.item() == 13.25 == F.forward("ab").item() == F.brute_force("ab").item()
    assert list(path) == [Transition(0, 3, None, 0), Transition(3, 2, "a", 0),
                          Transition(2, 2, "b", 1)]
    assert path_ngram(path) == [(0, "a")]
    assert F.path_score(path).item() == 13.25


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_ngram_appendix_b(semiring):
    """n = 1 is B, n = 2 is C with φ1 = φ2 = φ; n = 3 follows
    z_t^(j) = z_{t-1}^(j) φ(x_t) ⊕ z_{t-1}^(j-1) μ_j(x_t) with z^(0) = 1̄."""
    sr = get_semiring(semiring)
    gen = torch.Generator().manual_seed(2)
    mus = [{a: torch.randn((), generator=gen, dtype=D).item() for a in ALPHABET} for _ in range(3)]
    ph = {a: torch.rand((), generator=gen, dtype=D).item() for a in ALPHABET}
    x = "abcacb"
    one = make_ngram([mus[0].__getitem__], ph.__getitem__, semiring=semiring)
    assert one.Q == 2
    assert_close(one.forward_prefixes(x),
                 make_b(mus[0].__getitem__, ph.__getitem__, semiring=semiring).forward_prefixes(x))
    two = make_ngram([m.__getitem__ for m in mus[:2]], ph.__getitem__, semiring=semiring)
    assert_close(two.forward_prefixes(x),
                 make_c(mus[0].__getitem__, ph.__getitem__, mus[1].__getitem__, ph.__getitem__,
                        semiring=semiring).forward_prefixes(x))
    three = make_ngram([m.__getitem__ for m in mus], ph.__getitem__, semiring=semiring)
    assert three.Q == 4
    z, out = [sr.one, sr.zero, sr.zero, sr.zero], []
    for a in x:
        z = [sr.one] + [sr.plus(sr.times(z[j], ph[a]), sr.times(z[j - 1], mus[j - 1][a]))
                        for j in range(1, 4)]
        out.append(z[3])
    assert_close(three.forward_prefixes(x), torch.tensor(out, dtype=D))
    assert_close(three.forward(x[:4]), three.brute_force(x[:4]))


def test_isan_appendix_c():
    """The 2d-state automata G_1..G_d give c_t = W_{x_t} c_{t-1} + b_{x_t} (eq. 16-18)."""
    gen = torch.Generator().manual_seed(5)
    d = 3
    W = {a: torch.randn(d, d, generator=gen, dtype=D) for a in ALPHABET}
    b = {a: torch.randn(d, generator=gen, dtype=D) for a in ALPHABET}
    G = make_isan(W.__getitem__, b.__getitem__, d)
    x = "abcab"
    c, states = torch.zeros(d, dtype=D), []
    for a in x:
        c = W[a] @ c + b[a]
        states.append(c)
    assert max_diff(G.forward_prefixes(x), torch.stack(states)) < 1e-12
    assert max_diff(G.brute_force(x[:3]), states[2]) < 1e-12


# ---------------------------------------------------------------- (d) DOT
def test_dot_for_f():
    F = make_f(mu, phi, mu, phi, 0.5, 0.25, 0.5)
    dot = F.to_dot(names=["start", "uni", "bi", "skip"])
    lines = dot.strip().splitlines()
    assert lines[0] == "digraph WFSA {" and lines[-1] == "}"
    assert '  s0 [label="start", style=bold, penwidth=2];' in lines          # initial
    assert '  s1 [label="uni", shape=doublecircle];' in lines                 # final ρ1
    assert '  s2 [label="bi", shape=doublecircle];' in lines                  # final ρ2
    assert '  s3 [label="skip"];' in lines
    edges = [ln for ln in lines if "->" in ln]
    assert len(edges) == 7
    assert '  s0 -> s3 [label="ε: γ", style=dashed];' in lines
    assert '  s0 -> s1 [label="mu(α)"];' in lines                             # the callable's name
    assert '  s3 -> s2 [label="mu(α)"];' in lines
    assert '  s0 -> s0 [label="1"];' in lines
    B = make_b(lambda a: 1.0, lambda a: 0.5)                                  # lambdas: paper names
    assert '  s0 -> s1 [label="μ(α)"];' in B.to_dot()
    _maybe_parse(dot)


def test_dot_from_dict_and_labels():
    z = 0.0
    A = WFSA([1.0, 0.0], [0.0, 1.0],
             {"a": [[1.0, 2.0], [z, z]], "b": [[1.0, z], [z, 3.0]]},
             eps=[[z, 0.5], [z, z]])
    dot = A.to_dot()
    assert '  s0 -> s0 [label="a,b"];' in dot and '  s0 -> s1 [label="a"];' in dot
    assert '  s1 -> s1 [label="b"];' in dot
    assert '  s0 -> s1 [label="ε: 0.5", style=dashed];' in dot
    C = WFSA([1.0, 0.0], [0.0, 1.0], lambda a: torch.eye(2, dtype=D))
    with pytest.raises(RnnlensError, match="symbol_label"):
        C.to_dot()
    assert '  s0 -> s0 [label="x"];' in C.to_dot(alphabet=["x"])
    assert '  s1 -> s0 [label="back \\"q\\""];' in C.to_dot(symbol_label={(1, 0): 'back "q"'})
    _maybe_parse(dot)


def _maybe_parse(dot):
    if shutil.which("dot"):
        r = subprocess.run(["dot", "-Tsvg"], check=False, input=dot, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- (e) errors
def test_epsilon_cycle_needs_a_cap():
    z = 0.0
    eps = [[z, 0.5, z], [z, z, 0.5], [0.5, z, z]]
    with pytest.raises(RnnlensError, match=r"cycle \(q0 -> q1 -> q2 -> q0\).*max_eps"):
        WFSA([1.0, z, z], [z, z, 1.0], {"a": torch.eye(3)}, eps)
    with pytest.raises(RnnlensError, match="cycle"):                       # an ε self-loop
        WFSA([1.0, z], [z, 1.0], {"a": torch.eye(2)}, [[0.5, z], [z, z]])
    with pytest.raises(RnnlensError, match="max_eps"):
        WFSA([1.0, z], [z, 1.0], {"a": torch.eye(2)}, [[z, 1.0], [z, z]], max_eps=-1)
    # max-plus: the zero is -inf, so a 0.0 entry is an edge (a cycle), -inf is not
    ninf = -math.inf
    with pytest.raises(RnnlensError, match="cycle"):
        WFSA([0.0, ninf], [ninf, 0.0], {"a": torch.zeros(2, 2)}, [[ninf, 0.0], [0.0, ninf]],
             semiring="max-plus")
    ok = WFSA([0.0, ninf], [ninf, 0.0], {"a": torch.zeros(2, 2)}, [[ninf, 0.0], [ninf, ninf]],
              semiring="max-plus")
    assert ok.eps_steps == 1


def test_shape_and_input_errors():
    with pytest.raises(RnnlensError, match="rho"):
        WFSA([1.0, 0.0], [0.0, 1.0, 0.0], {"a": torch.eye(2)})
    with pytest.raises(RnnlensError, match=r"tau\['a'\] must have shape \[\.\.\., 2, 2\]"):
        WFSA([1.0, 0.0], [0.0, 1.0], {"a": torch.eye(3)})
    with pytest.raises(RnnlensError, match="eps must have shape"):
        WFSA([1.0, 0.0], [0.0, 1.0], {"a": torch.eye(2)}, eps=torch.zeros(3, 3))
    A = WFSA([1.0, 0.0], [0.0, 1.0], lambda a: torch.eye(3))
    with pytest.raises(RnnlensError, match=r"tau\('a'\) must have shape"):
        A.forward("a")
    with pytest.raises(RnnlensError, match="do not broadcast"):
        WFSA(torch.zeros(3, 2), torch.zeros(4, 2), {"a": torch.eye(2)})
    A = WFSA([1.0, 0.0], [0.0, 1.0], {"a": torch.eye(2)})
    with pytest.raises(RnnlensError, match="no default"):
        A.forward("ab")
    A = WFSA([1.0, 0.0], [0.0, 1.0], {"a": torch.eye(2)}, default=torch.zeros(2, 2))
    assert A.forward("ab").item() == 0.0
    with pytest.raises(RnnlensError, match="idempotent"):
        A.viterbi("a")
    with pytest.raises(RnnlensError, match="state names"):
        WFSA([1.0, 0.0], [0.0, 1.0], {"a": torch.eye(2)}, states=["only"])
    with pytest.raises(RnnlensError, match="unknown semiring"):
        WFSA([1.0, 0.0], [0.0, 1.0], {"a": torch.eye(2)}, semiring="tropical-ish")
    B = make_b(mu, phi, semiring="max-plus")
    with pytest.raises(RnnlensError, match="not a path"):
        B.path_score(Path(0, (Transition(1, 1, "a", 0),)))
    with pytest.raises(RnnlensError, match="derives"):
        B.check_path(Path(0, (Transition(0, 1, "a", 0),)), "b")
