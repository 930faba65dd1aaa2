"""Softmax attention's flat fields, their rules and how a layer's ``Attention`` is built from them: the default
mixer kind (tfcalc.architecture.kinds), registered as this module is imported. Its layer_pattern words are
tfcalc.architecture.patterns' KINDS: full, local, nope, local_nope.

The fields every other kind reads too -- ``n_head``, ``attn_bias``, ``rope_theta``, ``pos_encoding``,
``layer_pattern``, ``cross_attention`` -- stay the model's own (tfcalc.config). Per-layer attention (which
layers are local, which have no RoPE) is read through tfcalc.architecture.patterns.layer_kind. Reads the config
by attribute, never imports it. Pure Python: no torch, typer or rich here.

Per-layer attention (tfcalc.architecture.patterns). A layer is *local* (it attends through
``sliding_window`` W -- the last W keys, itself included -- or ``attention_chunk_size`` C -- the keys of
its own chunk of C positions, Llama 4's chunked attention) or *global* (the whole causal context); and it
has RoPE or not (NoPE). By period: ``full_attention_every: k`` makes layers k-1, 2k-1, ... global and
the rest local (without it, every layer is local once a window or chunk is given); ``nope_every: n``
takes RoPE out of layers n-1, 2n-1, ... (Llama 4: 4, its global layers; SmolLM3: 4). Local layers rotate
with base ``rope_local_theta`` where given (Gemma 3: 10,000 beside the global 1,000,000). Or by list:
``layer_pattern``, each layer's kind -- ``full``, ``local``, ``nope`` (global, no RoPE), ``local_nope``
-- written as runs: ``"(local*5, full)*10, local*2"`` (Gemma 3 27B's 62 layers), as Hugging Face's
``layer_types`` lists them; it must cover exactly n_layer layers, and replaces full_attention_every and
nope_every. YAML fields and ``--set`` keys alike (``--set layer_pattern="(local*3, full)*2"``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal, Optional

from tfcalc.architecture import rope as rope_scaling
from tfcalc.architecture.attention import Attention
from tfcalc.architecture.kinds import MixerKind, for_layer, local_fields, local_filler, register
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.patterns import KINDS, kind_of, layer_kind, length, parse
from tfcalc.errors import InputError as ConfigError, shown

QkNormOver = Literal["head", "projection"]


@dataclass(frozen=True, kw_only=True)
class AttentionFields:
    # --- sizes that may be derived ---
    n_kv_head: Optional[int] = None  # None: = n_head (MHA); 1: MQA; in between: GQA
    d_head: Optional[int] = None  # None: d_model // n_head (must divide)
    # --- attention beyond GPT's ---
    attn_out_bias: Optional[bool] = None  # None: = attn_bias. Qwen2: Q/K/V biases, no O bias
    qk_norm: bool = False  # a norm over each head's Q and K, d_head wide, shared by the heads (Qwen3)
    rope_fraction: float = 1.0  # partial rotary: the first int(d_head·fraction) channels rotate (GPT-NeoX)
    attn_scale: Optional[float] = None  # None: 1/sqrt(d_head); T5: 1; Gemma 2: query_pre_attn_scalar^-1/2
    attn_softcap: Optional[float] = None  # scores -> c·tanh(scores / c) before the mask (Gemma 2: 50)
    attn_sinks: bool = False  # one learned logit per head in each softmax, attached to no value (gpt-oss)
    # Q/K norms with their own weights per head (Cohere's use_qk_norm: CohereLayerNorm over each head's
    # d_head channels, weights (n_head, d_head) and (n_kv_head, d_head)); false: one norm shared by the heads
    qk_norm_per_head: bool = False
    # Q/K norms over each head (head: Qwen3, Gemma 3) or over each whole projection, n_head·d_head and
    # n_kv_head·d_head wide (projection: OLMo 2, modeling_olmo2.py q_norm, k_norm)
    qk_norm_over: QkNormOver = "head"
    # Llama 4 (modeling_llama4.py): Q and K of each head divided by their RMS, no weight, after RoPE, in the
    # RoPE layers only (use_qk_norm)
    qk_l2_norm: bool = False
    # --- attention per layer (tfcalc.architecture.patterns; see tfcalc.config's "Per-layer attention") ---
    # Mistral's sliding-window attention (Jiang et al. 2023, sec. 2): each query attends to at most this
    # many keys, itself included (positions i - W + 1 .. i), in every layer; None: full causal attention.
    sliding_window: Optional[int] = None
    # Gemma 2 alternates: every k-th layer (layers k-1, 2k-1, ...) attends to the whole context, the others
    # through the window (modeling_gemma2.py, layer_types; Gemma 2: k = 2; Gemma 3: k = 6). None: all windowed.
    full_attention_every: Optional[int] = None
    rope_local_theta: Optional[float] = None  # RoPE base of the local layers (Gemma 3: 10,000; global 1e6)
    attention_chunk_size: Optional[int] = None  # local layers attend within chunks of this many (Llama 4: 8192)
    nope_every: Optional[int] = None  # layers n-1, 2n-1, ... have no RoPE (Llama 4, SmolLM3: 4)
    # attention temperature on the NoPE layers (attn_temperature_tuning; arXiv 2501.19399): Q times
    # 1 + scale·log(1 + floor((p + 1) / floor)) at position p (Llama 4: floor_scale 8192, attn_scale 0.1)
    attn_temperature_floor: Optional[int] = None
    attn_temperature_scale: Optional[float] = None
    # softmax attention's output times sigmoid(a gate of n_head·d_head from Q's projection, per head [q | gate]:
    # Qwen3NextAttention, modeling_qwen3_next.py), before the O projection
    attn_output_gate: bool = False
    # MiMo-V2-Flash (modeling_mimo_v2_flash.py, MiMoV2FlashAttention): its local layers keep more K/V heads than
    # its global ones (local_n_kv_head: 2 × num_key_value_heads) and sinks in their softmax only (sinks_local);
    # every layer's V heads narrower than Q's and K's (v_head_dim 128 beside head_dim 192: attn_v_head_dim)
    local_n_kv_head: Optional[int] = None  # None: n_kv_head in every layer
    attn_sinks_local: bool = False  # sinks (attn_sinks) in the local layers only
    attn_v_head_dim: Optional[int] = None  # None: d_head
    # Gemma 4 (modeling_gemma4.py, Gemma4TextAttention): its global layers' heads are wider (global_head_dim 512
    # beside head_dim 256: global_d_head) with fewer K/V heads (num_global_key_value_heads: global_n_kv_head), and
    # read V from K's projection (attention_k_eq_v: global_v_from_k; no V weight there, V still cached: it is
    # normed apart from K and not rotated); in every layer each V head is RMS-normed without a weight (v_norm)
    global_d_head: Optional[int] = None  # None: d_head in every layer
    global_n_kv_head: Optional[int] = None  # None: n_kv_head in every layer
    global_v_from_k: bool = False
    v_norm: bool = False


def build(cfg: Any, i: int, causal: bool, kind: str = "self") -> Attention:
    """Layer i's attention (``kind`` "cross": a decoder block's cross-attention, which sees every key)."""
    layer = layer_kind(cfg, i)
    local = causal and kind == "self" and layer.local
    rope = cfg.pos_encoding == "rope" and kind == "self" and layer.rope
    theta = cfg.rope_local_theta if local and cfg.rope_local_theta is not None else cfg.rope_theta
    qk_norm = Norm(cfg.norm, cfg.head_dim, cfg.norm_has_bias, cfg.norm_eps) if cfg.qk_norm and kind == "self" else None
    whole = qk_norm is not None and cfg.qk_norm_over == "projection"
    if cfg.qk_l2_norm and rope:  # Llama 4: weightless, after RoPE, RoPE layers only
        qk_norm = Norm("rmsnorm", cfg.head_dim, False, cfg.norm_eps, affine=False)
    temperature = None
    if cfg.attn_temperature_floor is not None and kind == "self" and not layer.rope:
        temperature = (cfg.attn_temperature_floor, cfg.attn_temperature_scale)
    kv_heads = cfg.local_n_kv_head if local and cfg.local_n_kv_head is not None else cfg.kv_heads
    wide = kind == "self" and not local  # a global layer (Gemma 4's wider heads, fewer K/V heads, V = K)
    head_dim, rope_dim = cfg.head_dim, cfg.rope_dim
    if wide and cfg.global_d_head is not None:
        head_dim = cfg.global_d_head
        rope_dim = int(head_dim * cfg.rope_fraction) if cfg.pos_encoding == "rope" else 0
        if qk_norm is not None:
            qk_norm = dataclasses.replace(qk_norm, width=head_dim)
    if wide and cfg.global_n_kv_head is not None:
        kv_heads = cfg.global_n_kv_head
    scaling = rope_scaling.for_layer(cfg, local) if rope else None
    if scaling is not None and scaling.kind == "proportional":  # the whole head in rotate-half, part of it turning
        rope_dim = head_dim
    v_norm = Norm("rmsnorm", head_dim, False, cfg.norm_eps, affine=False) if cfg.v_norm and kind == "self" else None
    return Attention(
        cfg.d_model, cfg.n_head, kv_heads, head_dim, v_head_dim=cfg.attn_v_head_dim, kind=kind, causal=causal,
        window=cfg.sliding_window if local else None, chunk=cfg.attention_chunk_size if local else None,
        rope_theta=theta if rope else None, rope_dim=rope_dim if rope else 0,
        rope_scaling=scaling, qk_norm=qk_norm, v_from_k=wide and cfg.global_v_from_k, v_norm=v_norm,
        kv_share=kv_share(cfg, i, local) if kind == "self" else None,
        qk_norm_whole=whole, qk_norm_after_rope=cfg.qk_l2_norm, temperature=temperature,
        scale=cfg.attn_scale, softcap=cfg.attn_softcap, qkv_bias=cfg.attn_bias, o_bias=cfg.o_bias,
        sinks=(cfg.attn_sinks or cfg.attn_sinks_local and local) and kind == "self",
        qk_norm_heads=cfg.qk_norm_per_head and qk_norm is not None, output_gate=cfg.attn_output_gate and kind == "self",
    )


def kv_share(cfg: Any, i: int, local: bool) -> Optional[str]:
    """Layer i's part in K/V sharing (kv_shared_layers k, tfcalc.config_gemma): "reader" in the last k layers,
    "source" for the last earlier layer of each kind (local or global), else None. The scan back stops at the
    first layer of i's kind after it (a few layers in a periodic pattern)."""
    k = getattr(cfg, "kv_shared_layers", None)
    if not k or i >= cfg.n_layer:
        return None
    first = cfg.n_layer - k
    if i >= first:
        return "reader"
    return None if any(layer_kind(cfg, j).local == local for j in range(first - 1, i, -1)) else "source"


