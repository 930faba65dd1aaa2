"""Speculative decoding (``infer --draft MODEL --accept-rate A --draft-tokens K``): a small draft model
proposes K tokens one by one, the target verifies them in one forward over K + 1 positions per sequence
and keeps the longest accepted prefix plus one token of its own. Pure arithmetic on the roofline
(tfcalc.count.serving.roofline, tfcalc.count.serving.static).

Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative Decoding" (ICML),
sec. 3.1, eq. 1: when each draft token is accepted independently with probability A (their α), a round
yields on average

    E = (1 − A^(K+1)) / (1 − A)

tokens (K + 1 when A → 1; 1 when A = 0). Sec. 3.4: a round costs K draft steps and one target step over
K + 1 tokens; the speedup over plain decoding is E · t_target / (K · t_draft + t_verify) (their eq. 4 has
c = t_draft / t_target and the verify step taken as one target step; here the verify step is its own
roofline: its weights are read once, its matmuls have K + 1 rows per sequence, its attention reads each
sequence's cache once).

Conventions:
- every step at the generation's middle context, seq + gen / 2 (the decode estimate's own mean is
  exact; this one is not summed step by step); each step with the performance model's per-step costs
  (kernels, traffic, dequantization, all-reduces under --tp);
- the draft runs whole on every GPU (under --tp the target is split and the draft is not: vLLM's
  draft tensor-parallel size 1), in the target's weight and KV formats, its KV cache beside the
  target's: both must fit;
- the generation state: the target's cache holds the prompt, the generation and the verify's k positions
  past it, each window's or chunk's ring with k spare slots (W + k: a verify of k + 1 tokens overwrites
  nothing its queries read, and a rejection rewinds; tfcalc.model.attention_state), the draft's the same
  (its rewind reaches k - 1 back); a plain decode's rings keep W;
- A is a property of the pair of models and the text: tfcalc takes it as given (--accept-rate); it does
  not predict it. The draft must share the target's vocabulary (a token id means the same in both).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.count.model.quant import WeightFormat, weights_bytes
from tfcalc.count.perf.inference import step_seconds
from tfcalc.count.serving.roofline import Ceilings, Step, decode_step, verify_step
from tfcalc.count.serving.serving_tp import TensorParallel
from tfcalc.count.serving.static import Sharding, step_overhead
from tfcalc.errors import InputError
from tfcalc.workload import Workload, decoder_source

DEFAULT_DRAFT_TOKENS = 4  # vLLM's and TensorRT-LLM's examples use 3-5 (num_speculative_tokens); Leviathan's γ


def expected_tokens(accept_rate: float, k: int) -> float:
    """Leviathan et al. 2023, eq. 1: tokens a round yields, (1 − A^(k+1)) / (1 − A)."""
    if accept_rate == 0:
        return 1.0
    return (1 - accept_rate ** (k + 1)) / (1 - accept_rate)


def check(target: ModelConfig, draft: ModelConfig, accept_rate: object, k: object) -> None:
    """The hostile cases: A in [0, 1), K a positive integer (≤ 64), a decoder draft with the target's
    vocabulary."""
    if isinstance(accept_rate, bool) or not isinstance(accept_rate, (int, float)) or not 0 <= accept_rate < 1:
        raise InputError(f"--accept-rate must be a number in [0, 1) (1 would accept every draft token forever); "
                         f"got {str(accept_rate)[:40]!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 64:
        raise InputError(f"--draft-tokens must be an integer from 1 to 64; got {str(k)[:40]!r}")
    if draft.arch == "encoder" or not draft.lm_head:
        raise InputError(f"--draft {draft.name} generates no tokens (an encoder, or no LM head)")
    if draft.vocab_size != target.vocab_size:
        raise InputError(f"--draft {draft.name} has a vocabulary of {draft.vocab_size:,}, {target.name} "
                         f"{target.vocab_size:,}: a draft must share the target's vocabulary")


@dataclass(frozen=True)
class Speculative:
    """One batch's speculative-decoding figures (see the module docstring)."""

    draft_tokens: int
    accept_rate: float
    expected_tokens: float
    context: int
    target_step_s: float  # plain decoding's step at the same context
    draft_step_s: float
    verify_step_s: float
    draft_weights_bytes: int
    draft_kv_cache_bytes: int
    kv_cache_bytes: int = 0  # the target's state under speculation (one GPU's under --tp; the docstring)

    @property
    def round_s(self) -> float:
        return self.draft_tokens * self.draft_step_s + self.verify_step_s

    @property
    def decode_s_per_token(self) -> float:
        return self.round_s / self.expected_tokens

    @property
    def speedup(self) -> float:
        return self.target_step_s / self.decode_s_per_token


def _seconds(cfg: ModelConfig, step: Step, fmt: WeightFormat, c: Ceilings, tp: Optional[TensorParallel]) -> float:
    over = step_overhead(cfg, step, fmt, c, tp)
    return step_seconds(step.time_s(c), over)


def estimate(target: ModelConfig, draft: ModelConfig, w: Workload, fmt: WeightFormat, c: Ceilings, k: int,
             accept_rate: float, tp: Optional[TensorParallel] = None) -> Speculative:
    """The module docstring's round at batch w.batch and the generation's middle context."""
    check(target, draft, accept_rate, k)
    context = w.seq + max(1, w.gen // 2)
    src = decoder_source(target, w.seq, w.src_seq)
    shard = Sharding(target, fmt, tp)
    plain = shard.step(decode_step(target, w.batch, context, fmt, w.kv, src_seq=src))
    verify = shard.step(verify_step(target, w.batch, k + 1, context + k, fmt, w.kv, src_seq=src))
    d = decode_step(draft, w.batch, context, fmt, w.kv, src_seq=decoder_source(draft, w.seq, w.src_seq))
    return Speculative(k, float(accept_rate), expected_tokens(accept_rate, k), context,
                       _seconds(target, plain, fmt, c, tp), _seconds(draft, d, fmt, c, None),
                       _seconds(target, verify, fmt, c, tp), weights_bytes(draft, fmt),
                       kv_cache_bytes(draft, replace(w, gen=w.gen + k, src_seq=decoder_source(draft, w.seq, w.src_seq)),
                                      spare=k),
                       shard.state(replace(w, gen=w.gen + k, src_seq=src), spare=k))
