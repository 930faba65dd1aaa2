"""The front end from tfcalc's flat fields (YAML presets, --set keys, Hugging Face mappers) to the
per-layer description: ``build(cfg)`` for a ``tfcalc.config.ModelConfig`` (read by attribute, never
imported, so this package stays below config in the one direction of imports).

Per-layer patterns in the flat fields:

- ``sliding_window`` with ``full_attention_every: k``: layers k-1, 2k-1, ... attend to the whole context,
  the others through the window (Gemma 2: k = 2, modeling_gemma2.py ``layer_types``);
- ``first_dense_layers: k``: the first k layers of each stack have a dense FFN, the rest the mixture of
  experts (DeepSeek-V3's ``first_k_dense_replace``, modeling_deepseek_v3.py);
- ``moe_every: n``: layers n-1, 2n-1, ... have the mixture of experts, the others a dense FFN (Llama 4's
  ``interleave_moe_layer_step``, modeling_llama4.py);
- ``dense_layers``: the layers listed have a dense FFN too (Qwen2/3-MoE's ``mlp_only_layers``,
  modeling_qwen3_moe.py); the layers up to the last one listed are built one by one, the rest in closed form;
- ``moe_shortcut`` (LongCat-Flash, tfcalc.architecture.block ``shortcut``): layers 0, 2, 4, ... have a dense FFN
  (``dense_d_ff`` wide) as the shared expert of the mixture of experts, whose routed output joins after layer
  i + 1's FFN; layers 1, 3, 5, ... a dense FFN; ``zero_experts`` identity experts beside the real ones
  (tfcalc.architecture.ffn, step 5);
- ``dense_d_ff``: the width of those dense FFNs (DeepSeek-V3: 18432 beside experts of 2048); default d_ff;
- the token mixer of each layer: the mixer kind (tfcalc.architecture.kinds) its ``layer_pattern`` word names,
  else the kind that claims the layer for this config (latent attention every layer where ``kv_lora_rank`` is
  given), else softmax attention; each kind builds its own mixer from the fields it declares (softmax attention's
  per-layer windows, chunks and NoPE: tfcalc.architecture.flat_attention). This module names no mixer kind
  for the mixer slot; a cross-attention slot holds softmax attention (``Block.cross_attention``), built by
  flat_attention.cross.
- a kind's own per-layer pattern (``MixerKind.layer_plan``, asked of the registry: the Mamba2 kind's
  ``hybrid_pattern``, Nemotron-H's hybrid_override_pattern, modeling_nemotron_h.py): each layer's mixer -- the kind
  a layer_pattern word names, the kind an unnamed layer gets, or none (the empty mixer its kind declares) -- and
  its FFN (none, dense or the mixture of experts); Granite-4.0-H's (modeling_granitemoehybrid.py) the FFN after
  every mixer. This module names no kind for it either.
"""

from __future__ import annotations

import math
from typing import Any

from tfcalc.architecture import flat_latent, kinds
from tfcalc.architecture.block import Block, Hyper, Run, Stack, compress
from tfcalc.architecture.ffn import FFN, MoE
from tfcalc.architecture.flat_attention import cross as cross_attention
from tfcalc.architecture.model import Architecture, Embeddings, Head
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.patterns import MAX_PERIOD, LayerKind, layer_kind, period_segments
from tfcalc.architecture.per_layer import AltUp, Laurel, PerLayerGate, PerLayerInputs
from tfcalc.errors import InputError