def cross(cfg: Any, i: int) -> Attention:
    """Layer i's cross-attention (queries from the stack, keys and values from other states)."""
    return build(cfg, i, causal=False, kind="cross")


def check(cfg: Any) -> None:
    """The attention fields against each other and the rest of the config (one ConfigError line each); its
    head width where softmax attention is the kind of the layers no other kind claims (not where latent
    attention fills them: its heads are its own fields')."""
    if for_layer(cfg) is KIND:
        _check_heads(cfg)
    if cfg.qk_norm_over != "head" and not cfg.qk_norm:
        raise ConfigError("qk_norm_over says how wide the Q/K norms are: set qk_norm true too")
    if cfg.qk_l2_norm and (cfg.qk_norm or cfg.pos_encoding != "rope"):
        raise ConfigError("qk_l2_norm (Llama 4's weightless norm after RoPE) applies to pos_encoding rope, "
                          "without qk_norm")
    if (cfg.attn_temperature_floor is None) != (cfg.attn_temperature_scale is None):
        raise ConfigError("give attn_temperature_floor and attn_temperature_scale together, or neither")
    if cfg.attn_temperature_floor is not None and cfg.nope_every is None and cfg.layer_pattern is None:
        raise ConfigError("the attention temperature applies to NoPE layers: give nope_every or layer_pattern too")
    if (cfg.local_n_kv_head is not None or cfg.attn_sinks_local) and cfg.sliding_window is None:
        raise ConfigError("local_n_kv_head and attn_sinks_local apply to the local layers: give sliding_window too")
    if cfg.local_n_kv_head is not None and cfg.n_head % cfg.local_n_kv_head:
        raise ConfigError(f"n_head ({cfg.n_head}) must be a multiple of local_n_kv_head ({cfg.local_n_kv_head})")
    _check_global(cfg)
    if cfg.qk_norm_per_head and not cfg.qk_norm:
        raise ConfigError("qk_norm_per_head gives each head its own Q/K norm weights: set qk_norm true too")
    _check_patterns(cfg)


