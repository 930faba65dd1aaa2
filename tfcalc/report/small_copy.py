"""The small copy of a large model that `plan --measure` runs (tfcalc.report.plan_check, step 2): every
architectural choice of the config kept, every size shrunk so that a few gloo ranks on a CPU train it in
seconds and every split (TP's heads and FFN columns, a pipeline's blocks, expert parallelism's experts)
stays even.

What is kept, and how it is shrunk (each choice changes sizes only, never a kind of layer or component):
1. Heads of 16 channels, 2·tp KV heads, twice as many query heads where the config groups them (GQA stays
   GQA); an FFN 4× (8/3× gated) as wide as the model, a multiple of 8·tp.
2. The depth: ``blocks`` layers made from the description (``Architecture.shrunk``, tfcalc.architecture.
   copies), never by editing a depth field: the same depth pattern with fewer repeats, and where
   ``blocks`` is short of a period of each run, the first layer of each kind in model order (DeepSeek-V3
   in 2 blocks: a dense layer, then a mixture of experts; Llama 4: a chunked layer, then a NoPE one;
   Gemma 3: a local, then a global), so each kind of layer is run; the flat fields written back from it
   (tfcalc.config_copies), which the ranks rebuild. Windows, chunks and the temperature's floor at 16
   tokens, shorter than the 64-token context, so the window really cuts.
3. FFN widths kept apart: the routed experts d_ff, a shared expert 2·d_ff, the dense layers of a mixed
   model 3·d_ff (equal widths would hide a width read from the wrong field).
4. Latent attention (DeepSeek-V3, Kimi K2): KV compression d/2, query compression 3d/4 (both at most d,
   as tfcalc.config_latent requires), heads of 16 + 8 (rotary) channels and values of 16; n_kv_head and
   d_head left derived, as latent attention requires.
5. Experts: at most 16 (at least 2 per routing group, a multiple of the groups), at most 4 per token (and
   at most what the kept groups hold): 256 experts of a 32-wide model would make each gloo step
   thousands of tiny matmuls, while 16 show every behaviour of the router and of expert parallelism
   (16 splits evenly over 2, 4, 8 and 16 ranks; over 3 FSDP2's uneven expert shards show).
6. A 127-token vocabulary (odd: FSDP2's padding and torch.chunk's uneven blocks show), a 64-token
   context, the attention temperature's floor at 16 tokens (so it varies within 64).
"""

from __future__ import annotations

import math

from tfcalc.config import ModelConfig, replace
from tfcalc.config_copies import with_architecture

MEASURE_SEQ = 64
SPAN = 16  # a window, chunk or temperature floor of the small copy: shorter than its context
MAX_EXPERTS, MAX_ACTIVE = 16, 4


def small_copy(cfg: ModelConfig, tp: int, blocks: int = 2) -> ModelConfig:
    """cfg shrunk as the module docstring says, with ``blocks`` blocks (a pipeline: pp × V)."""
    narrow = small_widths(cfg, tp)
    return with_architecture(narrow, narrow.architecture.shrunk(blocks), name=f"{cfg.name} (small copy)")


def small_widths(cfg: ModelConfig, tp: int) -> ModelConfig:
    """Steps 1 and 3 to 6: cfg at its own depth, every size shrunk (step 2 shrinks the depth, on the
    description)."""
    latent = cfg.kv_lora_rank is not None
    kv = 2 * tp
    heads = kv * (2 if not latent and cfg.kv_heads < cfg.n_head else 1)
    d = 16 * heads
    f = -(-(d * 8 // 3 if cfg.gated_ffn else 4 * d) // (8 * tp)) * 8 * tp

    def span(value):
        return min(value, SPAN) if value is not None else None

    return replace(cfg, d_model=d, n_head=heads,
                   n_kv_head=None if latent else kv, d_head=None, d_ff=f, ffn_dim_multiplier=None, ffn_multiple_of=1,
                   vocab_size=127, max_seq_len=min(cfg.max_seq_len, MEASURE_SEQ),
                   type_vocab_size=min(cfg.type_vocab_size, 2),
                   shared_expert_d_ff=2 * f if cfg.shared_expert_d_ff else None,
                   dense_d_ff=3 * f if cfg.dense_d_ff else None, sliding_window=span(cfg.sliding_window),
                   attention_chunk_size=span(cfg.attention_chunk_size),
                   attn_temperature_floor=span(cfg.attn_temperature_floor), **_latent(cfg, d), **_experts(cfg))


def _latent(cfg: ModelConfig, d: int) -> dict:
    """Step 4."""
    if cfg.kv_lora_rank is None:
        return {}
    return dict(kv_lora_rank=d // 2, q_lora_rank=3 * d // 4 if cfg.q_lora_rank is not None else None,
                qk_nope_head_dim=16 if cfg.qk_nope_head_dim else 0, qk_rope_head_dim=8, v_head_dim=16)


def _experts(cfg: ModelConfig) -> dict:
    """Step 5: (n_expert, n_expert_active) within MAX_EXPERTS and MAX_ACTIVE, the routing groups kept."""
    if not cfg.n_expert or cfg.n_expert <= MAX_EXPERTS and cfg.n_expert_active <= MAX_ACTIVE:
        return {}
    groups, kept = cfg.router_groups or 1, cfg.router_topk_groups or 1
    n = max(MAX_EXPERTS, 2 * groups) if cfg.n_expert > MAX_EXPERTS else cfg.n_expert
    n = math.ceil(n / groups) * groups
    return dict(n_expert=n, n_expert_active=min(cfg.n_expert_active, MAX_ACTIVE, kept * (n // groups)))