def build(cfg: Any) -> Architecture:
    """The Architecture a flat config describes (see the module docstring)."""
    norm = Norm(cfg.norm, cfg.d_model, cfg.norm_has_bias, cfg.norm_eps)
    tied_head = cfg.lm_head and cfg.tie_embeddings
    if cfg.arch == "encoder-decoder":
        shared = "token_embedding" if cfg.tie_encoder_embedding else None
        stacks = (_stack(cfg, norm, "encoder", cfg.encoder_layers, causal=False, cross=False, shared=shared),
                  _stack(cfg, norm, "decoder", cfg.n_layer, causal=True, cross=True, tied_head=tied_head))
    else:
        stacks = (_stack(cfg, norm, "", cfg.n_layer, causal=cfg.arch == "decoder", cross=cfg.cross_attention,
                         tied_head=tied_head),)
    transform = norm if cfg.lm_head_transform else None
    head = Head(cfg.vocab_size, cfg.d_model, cfg.lm_head, tied_head, cfg.lm_head_bias, cfg.pooler, transform,
                cfg.logit_softcap, cfg.logit_scale, _projected(cfg), hyper=_hyper(cfg), activation=cfg.activation)
    mtp = flat_latent.mtp(cfg, norm, _block(cfg, norm, cfg.n_layer, True, False)) if cfg.mtp_layers else None
    return Architecture(cfg.arch, stacks, head, mtp)


def _stack(cfg: Any, norm: Norm, name: str, n_layer: int, causal: bool, cross: bool, shared: str | None = None,
           tied_head: bool = False) -> Stack:
    relative = (cfg.rel_buckets, cfg.n_head) if cfg.pos_encoding == "relative" else None
    emb = Embeddings(cfg.vocab_size, cfg.d_model, cfg.pos_encoding, cfg.max_seq_len + cfg.position_offset, relative,
                     cfg.type_vocab_size, norm if cfg.embedding_norm else None, cfg.embedding_scale, tied_head, shared,
                     cfg.embedding_multiplier, _projected(cfg), _per_layer(cfg, n_layer),
                     AltUp(cfg.d_model, cfg.altup_inputs) if getattr(cfg, "altup_inputs", None) else None)
    return Stack(_runs(cfg, norm, n_layer, causal, cross), emb, norm if cfg.final_norm else None, name)


def _runs(cfg: Any, norm: Norm, n_layer: int, causal: bool, cross: bool) -> tuple[Run, ...]:
    """The stack's runs in closed form, never one block per layer (a depth may be 2**40): the layers split
    where the attention pattern's runs and the first dense layers (k = first_dense_layers) end; within
    each piece a layer's kind depends on i only through i mod the lcm of the attention pattern's period
    and (past the first k) moe_every."""
    plan = kinds.layer_plan(cfg)
    if plan is not None:  # a kind's own pattern, one entry per layer (Nemotron-H): its runs found by compress
        alone = {s: _block(cfg, norm, plan.index(s), causal, cross) for s in set(plan) if s.alike}
        return _merge(list(compress([alone.get(s) or _block(cfg, norm, i, causal, cross)  # a slot alike: built once
                                     for i, s in enumerate(plan)])))
    if (getattr(cfg, "kv_shared_layers", None) or getattr(cfg, "activation_sparsity", None)
            or getattr(cfg, "index_topk_pattern", None)):  # layer by layer (the last: one letter per layer, listed)
        return _merge(list(compress([_block(cfg, norm, i, causal, cross) for i in range(n_layer)])))
    k = min(cfg.first_dense_layers or 0, n_layer) if cfg.n_expert is not None else 0
    every = (2 if cfg.moe_shortcut else cfg.moe_every or 1) if cfg.n_expert is not None else 1
    listed = min(cfg.dense_layers[-1] + 1, n_layer) if cfg.n_expert is not None and cfg.dense_layers else 0
    listed = max(listed, min(cfg.hash_moe_layers or 0, n_layer))  # DeepSeek-V4's hash-routed layers, one by one
    out = list(compress([_block(cfg, norm, i, causal, cross) for i in range(listed)]))  # past them: periodic
    for seg_start, seg_stop, attn_period in period_segments(cfg, n_layer):
        for start, stop in ((max(seg_start, listed), min(seg_stop, k)), (max(seg_start, k, listed), seg_stop)):
            period = attn_period if stop <= k else math.lcm(attn_period, every)
            if stop <= start:
                continue
            if period > MAX_PERIOD:
                raise InputError(f"the layers' pattern repeats every {period:,} layers (the attention pattern and "
                                 f"moe_every together): at most {MAX_PERIOD:,} is described")
            reps, rest = divmod(stop - start, period)
            if reps:
                out.append(Run(tuple(_block(cfg, norm, i, causal, cross) for i in range(start, start + period)),
                               reps))
            out += compress([_block(cfg, norm, i, causal, cross) for i in range(stop - rest, stop)])
    return _merge(out)