def _check_global(cfg: Any) -> None:
    """Gemma 4's global-layer fields: a pattern with global layers, heads that group, V that can be K."""
    given = [n for n in ("global_d_head", "global_n_kv_head") if getattr(cfg, n) is not None]
    given += ["global_v_from_k"] if cfg.global_v_from_k else []
    if given and cfg.sliding_window is None and cfg.attention_chunk_size is None:
        raise ConfigError(f"{given[0]} applies to the global layers beside local ones: give sliding_window too")
    if cfg.global_d_head is not None and cfg.pos_encoding == "rope" and int(cfg.global_d_head * cfg.rope_fraction) % 2:
        raise ConfigError(f"rope rotates pairs of channels: int(global_d_head · rope_fraction) must be even; got "
                          f"global_d_head {cfg.global_d_head}")
    if cfg.global_n_kv_head is not None and cfg.n_head % cfg.global_n_kv_head:
        raise ConfigError(f"n_head ({cfg.n_head}) must be a multiple of global_n_kv_head ({cfg.global_n_kv_head})")
    if cfg.global_v_from_k and cfg.attn_v_head_dim is not None:
        raise ConfigError("global_v_from_k reads V from K's projection: V heads are K's width (no attn_v_head_dim)")


def _check_heads(cfg: Any) -> None:
    if cfg.d_head is None and cfg.d_model % cfg.n_head:
        raise ConfigError(f"d_model ({cfg.d_model}) is not divisible by n_head ({cfg.n_head}); give d_head "
                          "explicitly or change one of them")
    if cfg.pos_encoding == "rope" and cfg.head_dim % 2:
        raise ConfigError(f"rope rotates pairs of channels: d_head must be even, got {cfg.head_dim}")
    if cfg.rope_fraction == 1.0:
        return
    if cfg.pos_encoding != "rope":
        raise ConfigError(f"rope_fraction applies to pos_encoding rope only (pos_encoding is {cfg.pos_encoding})")
    if cfg.rope_fraction > 1:
        raise ConfigError(f"field 'rope_fraction' must be at most 1; got {cfg.rope_fraction}")
    if cfg.rope_dim < 2 or cfg.rope_dim % 2:
        raise ConfigError(f"rope rotates pairs of channels: int(d_head · rope_fraction) = int({cfg.head_dim} · "
                          f"{cfg.rope_fraction}) = {cfg.rope_dim} must be even and at least 2")


