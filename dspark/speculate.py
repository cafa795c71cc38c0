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

import copy
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


def _race(weights: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """The exponential race argmax_i w_i / E_i, E_i ~ Exp(1): index i wins with
    probability w_i / sum(w). A 0-dim tensor on the weights' device."""
    e = torch.empty(weights.shape, dtype=torch.float32, device=weights.device if generator is None else generator.device)
    e = e.exponential_(generator=generator).clamp_min_(torch.finfo(torch.float32).tiny)  # E = 0 would pick a zero weight
    return (weights.float() / e.to(weights.device)).argmax()


def sample(weights: torch.Tensor, generator: torch.Generator | None = None) -> int:
    """One index drawn with probability proportional to weights (V,), which need not sum
    to one. It is the draw torch.multinomial makes for one sample (the same tokens from
    the same generator), without its input checks, which cost as much as the draw on a
    CPU; both decoders use it."""
    return int(_race(weights, generator))


def verify_on_device(p_target: torch.Tensor, p_draft: torch.Tensor, draft_tokens: torch.Tensor,
                     generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """`verify` without a host round trip: (n, token) as 0-dim tensors on the device."""
    K, V = p_draft.shape
    if p_target.shape[0] != K + 1 or draft_tokens.shape[0] != K:
        raise ValueError(f"verify: p_target needs K+1={K + 1} rows and draft_tokens K={K}, "
                         f"got {p_target.shape[0]} and {draft_tokens.shape[0]}")
    device = p_target.device
    u = torch.rand(K, generator=generator, device=device if generator is None else generator.device)
    rows = torch.arange(K, device=device)
    pt = p_target[rows, draft_tokens]
    pd = p_draft[rows, draft_tokens]
    # accept x_k with probability min(1, p_target / p_draft); n = the first rejection
    n = (u.to(device) * pd < pt).long().cumprod(0).sum()
    # the draft's row past the block is zero, so when all K are accepted the residual is
    # p_target[K] itself: the bonus token, drawn by the same code
    p_draft = torch.cat([p_draft, p_draft.new_zeros(1, V)])  # (K+1, V)
    residual = (p_target[n] - p_draft[n]).clamp_min(0)  # sampled in proportion: no normalising
    # p_target == p_draft leaves nothing: a rejection cannot happen there in exact arithmetic
    residual = torch.where(residual.any(), residual, p_target[n])
    return n, _race(residual, generator)


def verify(p_target: torch.Tensor, p_draft: torch.Tensor, draft_tokens: torch.Tensor,
           generator: torch.Generator | None = None) -> tuple[int, int]:
    """One verification step (standard speculative sampling).

    p_target (K+1, V): the target's distributions at the K draft positions and the bonus
    position; p_draft (K, V): the drafter's; draft_tokens (K,). Returns (n, token): n
    accepted draft tokens and the token committed after them.
    """
    n, token = torch.stack(verify_on_device(p_target, p_draft, draft_tokens, generator)).tolist()
    return n, token


class _CompiledDrafter:
    """A drafter whose two decoding methods run compiled; everything else is the drafter's."""

    def __init__(self, drafter: Drafter, backend: str):
        self._drafter = drafter
        self.draft_hidden = torch.compile(drafter.draft_hidden, dynamic=True, backend=backend)
        self.extend_context = torch.compile(drafter.extend_context, dynamic=True, backend=backend)

    def __getattr__(self, name):
        return getattr(self._drafter, name)


def compiled(target: TargetLM, drafter: Drafter | None = None, head: DraftHead | None = None,
             backend: str = "inductor"):
    """`torch.compile`d decoding paths (inductor, dynamic shapes, so a growing KV cache
    does not recompile): the target's forward, the drafter's context extension and block
    pass, and the Markov head's sampling loop. Returns (target, drafter, head) to pass to
    `generate` and `autoregressive`, so that both decoders run compiled and the speedup
    stays a like-for-like ratio; the models given are left as they are (the head returned
    is a shallow copy sharing its weights). The first call of each shape compiles (about
    20 s per graph on a 2-core CPU; inductor caches the kernels on disk for later
    processes)."""
    head_c = None
    if head is not None:
        head_c = copy.copy(head)
        head_c.chain = torch.compile(head.chain, backend=backend)
    return (torch.compile(target, dynamic=True, backend=backend),
            _CompiledDrafter(drafter, backend) if drafter is not None else None, head_c)


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
    prompt_rounds: list[int] = field(default_factory=list)  # rounds per decoded prompt, in order
    draft_ms: float = 0.0
    seq_ms: float = 0.0
    verify_ms: float = 0.0
    total_ms: float = 0.0


@torch.inference_mode()
def prefill(target: TargetLM, drafter: Drafter | None, prompt: torch.Tensor, max_len: int,
            temperature: float, generator=None) -> DecodeState:
    """Run the target over the prompt (1, P), draw the first new token (the first anchor)
    and fill the drafter's context with the prompt's features."""
    cache = target.new_cache(1, max_len)
    out = target(prompt, cache)
    first = sample(distribution(out.logits[0, -1:], temperature)[0], generator)
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
    if stats is not None:
        sync(device)  # only to time the parts: decoding itself never waits for the device here
    t1 = time.perf_counter()
    tokens, logits, conf = head.sample_block_tokens(h, U, anchor, temperature, generator)
    if stats is not None:
        sync(device)
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
    n, token = verify_on_device(p_target, p_draft, draft_tokens, generator)
    # the round's one host round trip: how many were accepted, the token after them, the drafts
    n, token, *drafts = torch.cat([n[None], token[None], draft_tokens]).tolist()
    t1 = time.perf_counter()
    # keep the anchor and the n accepted drafts; the rejected suffix is overwritten later
    state.target_cache.crop(L + 1 + n)
    if drafter is not None:
        drafter.extend_context(state.ctx_cache, [h[:, :n + 1] if h is not None else None for h in out.layer_hidden])
    committed = drafts[:n] + [token]
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
             temperature: float = 1.0, generator=None, stats: RoundStats | None = None) -> list[int]:
    """Speculative decoding of at least `max_new_tokens` after the prompt (1, P); returns
    exactly max_new_tokens new tokens (the last round's surplus is cut)."""
    K = drafter.K
    max_len = prompt.shape[1] + max_new_tokens + K + 2
    state = prefill(target, drafter, prompt, max_len, temperature, generator)
    P = prompt.shape[1]
    while len(state.tokens) - P < max_new_tokens:
        one_round(target, drafter, head, state, temperature, generator, stats)
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
        token = sample(distribution(out.logits[0, -1:], temperature)[0], generator)
        state.tokens.append(token)
        state.anchor = token
    return state.tokens[P:P + max_new_tokens]