def _merge(runs: list[Run]) -> tuple[Run, ...]:
    """Each run's pattern at its shortest ((l, g, l, g)×n as (l, g)×2n), and neighbours of one pattern joined."""
    out: list[Run] = []
    for run in runs:
        n = len(run.pattern)
        p = next(p for p in range(1, n + 1) if n % p == 0 and run.pattern == run.pattern[:p] * (n // p))
        run = Run(run.pattern[:p], run.repeat * (n // p))
        if out and out[-1].pattern == run.pattern:
            run = Run(run.pattern, out[-1].repeat + run.repeat)
            out.pop()
        out.append(run)
    return tuple(out)


def _hyper(cfg: Any) -> Hyper | None:
    """DeepSeek-V4's hyper-connections (tfcalc.architecture.block.Hyper), where hyper_connections is given."""
    n = cfg.hyper_connections
    return None if n is None else Hyper(n, cfg.hc_sinkhorn_iters, cfg.hc_eps)


def _per_layer(cfg: Any, n_layer: int) -> PerLayerInputs | None:
    """Gemma 4's per-layer inputs (per_layer_dim p, per_layer_vocab rows; tfcalc.architecture.per_layer)."""
    p = getattr(cfg, "per_layer_dim", None)
    if not p:
        return None
    return PerLayerInputs(cfg.per_layer_vocab or cfg.vocab_size, n_layer, p, cfg.d_model,
                          Norm(cfg.norm, p, cfg.norm_has_bias, cfg.norm_eps))


def _projected(cfg: Any) -> int | None:
    """The token table's own width where it is projected in and out (OPT-350m), else None."""
    return cfg.embedding_dim if cfg.embedding_dim not in (None, cfg.d_model) else None


def _block(cfg: Any, norm: Norm, i: int, causal: bool, cross: bool) -> Block:
    plan = kinds.layer_plan(cfg)
    if plan is not None and i < len(plan):  # a kind's own pattern: its mixer or none, its FFN or none
        slots, scale = plan[i], cfg.residual_multiplier  # Granite-4.0-H's, on both sub-layers
        mixer = (kinds.empty_mixer(cfg.d_model) if slots.mixer is None else _mixer(cfg, i, causal) if not slots.mixer
                 else kinds.for_layer(cfg, LayerKind(False, True, slots.mixer)).build(cfg, i, causal))
        ffn = FFN(cfg.d_model, 0, present=False) if slots.ffn == "none" else _ffn(cfg, i)
        return Block(mixer, ffn, norm, cfg.norm_placement, residual_scale=scale, residual_alpha=cfg.residual_alpha)
    kind = _kind(cfg, i)
    placement = (kind.placement(cfg) if kind.placement is not None else None) or cfg.norm_placement
    p, mine = getattr(cfg, "per_layer_dim", None), i < cfg.n_layer  # Gemma 4's and 3n's per-layer parts
    n, rank = getattr(cfg, "altup_inputs", None), getattr(cfg, "laurel_rank", None)
    return Block(kind.build(cfg, i, causal), _ffn(cfg, i), norm, placement, cfg.parallel_block,
                 cross_attention(cfg, i) if cross else None, cfg.residual_multiplier, _hyper(cfg),
                 residual_alpha=cfg.residual_alpha, layer_scalar=cfg.layer_scalar,
                 per_layer_input=PerLayerGate(cfg.d_model, p, cfg.activation) if p and mine else None,
                 altup=AltUp(cfg.d_model, n, cfg.altup_correct_scale) if n and mine else None,
                 laurel=Laurel(cfg.d_model, rank) if rank and mine else None,
                 shortcut=cfg.moe_shortcut and is_moe_layer(cfg, i))


def _kind(cfg: Any, i: int):
    """Layer i's mixer kind (see the module docstring; an MTP module's layer, past the pattern, takes the kind no
    word names)."""
    return kinds.for_layer(cfg, layer_kind(cfg, i) if i < cfg.n_layer else None)


def _mixer(cfg: Any, i: int, causal: bool):
    """Layer i's token mixer, built by its kind."""
    return _kind(cfg, i).build(cfg, i, causal)


def is_moe_layer(cfg: Any, i: int) -> bool:
    """Whether layer i (0-based, within its stack) has the mixture of experts (see the module docstring)."""
    plan = kinds.layer_plan(cfg)
    if plan is not None and i < len(plan):  # a kind's own pattern says (Nemotron-H's E layers, Granite-4.0-H's)
        return plan[i].ffn == "moe"
    if cfg.n_expert is None or i < (cfg.first_dense_layers or 0) or i in (cfg.dense_layers or ()):
        return False
    if cfg.moe_shortcut:  # LongCat-Flash: the first of each pair (see the module docstring)
        return i % 2 == 0 and i < cfg.n_layer
    return cfg.moe_every is None or (i + 1) % cfg.moe_every == 0


def _ffn(cfg: Any, i: int) -> FFN | MoE:
    if not is_moe_layer(cfg, i):
        width = cfg.dense_d_ff if cfg.n_expert is not None and cfg.dense_d_ff is not None else cfg.ffn_dim
        if getattr(cfg, "kv_shared_d_ff", None) and i >= cfg.n_layer - cfg.kv_shared_layers:  # Gemma 4's wide MLP
            width = cfg.kv_shared_d_ff
        sparsity = cfg.activation_sparsity[i] if getattr(cfg, "activation_sparsity", None) and i < cfg.n_layer else 0.0
        return FFN(cfg.d_model, width, cfg.gated_ffn, cfg.activation, cfg.ffn_bias, cfg.swiglu_limit, cfg.swiglu_alpha,
                   multipliers=tuple(cfg.ffn_multipliers) if cfg.ffn_multipliers is not None else None,
                   sparsity=sparsity)
    latent = getattr(cfg, "moe_latent_dim", None)  # the experts' own width (tfcalc.architecture.ffn, step 7)
    expert = FFN(latent or cfg.d_model, cfg.ffn_dim, cfg.gated_ffn, cfg.activation, cfg.ffn_bias, cfg.swiglu_limit,
                 cfg.swiglu_alpha)
    shared = None
    if cfg.moe_shortcut:  # the pair's first dense FFN, beside the experts on one norm (block ``shortcut``)
        shared = FFN(cfg.d_model, cfg.dense_d_ff or cfg.ffn_dim, cfg.gated_ffn, cfg.activation, cfg.ffn_bias)
    elif cfg.shared_expert_d_ff:
        width = cfg.shared_expert_d_ff
        if getattr(cfg, "kv_shared_d_ff", None) and i >= cfg.n_layer - cfg.kv_shared_layers:  # Gemma 4's wide MLP
            width = cfg.kv_shared_d_ff
        shared = FFN(cfg.d_model, width, cfg.gated_ffn, cfg.activation, cfg.ffn_bias, cfg.swiglu_limit,
                     cfg.swiglu_alpha)
    hashed = cfg.vocab_size if i < (cfg.hash_moe_layers or 0) else 0  # DeepSeek-V4's hash-routed layers
    beside = Norm(cfg.norm, cfg.d_model, cfg.norm_has_bias, cfg.norm_eps) if getattr(cfg, "moe_beside_mlp", False) \
        else None  # Gemma 4's experts beside its MLP (tfcalc.architecture.ffn, step 5)
    return MoE(expert, cfg.n_expert, cfg.n_expert_active, shared, cfg.shared_expert_gate, cfg.router_norm_topk,
               cfg.expert_capacity_factor, cfg.router_bias, cfg.expert_format, flat_latent.routing(cfg),
               sigmoid_input=cfg.router_sigmoid_input, hash_vocab=hashed, beside_mlp=beside,
               n_zero=cfg.zero_experts or 0, latent_from=cfg.d_model if latent else 0)