def _check_patterns(cfg: Any) -> None:
    """sliding_window, attention_chunk_size, full_attention_every, rope_local_theta, nope_every, layer_pattern
    (tfcalc.architecture.patterns says what they mean)."""
    window, chunk = cfg.sliding_window, cfg.attention_chunk_size
    for name in ("sliding_window", "attention_chunk_size"):
        if getattr(cfg, name) is not None and cfg.arch == "encoder":
            raise ConfigError(f"{name} applies to causal self-attention (arch decoder or encoder-decoder); "
                              "an encoder attends both ways")
    if window is not None and chunk is not None:
        raise ConfigError("give sliding_window or attention_chunk_size, not both: a local layer attends through "
                          "one of them")
    # local layers another mixer kind fills (a linear-attention layer: its state stops growing) need no window
    linear = local_filler(cfg) is not None
    if cfg.full_attention_every is not None:
        if window is None and chunk is None and not linear:
            raise ConfigError("full_attention_every alternates windowed and full layers: give sliding_window "
                              "(or attention_chunk_size) too")
        if cfg.full_attention_every < 2:
            raise ConfigError(f"field 'full_attention_every' must be at least 2 (1: every layer full; set "
                              f"sliding_window to null); got {cfg.full_attention_every}")
    if cfg.rope_local_theta is not None:
        if cfg.pos_encoding != "rope":
            raise ConfigError(f"rope_local_theta applies to pos_encoding rope only (pos_encoding is "
                              f"{cfg.pos_encoding})")
        if window is None and chunk is None:
            raise ConfigError("rope_local_theta is the RoPE base of the local layers: give sliding_window or "
                              "attention_chunk_size too")
    if cfg.nope_every is not None:
        if cfg.pos_encoding != "rope":
            raise ConfigError(f"nope_every takes RoPE out of some layers: it applies to pos_encoding rope only "
                              f"(pos_encoding is {cfg.pos_encoding})")
        if cfg.nope_every < 2:
            raise ConfigError(f"field 'nope_every' must be at least 2 (1: no layer has RoPE; set pos_encoding "
                              f"to none); got {cfg.nope_every}")
        if cfg.nope_every > cfg.n_layer:
            raise ConfigError(f"field 'nope_every' ({cfg.nope_every}) must be at most n_layer ({cfg.n_layer}): "
                              "layers nope_every - 1, 2·nope_every - 1, ... have no RoPE")
    if cfg.layer_pattern is not None:
        _check_layer_pattern(cfg)


