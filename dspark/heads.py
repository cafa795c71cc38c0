"""DSpark's sequential stage and confidence head (paper section 3.1-3.2.1).

- `MarkovHead`, Eq 5: B(x_{k-1}) = W1[x_{k-1}] W2, W1 an Embedding(V, R), W2 a
  Linear(R, V, bias=False).
- `RNNHead`, Eq 6: z_k = [s_{k-1}; W1[x_{k-1}]; h_k]; one Linear(2R+D, 3R) split in this
  order into gate, candidate, output; s_k = sig(g)*s_{k-1} + (1-sig(g))*tanh(c);
  B_k = W2(tanh(o)); s_0 = 0.
- `ConfidenceHead`, Eq 7: c_k = sigmoid(w^T f_k), f_k = h_k (`hidden`, the seed's wiring)
  or [h_k; W1[x_{k-1}]] (`hidden+markov`, the paper's), W1 shared with the sequential head.
- `DraftHead`: the three together. Draft logits = U_k + B_k (Eq 4), teacher forced in
  training, sampled left to right at inference by `sample_block_tokens`.

Initialisation: every weight of the heads is drawn from N(0, 0.02^2) and every bias is
zero, as DeepSpec initialises them (its heads live inside a Hugging Face model, whose
`_init_weights` gives Linear and Embedding weights the normal init with
`initializer_range` 0.02). In particular W2 does not start at zero: with W2 = 0 the CE/TV
gradient into W1 is zero at step 0, and only the confidence loss of the `hidden+markov`
arm reaches W1, which makes D9 change how the sequential head starts training.

Letters: K block slots, V vocab, D drafter width, R Markov rank; `...` any leading dims.
"""

from __future__ import annotations

import torch
import torch.nn as nn

INIT_STD = 0.02  # DeepSpec's initializer_range


def init_normal(module: nn.Module) -> None:
    """N(0, INIT_STD^2) weights and zero biases for every Linear and Embedding inside."""
    for m in module.modules():
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=INIT_STD)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)


