"""Linear-chain CRF over per-token emission scores, with optional hard transition constraints.

The score of a tag path y_1..y_n of a row of length n is

    s(y) = start[y_1] + sum_t emissions[t, y_t] + sum_{t>1} transitions[y_{t-1}, y_t] + end[y_n]

and p(y | x) = exp(s(y)) / Z with log Z = logsumexp over all K^n paths (`log_partition`,
the forward algorithm in log space). `nll` = log Z - s(y) >= 0. `decode` is Viterbi.

Shapes: emissions [B,T,K] float, tags [B,T] long, mask [B,T] bool, right-padded (True on
real tokens; every row has length >= 1). Tags under padding are ignored (they may hold any
value, e.g. -100). The batch is vectorised; only time is looped over.

Constraints (`iobes_constraints`, `bio_constraints`) are boolean tables of allowed moves.
Training and scoring (`log_partition`, `score`, `nll`) add DISALLOWED_PENALTY (-1e4) to
every disallowed start/transition/end, so they stay finite and differentiable: a
disallowed path keeps a weight of about exp(-1e4) = 0 in Z, and a gold path that breaks
a constraint gets an NLL of about 1e4. `decode` masks them to -inf, so a decoded path
never contains a disallowed move as long as one allowed path of that length exists.
"""
from __future__ import annotations

import torch
from torch import nn

DISALLOWED_PENALTY = -1e4