def _check_layer_pattern(cfg: Any) -> None:
    for name in ("full_attention_every", "nope_every"):
        if getattr(cfg, name) is not None:
            raise ConfigError(f"give layer_pattern or {name}, not both: the pattern says every layer's kind")
    if cfg.arch == "encoder-decoder":
        raise ConfigError("layer_pattern applies to one stack (arch decoder or encoder), not to an "
                          "encoder-decoder's two")
    runs = parse(cfg.layer_pattern)
    n = length(runs)
    if n > cfg.n_layer:
        raise ConfigError(f"layer_pattern describes {n:,} layers, longer than the model (n_layer {cfg.n_layer:,})")
    if n < cfg.n_layer:
        raise ConfigError(f"layer_pattern describes {n:,} layers, fewer than the model's {cfg.n_layer:,}: "
                          "say every layer's kind (repeat a group with '*n')")
    kinds = {k for run in runs for k in run.kinds if k in KINDS}  # softmax attention's words; others' are theirs
    local = sorted(k for k in kinds if kind_of(k).local)
    linear = local_filler(cfg) is not None  # local layers another mixer kind fills
    if local and cfg.sliding_window is None and cfg.attention_chunk_size is None and not linear:
        raise ConfigError(f"layer_pattern has {shown(local[0])} layers: give sliding_window or attention_chunk_size "
                          "(what they attend through)" + "".join(f", or {f}" for f in local_fields()))
    nope = sorted(k for k in kinds if not kind_of(k).rope)
    if nope and cfg.pos_encoding != "rope":
        raise ConfigError(f"layer_pattern has {shown(nope[0])} layers (no RoPE): it applies to pos_encoding rope "
                          f"only (pos_encoding is {cfg.pos_encoding})")


KIND = register(MixerKind("attention", AttentionFields, build, words=KINDS, check=check, default=True,
                          group="attention (Attention)"))
