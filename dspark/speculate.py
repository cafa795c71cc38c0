"""Speculative decoding with a trained DSpark drafter: batch 1, chain drafting.

Steps of one round (Leviathan et al. 2023; DSpark paper section 2.1 and 3):
1. The anchor is the target's last token; the target has not consumed it yet.
2. `draft`: the drafter's parallel stage runs once over [anchor, mask x K-1], reading the
   target context strictly before the anchor from its incrementally extended cache; the
   sequential head samples the K tokens left to right (`p_draft`, K x V).
3. The target verifies [anchor, d_1..d_K] in one forward pass (K+1 positions), which also
   extends its KV cache; `p_target` (K+1 x V) holds its distributions for d_1..d_K and the
   bonus position.
4. `verify`: token k is accepted with probability min(1, p_target(x_k) / p_draft(x_k)); at
   the first rejection a token is drawn from norm(max(0, p_target - p_draft)); if all K are
   accepted the bonus token comes from p_target[K]. The output distribution is the
   target's. Greedy decoding passes one-hot rows through the same function, and its output
   equals plain greedy decoding.
5. Both caches are cropped back past the first rejected token; the drafter's context is
   extended with the target hidden states of the committed positions.

Letters: K block slots, V vocab, P prompt length.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from .heads import DraftHead
from .model import Drafter, KVCache, TargetLM, sync


def distribution(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """Rows of probabilities; temperature 0 gives one-hot argmax rows (greedy)."""
    if temperature == 0:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(torch.float32)
    return torch.softmax(logits.float() / temperature, dim=-1)


def verify(p_target: torch.Tensor, p_draft: torch.Tensor, draft_tokens: torch.Tensor,
           generator: torch.Generator | None = None) -> tuple[int, int]:
    """One verification step (standard speculative sampling).

    p_target (K+1, V): the target's distributions at the K draft positions and the bonus
    position; p_draft (K, V): the drafter's; draft_tokens (K,). Returns (n, token): n
    accepted draft tokens and the token committed after them.
    """
    K = draft_tokens.shape[0]
    if p_target.shape[0] != K + 1 or p_draft.shape[0] != K:
        raise ValueError(f"verify: p_target needs K+1={K + 1} rows and p_draft K={K}, "
                         f"got {p_target.shape[0]} and {p_draft.shape[0]}")
    device = p_target.device
    u = torch.rand(K, generator=generator, device=device if generator is None else generator.device)
    rows = torch.arange(K, device=device)
    pt = p_target[rows, draft_tokens]
    pd = p_draft[rows, draft_tokens]
    # accept x_k with probability min(1, p_target / p_draft); n = the first rejection
    accepted = (u.to(device) * pd < pt).long()
    n = int(accepted.cumprod(0).sum())
    if n < K:
        residual = (p_target[n] - p_draft[n]).clamp_min(0)
        if residual.sum() <= 0:  # p_target == p_draft: a rejection cannot happen in exact arithmetic
            residual = p_target[n]
        return n, int(torch.multinomial(residual / residual.sum(), 1, generator=generator))
    return K, int(torch.multinomial(p_target[K], 1, generator=generator))


@dataclass
class DecodeState:
    tokens: list[int]  # committed tokens, prompt included
    anchor: int  # the target's last token, not yet consumed by the target
    target_cache: KVCache
    ctx_cache: KVCache | None


@dataclass
class RoundStats:
    accepted: list[int] = field(default_factory=list)  # n per round
    verified: list[int] = field(default_factory=list)  # draft tokens sent to the target per round
    conf: list[torch.Tensor] = field(default_factory=list)  # (K,) raw c_k per round
    draft_ms: float = 0.0
    seq_ms: float = 0.0
    verify_ms: float = 0.0
    total_ms: float = 0.0


def _sample(p: torch.Tensor, generator) -> int:
    return int(torch.multinomial(p, 1, generator=generator).item())


@torch.inference_mode()
def prefill(target: TargetLM, drafter: Drafter | None, prompt: torch.Tensor, max_len: int,
            temperature: float, generator=None) -> DecodeState:
    """Run the target over the prompt (1, P), draw the first new token (the first anchor)
    and fill the drafter's context with the prompt's features."""
    cache = target.new_cache(1, max_len)
    out = target(prompt, cache)
    first = _sample(distribution(out.logits[0, -1:], temperature)[0], generator)
    ctx = None
    if drafter is not None:
        ctx = drafter.new_context_cache(max_len)
        drafter.extend_context(ctx, out.layer_hidden)
    return DecodeState(prompt[0].tolist() + [first], first, cache, ctx)


@torch.inference_mode()
def draft(target: TargetLM, drafter: Drafter, head: DraftHead, state: DecodeState, temperature: float,
          generator=None, stats: RoundStats | None = None):
    """Propose K tokens: returns draft_tokens (K,), p_draft (K, V), confidence logits (K,)."""
    device = target.lm_head.weight.device
    t0 = time.perf_counter()
    anchor = torch.tensor([state.anchor], device=device)
    h = drafter.draft_hidden(state.ctx_cache, target.wte(anchor), state.target_cache.length)  # (1, K, D)
    U = target.lm_head(h)  # (1, K, V)
    sync(device)
    t1 = time.perf_counter()
    tokens, logits, conf = head.sample_block_tokens(h, U, anchor, temperature, generator)
    sync(device)
    if stats is not None:
        stats.draft_ms += (t1 - t0) * 1e3
        stats.seq_ms += (time.perf_counter() - t1) * 1e3
    return tokens[0], distribution(logits[0], temperature), conf[0]


@torch.inference_mode()
def one_round(target: TargetLM, drafter: Drafter, head: DraftHead, state: DecodeState, temperature: float,
              generator=None, stats: RoundStats | None = None, verify_len=None) -> list[int]:
    """Draft, verify, commit. `verify_len(conf_logits) -> l` truncates the proposal to its
    first l tokens before verification (confidence-scheduled verification); the decision
    reads only the drafter's outputs, never the target's, so decoding stays lossless.
    Returns the tokens committed this round."""
    device = target.lm_head.weight.device
    t_start = time.perf_counter()
    draft_tokens, p_draft, conf = draft(target, drafter, head, state, temperature, generator, stats)
    K = draft_tokens.shape[0]
    l = K if verify_len is None else int(verify_len(conf))
    draft_tokens, p_draft = draft_tokens[:l], p_draft[:l]
    t0 = time.perf_counter()
    L = state.target_cache.length  # = the anchor's position
    inp = torch.cat([torch.tensor([state.anchor], device=device), draft_tokens])[None]  # (1, l+1)
    out = target(inp, state.target_cache)
    p_target = distribution(out.logits[0], temperature)  # (l+1, V)
    n, token = verify(p_target, p_draft, draft_tokens, generator)
    sync(device)
    t1 = time.perf_counter()
    # keep the anchor and the n accepted drafts; the rejected suffix is overwritten later
    state.target_cache.crop(L + 1 + n)
    if drafter is not None:
        drafter.extend_context(state.ctx_cache, [h[:, :n + 1] for h in out.layer_hidden])
    committed = draft_tokens[:n].tolist() + [token]
    state.tokens.extend(committed)
    state.anchor = token
    if stats is not None:
        stats.verify_ms += (t1 - t0) * 1e3
        stats.total_ms += (time.perf_counter() - t_start) * 1e3
        stats.accepted.append(n)
        stats.verified.append(l)
        stats.conf.append(torch.sigmoid(conf.float()).cpu())
    return committed


@torch.inference_mode()
def generate(target: TargetLM, drafter: Drafter, head: DraftHead, prompt: torch.Tensor, max_new_tokens: int,
             temperature: float = 1.0, generator=None, stats: RoundStats | None = None,
             verify_len=None) -> list[int]:
    """Speculative decoding of at least `max_new_tokens` after the prompt (1, P); returns
    exactly max_new_tokens new tokens (the last round's surplus is cut)."""
    K = drafter.K
    max_len = prompt.shape[1] + max_new_tokens + K + 2
    state = prefill(target, drafter, prompt, max_len, temperature, generator)
    P = prompt.shape[1]
    while len(state.tokens) - P < max_new_tokens:
        one_round(target, drafter, head, state, temperature, generator, stats, verify_len)
    return state.tokens[P:P + max_new_tokens]


@torch.inference_mode()
def autoregressive(target: TargetLM, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                   generator=None) -> list[int]:
    """Plain decoding of the same target with a KV cache: the baseline."""
    device = prompt.device
    state = prefill(target, None, prompt, prompt.shape[1] + max_new_tokens + 1, temperature, generator)
    P = prompt.shape[1]
    while len(state.tokens) - P < max_new_tokens:
        out = target(torch.tensor([[state.anchor]], device=device), state.target_cache)
        token = _sample(distribution(out.logits[0, -1:], temperature)[0], generator)
        state.tokens.append(token)
        state.anchor = token
    return state.tokens[P:P + max_new_tokens]