class MarkovHead(nn.Module):
    def __init__(self, vocab: int, rank: int):
        super().__init__()
        self.W1 = nn.Embedding(vocab, rank)
        self.W2 = nn.Linear(rank, vocab, bias=False)
        init_normal(self)

    def init_state(self, shape, like: torch.Tensor):
        return None  # memoryless beyond one step

    def step(self, state, prev: torch.Tensor, h: torch.Tensor):
        """prev (...,), h (..., D) -> (state, B (..., V))."""
        return None, self.W2(self.W1(prev))

    def forward(self, prev: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Teacher-forced biases for a block: prev (..., K) -> (..., K, V)."""
        return self.W2(self.W1(prev))


class RNNHead(nn.Module):
    def __init__(self, vocab: int, rank: int, d_model: int):
        super().__init__()
        self.rank = rank
        self.W1 = nn.Embedding(vocab, rank)
        self.W2 = nn.Linear(rank, vocab, bias=False)
        self.joint = nn.Linear(2 * rank + d_model, 3 * rank)  # W_g, W_c, W_o jointly
        init_normal(self)

    def init_state(self, shape, like: torch.Tensor) -> torch.Tensor:
        return like.new_zeros(*shape, self.rank)  # s_0 = 0

    def step(self, state: torch.Tensor, prev: torch.Tensor, h: torch.Tensor):
        """One Eq 6 step: state (..., R), prev (...,), h (..., D) -> (state', B (..., V))."""
        z = torch.cat([state, self.W1(prev).to(h.dtype), h], dim=-1)  # (..., 2R+D)
        g, c, o = self.joint(z).split(self.rank, dim=-1)
        gate = torch.sigmoid(g)
        state = gate * state + (1 - gate) * torch.tanh(c)
        return state, self.W2(torch.tanh(o))

    def forward(self, prev: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        """Teacher-forced biases: prev (..., K), h (..., K, D) -> (..., K, V)."""
        state = self.init_state(prev.shape[:-1], h)
        out = []
        for k in range(prev.shape[-1]):
            state, b = self.step(state, prev[..., k], h[..., k, :])
            out.append(b)
        return torch.stack(out, dim=-2)


class ConfidenceHead(nn.Module):
    def __init__(self, d_model: int, rank: int | None):
        super().__init__()
        self.with_markov = rank is not None
        self.proj = nn.Linear(d_model + (rank or 0), 1)
        init_normal(self)

    @property
    def in_features(self) -> int:
        return self.proj.in_features

    def forward(self, h: torch.Tensor, prev_emb: torch.Tensor | None) -> torch.Tensor:
        """h (..., D), prev_emb (..., R) or None -> confidence logit (...)."""
        f = torch.cat([h, prev_emb.to(h.dtype)], dim=-1) if self.with_markov else h
        return self.proj(f).squeeze(-1)


def markov_chain(scores: torch.Tensor, table: torch.Tensor, first_prev: torch.Tensor) -> torch.Tensor:
    """The sequential part of Markov sampling: x_k = argmax(scores_k + table[x_{k-1}]).
    scores (B, K, V), table (V, V), first_prev (B,) -> tokens (B, K). A function of
    tensors alone, so that `dspark.speculate.compiled` can compile it into one kernel."""
    prev, tokens = first_prev, []
    for s_k in scores.unbind(1):  # (B, V) per slot
        prev = (s_k + table[prev]).argmax(-1)  # (B,)
        tokens.append(prev)
    return torch.stack(tokens, 1)


def draw(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> torch.Tensor:
    """One token per row of logits (B, V): argmax at temperature 0, else a sample."""
    if temperature == 0:
        return logits.argmax(dim=-1)
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class DraftHead(nn.Module):
    """Sequential stage + confidence head on top of a parallel stage's (h, U)."""

    def __init__(self, head: str, confidence_input: str, vocab: int, d_model: int, rank: int):
        super().__init__()
        if head == "markov":
            self.seq: MarkovHead | RNNHead | None = MarkovHead(vocab, rank)
        elif head == "rnn":
            self.seq = RNNHead(vocab, rank, d_model)
        elif head == "none":
            self.seq = None
        else:
            raise ValueError(f"head: unknown level {head!r}; allowed: markov, rnn, none")
        with_markov = confidence_input == "hidden+markov"
        if with_markov and self.seq is None:
            raise ValueError("confidence_input: 'hidden+markov' needs a sequential head")
        self.conf = ConfidenceHead(d_model, rank if with_markov else None)
        self.chain = markov_chain  # the Markov sampling loop; `dspark.speculate.compiled` swaps in a compiled one

    def _prev_emb(self, prev: torch.Tensor):
        return self.seq.W1(prev) if self.conf.with_markov else None

    def forward(self, h: torch.Tensor, U: torch.Tensor, prev: torch.Tensor):
        """Teacher forced. h (..., K, D), U (..., K, V), prev (..., K) -> draft logits
        (..., K, V) and confidence logits (..., K)."""
        draft = U if self.seq is None else U + self.seq(prev, h).to(U.dtype)
        return draft, self.conf(h, self._prev_emb(prev))

    def sample_block_tokens(self, h: torch.Tensor, U: torch.Tensor, first_prev: torch.Tensor,
                            temperature: float = 1.0, generator: torch.Generator | None = None):
        """Left-to-right sampling of one block per row (Eq 4 at inference).

        h (B, K, D), U (B, K, V), first_prev (B,) the anchor. Temperature 0 is greedy.
        Returns tokens (B, K), draft logits (B, K, V) and confidence logits (B, K), each
        slot's logits and confidence conditioned on the token actually drawn before it.
        """
        if isinstance(self.seq, MarkovHead) and not torch.is_grad_enabled():
            return self._sample_markov(h, U, first_prev, temperature, generator)
        B, K, V = U.shape
        prev = first_prev
        state = self.seq.init_state((B,), h) if self.seq is not None else None
        tokens, logits, confs = [], [], []
        for k in range(K):
            if self.seq is None:
                lk = U[:, k]
            else:
                state, b = self.seq.step(state, prev, h[:, k])
                lk = U[:, k] + b.to(U.dtype)  # (B, V)
            confs.append(self.conf(h[:, k], self._prev_emb(prev)))
            tok = draw(lk, temperature, generator)
            tokens.append(tok)
            logits.append(lk)
            prev = tok
        return torch.stack(tokens, 1), torch.stack(logits, 1), torch.stack(confs, 1)

    def _tables(self):
        """B(p, .) for every previous token p (V, V) and the Markov part of the confidence
        logit per p (V,): at inference the sequential loop is then two row lookups per
        slot, T_sequential << T_parallel. Rebuilt only when the weights change."""
        W1, W2 = self.seq.W1.weight, self.seq.W2.weight
        key = (W1.data_ptr(), W1._version, W2.data_ptr(), W2._version, self.conf.proj.weight._version)
        if getattr(self, "_table_key", None) != key:
            bias = self.seq.W2(W1)  # (V, V): row p is W2(W1[p]), Eq 5 for every p
            conf = W1 @ self.conf.proj.weight[0, -W1.shape[1]:] if self.conf.with_markov else None  # (V,)
            self._table_key, self._table = key, (bias, conf)
        return self._table

    def _scaled_bias(self, temperature: float) -> torch.Tensor:
        """B(p, .) / T (V, V) in fp32, kept for the last temperature used."""
        bias, _ = self._tables()
        key = (self._table_key, temperature)
        if getattr(self, "_scaled_key", None) != key:
            self._scaled_key, self._scaled = key, bias.float() / temperature
        return self._scaled

    def _sample_markov(self, h, U, first_prev, temperature, generator):
        B, K, V = U.shape
        bias, conf_prev = self._tables()
        scores, table = U, bias.to(U.dtype)  # greedy: argmax of U_k + B(prev)
        if temperature > 0:
            # Gumbel-max: argmax(l / T + g), g ~ Gumbel(0, 1), is a sample of softmax(l / T),
            # and l / T + g = (U_k / T + g_k) + B(prev) / T. The first term is drawn for the
            # whole block at once, so each slot of the loop is a lookup, an add and an
            # argmax, with no softmax, multinomial or RNG call inside it. g = -log E with
            # E ~ Exp(1).
            e = torch.empty(B, K, V, device=U.device if generator is None else generator.device)
            e = e.exponential_(generator=generator).clamp_min_(torch.finfo(torch.float32).tiny).to(U.device)
            scores = U.float() / temperature - e.log()  # (B, K, V)
            table = self._scaled_bias(temperature)
        tokens = self.chain(scores, table, first_prev)  # (B, K)
        # each slot's logits and confidence, given the token actually drawn before it
        prevs = torch.cat([first_prev[:, None], tokens[:, :-1]], 1)  # (B, K)
        logits = U + bias[prevs].to(U.dtype)  # (B, K, V)
        D = h.shape[-1]
        w = self.conf.proj.weight[0]
        conf = h @ w[:D].to(h.dtype) + self.conf.proj.bias.to(h.dtype)  # (B, K): the w_h . h_k part of Eq 7
        if conf_prev is not None:
            conf = conf + conf_prev[prevs].to(h.dtype)
        return tokens, logits, conf