Constraints = tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def _split_tag(tag: str) -> tuple[str, str]:
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''). Splits at the first hyphen, as conlleval."""
    if tag == "O":
        return "O", ""
    prefix, sep, typ = tag.partition("-")
    if not sep or not typ:
        raise ValueError(f"tag {tag!r} is neither 'O' nor PREFIX-TYPE")
    return prefix, typ


def _constraints(tags: list[str], scheme: str) -> Constraints:
    parts = [_split_tag(t) for t in tags]
    allowed_prefixes = {"bio": "BIO", "iobes": "BIOES"}[scheme]
    for t, (p, _) in zip(tags, parts):
        if p not in allowed_prefixes:
            raise ValueError(f"tag {t!r} has a prefix outside the {scheme.upper()} scheme")
    K = len(tags)
    trans = torch.zeros(K, K, dtype=torch.bool)
    for i, (pi, ti) in enumerate(parts):
        for j, (pj, tj) in enumerate(parts):
            if scheme == "bio":
                # I-X only continues B-X or I-X; anything else may follow anything.
                ok = pj != "I" or (pi in "BI" and ti == tj)
            else:
                inside = pi in "BI"                       # a chunk is open after B-X / I-X
                if pj in "IE":                            # ... and only I-X / E-X continue it
                    ok = inside and ti == tj
                else:                                     # O, B-*, S-* need it closed
                    ok = not inside
            trans[i, j] = ok
    if scheme == "bio":
        start = torch.tensor([p != "I" for p, _ in parts], dtype=torch.bool)
        end = torch.ones(K, dtype=torch.bool)
    else:
        start = torch.tensor([p in "OBS" for p, _ in parts], dtype=torch.bool)
        end = torch.tensor([p in "OES" for p, _ in parts], dtype=torch.bool)
    return trans, start, end


def iobes_constraints(tags: list[str]) -> Constraints:
    """IOBES tag set -> (allowed_trans [K,K], allowed_start [K], allowed_end [K]), bool.

    allowed_trans[i, j]: tag j may follow tag i. After B-X or I-X only I-X / E-X; I-X and
    E-X only after B-X / I-X; O, B-*, S-* only after O, E-*, S-*. A row starts with O,
    B-* or S-* and ends with O, E-* or S-*.
    """
    return _constraints(tags, "iobes")


def bio_constraints(tags: list[str]) -> Constraints:
    """BIO (IOB2) tag set -> (allowed_trans [K,K], allowed_start [K], allowed_end [K]), bool.

    I-X may only follow B-X or I-X and may not start a row; every other move is allowed.
    """
    return _constraints(tags, "bio")


class LinearChainCRF(nn.Module):
    """Linear-chain CRF with K tags.

    Parameters: transitions [K,K] (transitions[i, j] scores tag i followed by tag j),
    start [K], end [K]. `constraints` is None, a bool [K,K] table of allowed transitions,
    or a tuple (allowed_trans [K,K], allowed_start [K], allowed_end [K]) as returned by
    `iobes_constraints` / `bio_constraints`.
    """

    def __init__(self, num_tags: int, constraints: torch.Tensor | Constraints | None = None):
        super().__init__()
        if num_tags < 1:
            raise ValueError("a CRF needs at least one tag")
        self.num_tags = K = num_tags
        self.transitions = nn.Parameter(torch.empty(K, K).uniform_(-0.1, 0.1))
        self.start = nn.Parameter(torch.empty(K).uniform_(-0.1, 0.1))
        self.end = nn.Parameter(torch.empty(K).uniform_(-0.1, 0.1))
        if constraints is None:
            trans = start = end = None
        else:
            if isinstance(constraints, torch.Tensor):
                free = torch.ones(K, dtype=torch.bool)
                trans, start, end = constraints, free, free
            else:
                trans, start, end = constraints
            trans, start, end = (torch.as_tensor(c).bool().clone() for c in (trans, start, end))
            if trans.shape != (K, K) or start.shape != (K,) or end.shape != (K,):
                raise ValueError(f"constraints must be [K,K], [K], [K] with K={K}")
        self.register_buffer("allowed_trans", trans)
        self.register_buffer("allowed_start", start)
        self.register_buffer("allowed_end", end)

    # -- effective parameters ------------------------------------------------------------

    def _params(self, dtype: torch.dtype, hard: bool = False):
        """(transitions [K,K], start [K], end [K]) in `dtype`, with the constraints applied:
        DISALLOWED_PENALTY added (soft, differentiable) or -inf (hard, for decoding)."""
        out = []
        for p, allowed in ((self.transitions, self.allowed_trans), (self.start, self.allowed_start),
                           (self.end, self.allowed_end)):
            p = p.to(dtype)
            if allowed is not None:
                if hard:
                    p = p.masked_fill(~allowed, float("-inf"))
                else:
                    p = p + (~allowed).to(dtype) * DISALLOWED_PENALTY
            out.append(p)
        return out

    def _check(self, emissions: torch.Tensor, mask: torch.Tensor, tags: torch.Tensor | None = None):
        if emissions.dim() != 3 or emissions.shape[-1] != self.num_tags:
            raise ValueError(f"emissions must be [B,T,{self.num_tags}], got {tuple(emissions.shape)}")
        if mask.shape != emissions.shape[:2]:
            raise ValueError(f"mask must be {tuple(emissions.shape[:2])}, got {tuple(mask.shape)}")
        if tags is not None and tags.shape != emissions.shape[:2]:
            raise ValueError(f"tags must be {tuple(emissions.shape[:2])}, got {tuple(tags.shape)}")
        if emissions.shape[1] == 0:
            raise ValueError("every row needs at least one token")

    def _dtype(self, emissions: torch.Tensor) -> torch.dtype:
        return torch.promote_types(emissions.dtype, self.transitions.dtype)

    # -- training ------------------------------------------------------------------------

    def log_partition(self, emissions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B,T,K], [B,T] -> log Z [B]: forward algorithm, logsumexp over all tag paths."""
        self._check(emissions, mask)
        dtype = self._dtype(emissions)
        emissions, mask = emissions.to(dtype), mask.bool()
        trans, start, end = self._params(dtype)
        steps = emissions.unbind(1)      # not emissions[:, t]: T selects' backward is T zero-filled [B,T,K]
        alpha = start + steps[0]                                         # [B,K]
        for t in range(1, emissions.shape[1]):
            # nxt[b, j] = logsumexp_i alpha[b, i] + trans[i, j], plus the emission of j
            nxt = torch.logsumexp(alpha[:, :, None] + trans, dim=1) + steps[t]
            alpha = torch.where(mask[:, t, None], nxt, alpha)           # the pad keeps alpha
        return torch.logsumexp(alpha + end, dim=1)

    def score(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B,T,K], [B,T], [B,T] -> s(tags) [B]: the score of each row's given tag path."""
        self._check(emissions, mask, tags)
        dtype = self._dtype(emissions)
        emissions, mask = emissions.to(dtype), mask.bool()
        trans, start, end = self._params(dtype)
        tags = tags.long().masked_fill(~mask, 0)                         # pads may hold -100
        zero = emissions.new_zeros(())
        emit = emissions.gather(2, tags[..., None])[..., 0]              # [B,T]
        total = torch.where(mask, emit, zero).sum(1) + start[tags[:, 0]]
        if tags.shape[1] > 1:
            step = trans[tags[:, :-1], tags[:, 1:]]                      # [B,T-1]
            total = total + torch.where(mask[:, 1:], step, zero).sum(1)
        last = (mask.sum(1) - 1).clamp(min=0)                            # right-padded rows
        return total + end[tags.gather(1, last[:, None])[:, 0]]

    def nll(self, emissions: torch.Tensor, tags: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """[B] negative log-likelihood log Z - s(tags), >= 0 (up to rounding)."""
        return self.log_partition(emissions, mask) - self.score(emissions, tags, mask)

    # -- inference -----------------------------------------------------------------------

    @torch.no_grad()
    def viterbi(self, emissions: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Best paths on the device: (tags [B,T] long, best score [B]). Under padding the
        tag repeats the row's last tag. Disallowed moves are masked to -inf."""
        self._check(emissions, mask)
        dtype = self._dtype(emissions)
        emissions, mask = emissions.to(dtype), mask.bool()
        trans, start, end = self._params(dtype, hard=True)
        B, T, K = emissions.shape
        stay = torch.arange(K, device=emissions.device).expand(B, K)
        delta = start + emissions[:, 0]                                  # [B,K]
        backpointers = []
        for t in range(1, T):
            best, arg = (delta[:, :, None] + trans).max(dim=1)           # over the previous tag
            m = mask[:, t, None]
            delta = torch.where(m, best + emissions[:, t], delta)
            backpointers.append(torch.where(m, arg, stay))               # pads point to themselves
        best_score, last = (delta + end).max(dim=1)
        path = [last]
        for bp in reversed(backpointers):
            path.append(bp.gather(1, path[-1][:, None])[:, 0])
        return torch.stack(path[::-1], dim=1), best_score

    def decode(self, emissions: torch.Tensor, mask: torch.Tensor) -> list[list[int]]:
        """Viterbi: the best tag path of each row, as a list of that row's length."""
        paths, _ = self.viterbi(emissions, mask)
        lengths = mask.sum(1).tolist()
        return [row[:n] for row, n in zip(paths.tolist(), lengths)]
