"""ModelConfig: the flat front end users write (YAML fields, --set keys, Hugging Face mappers), and
``cfg.architecture``, the per-layer description (tfcalc.architecture) it builds once and every count folds
over.

Pure Python: no torch, typer or rich here, so counting never pays for importing them.

Fields hold what the user (or the preset) said. Sizes that may be left out and derived -- ``d_head``,
``n_kv_head`` and ``d_ff`` -- stay ``None`` in the field when not given, and the resolved values are
read through properties (``head_dim``, ``kv_heads``, ``ffn_dim``, ``q_dim``, ``kv_dim``). An explicit
value is never overwritten: ``d_head`` given as 128 with ``n_head = 24`` and ``d_model = 2048`` stays 128
(the attention is then 3072 wide, not 2048; GPT-3 XL in Brown et al. 2020, Table 2.1, is such a case).

Kinds of transformer (``arch``), and how the depth fields read for each:

- ``decoder`` (GPT, Llama): one causal stack of ``n_layer`` blocks and an LM head.
- ``encoder`` (BERT): one bidirectional stack of ``n_layer`` blocks; optionally token-type embeddings,
  a norm after the embeddings, a pooler on the first token, and no LM head (BertModel).
- ``encoder-decoder`` (Vaswani et al. 2017): ``n_layer`` is the decoder depth, as for a decoder;
  ``n_encoder_layer`` the encoder depth (default: the same). Every decoder block adds cross-attention
  (queries from the decoder, keys and values from the encoder output). The encoder's token embedding is
  the decoder's unless ``tie_encoder_embedding`` is false.

Any of them may replace each dense FFN by a mixture of experts (``n_expert`` FFNs, each as wide as the
dense one, and a bias-free router d_model -> n_expert; each token runs ``n_expert_active`` of them),
optionally beside an always-on shared expert (Qwen2-MoE, DeepSeekMoE); ``first_dense_layers`` and
``moe_every`` keep some layers dense (``dense_d_ff`` wide), per layer (tfcalc.architecture.flat).

Block layouts beyond GPT-2's pre-norm ``x + f(norm(x))`` (``norm_placement``, ``parallel_block``):
``post`` is ``norm(x + f(x))`` (Vaswani et al. 2017, BERT); ``sandwich`` is ``x + norm2(f(norm1(x)))``
(Gemma 2, modeling_gemma2.py: post_attention_layernorm, post_feedforward_layernorm); ``output`` is
``x + norm(f(x))``, no input norm (OLMo 2, modeling_olmo2.py). A parallel block
runs attention and FFN side by side on the same input, ``x + attn(n1(x)) + ffn(n2(x))``: two norms in
GPT-NeoX (use_parallel_residual), one shared norm in GPT-J, PaLM and Falcon-7B.

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

Validation rules live in tfcalc.config_rules; every failure is one ConfigError line naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from dataclasses import dataclass
from typing import Any, Literal, Optional

from tfcalc.architecture import Architecture
from tfcalc.architecture.flat import build as build_architecture
from tfcalc.config_derived import DerivedSizes
from tfcalc.config_layers import PerLayerViews
from tfcalc.config_quant import validate_stored_groups
from tfcalc.config_rules import (
    Activation,
    Arch,
    Norm,
    NormPlacement,
    ParallelBlock,
    PosEncoding,
    QkNormOver,
    check_field_type,
    list_fields,
    register,
    suggest,
    validate,
)
from tfcalc.errors import InputError, shown

# A config that cannot describe a transformer is bad input like any other: one family, exit 2.
ConfigError = InputError


@dataclass(frozen=True)
class ModelConfig(PerLayerViews, DerivedSizes):
    # --- shapes every config must give ---
    n_layer: int
    d_model: int
    n_head: int
    vocab_size: int
    max_seq_len: int

    # --- identity (shown, never counted) ---
    name: str = "custom"
    nominal_params: Optional[str] = None  # the size the source names, e.g. "175B"
    source: Optional[str] = None  # where the shapes come from (paper, table, file)
    # what the weights are stored in (a checkpoint's torch_dtype)
    dtype: Optional[Literal["fp32", "bf16", "fp16"]] = None
    # a multimodal checkpoint's vision tower and projector (Gemma 3's SigLIP, Llama 4's), named beside the
    # language model that every count describes, never counted in it
    vision_params: Optional[int] = None

    # --- sizes that may be derived ---
    n_kv_head: Optional[int] = None  # None: = n_head (MHA); 1: MQA; in between: GQA
    d_head: Optional[int] = None  # None: d_model // n_head (must divide)

    # --- feed-forward width: d_ff, or derived the way Llama does (see ffn_dim) ---
    d_ff: Optional[int] = None
    ffn_mult: float = 4.0
    ffn_dim_multiplier: Optional[float] = None
    ffn_multiple_of: int = 1

    # --- kind of transformer (see the module docstring) ---
    arch: Arch = "decoder"
    n_encoder_layer: Optional[int] = None  # encoder-decoder only; None: = n_layer

    # --- mixture of experts: None for a dense FFN ---
    n_expert: Optional[int] = None  # FFNs per block (Mixtral 8x7B: 8)
    n_expert_active: Optional[int] = None  # top-k experts each token runs (Mixtral: 2)

    # --- architecture choices ---
    pos_encoding: PosEncoding = "learned"
    norm: Norm = "layernorm"
    norm_placement: NormPlacement = "pre"
    final_norm: bool = True
    activation: Activation = "gelu"
    gated_ffn: bool = False  # SwiGLU (silu) / GeGLU (gelu): FFN(x) = down(act(gate(x)) * up(x))
    attn_bias: bool = True
    ffn_bias: bool = True
    norm_bias: Optional[bool] = None  # None: derived, see norm_has_bias
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    # Mistral's sliding-window attention (Jiang et al. 2023, sec. 2): each query attends to at most this
    # many keys, itself included (positions i - W + 1 .. i), in every layer; None: full causal attention.
    sliding_window: Optional[int] = None
    # Gemma 2 alternates: every k-th layer (layers k-1, 2k-1, ...) attends to the whole context, the others
    # through the window (modeling_gemma2.py, layer_types; Gemma 2: k = 2; Gemma 3: k = 6). None: all windowed.
    full_attention_every: Optional[int] = None

    # --- embeddings and heads beyond GPT's (BERT, Vaswani et al. 2017) ---
    type_vocab_size: int = 0  # token-type (segment) embedding rows; 0: none. BERT: 2
    embedding_norm: bool = False  # a norm right after the embeddings are summed (BERT)
    embedding_scale: bool = False  # token embeddings times sqrt(d_model) (Vaswani et al. 2017, sec. 3.4)
    pooler: bool = False  # BERT's pooler: tanh(Linear(d, d)) of the first token (encoder only)
    lm_head: bool = True  # a vocabulary projection at the end; BertModel has none
    tie_encoder_embedding: bool = True  # encoder-decoder: source and target share one token embedding
    lm_head_transform: bool = False  # BERT's MLM head: Linear(d, d) + activation + norm before the projection
    lm_head_bias: bool = False  # a bias on the vocabulary projection (BERT's MLM head)
    logit_softcap: Optional[float] = None  # logits -> c·tanh(logits / c) (Gemma 2: 30)
    position_offset: int = 0  # learned positions start at this row: OPT's table has max_seq_len + 2 rows

    # --- attention beyond GPT's ---
    attn_out_bias: Optional[bool] = None  # None: = attn_bias. Qwen2: Q/K/V biases, no O bias
    qk_norm: bool = False  # a norm over each head's Q and K, d_head wide, shared by the heads (Qwen3)
    rope_fraction: float = 1.0  # partial rotary: the first int(d_head·fraction) channels rotate (GPT-NeoX)
    attn_scale: Optional[float] = None  # None: 1/sqrt(d_head); T5: 1; Gemma 2: query_pre_attn_scalar^-1/2
    attn_softcap: Optional[float] = None  # scores -> c·tanh(scores / c) before the mask (Gemma 2: 50)
    rel_pos_buckets: Optional[int] = None  # pos_encoding relative (T5): bias buckets; None: 32
    rel_pos_max_distance: Optional[int] = None  # ... and the distance the last bucket starts at; None: 128
    cross_attention: bool = False  # a decoder's (or encoder's) blocks also attend to external states
    parallel_block: ParallelBlock = "none"  # attention and FFN side by side (see the module docstring)

    # --- mixture of experts beyond Mixtral's ---
    router_norm_topk: bool = True  # renormalize the k chosen weights (Mixtral); false: Qwen2-MoE's raw softmax
    shared_expert_d_ff: Optional[int] = None  # width of an always-on shared expert FFN (Qwen2-MoE)
    shared_expert_gate: bool = False  # the shared expert's output times sigmoid(Linear(d, 1)) (Qwen2-MoE)
    # each expert takes at most ceil(factor · k · tokens / n_expert) tokens of a batch, in a buffer of that
    # many rows; tokens past it are dropped (Fedus et al. 2022, Switch Transformers, sec. 2.2). None: dropless
    expert_capacity_factor: Optional[float] = None
    # per-layer patterns of a mixture of experts (tfcalc.architecture.flat): the first k layers dense
    # (DeepSeek-V3's first_k_dense_replace), every n-th layer MoE and the others dense (Llama 4's
    # interleave_moe_layer_step), and the width of those dense FFNs (default: d_ff)
    first_dense_layers: Optional[int] = None
    moe_every: Optional[int] = None
    dense_d_ff: Optional[int] = None

    # --- gpt-oss and Qwen3-MoE (tfcalc.config_moe checks them) ---
    # the layers (0-based) with a dense FFN, listed, beside first_dense_layers and moe_every (Qwen2/3-MoE's
    # mlp_only_layers, modeling_qwen3_moe.py Qwen3MoeDecoderLayer); stored as a tuple
    dense_layers: Optional[tuple[int, ...]] = None
    attn_sinks: bool = False  # one learned logit per head in each softmax, attached to no value (gpt-oss)
    router_bias: bool = False  # a bias on the MoE router (gpt-oss, GptOssTopKRouter.bias)
    # gpt-oss's clamped SwiGLU (modeling_gpt_oss.py, GptOssExperts._apply_gate): the gate clamped to at most
    # the limit, up to ±limit, and down(g·sigmoid(alpha·g) · (up + 1)); alpha 1.702, limit 7.0 in gpt-oss
    swiglu_limit: Optional[float] = None
    swiglu_alpha: Optional[float] = None
    # how the routed experts' weights are stored: "mxfp4" (4-bit values, one 8-bit scale per 32: 4.25 bits
    # each; gpt-oss's quantization_config); None: in dtype like every other weight
    expert_format: Optional[Literal["mxfp4"]] = None
    # the block matrices as a quantized checkpoint stores them (config.json's quantization_config, read by
    # tfcalc.hf_config.quantization; bytes in tfcalc.count.model.quant_stored, rules in tfcalc.config_quant):
    # their bits, one scale per tensor, per output row (channel), per group of stored_quant_group weights
    # along the input dim, or per stored_quant_block (rows, cols) tile, in stored_quant_scale_dtype; a zero
    # point per scale when asymmetric; stored_quant_keep lists the matrix kinds left in the checkpoint's dtype
    stored_quant: Optional[Literal["fp8", "int8", "int4"]] = None
    stored_quant_scales: Optional[Literal["tensor", "channel", "group", "block"]] = None
    stored_quant_group: Optional[int] = None
    stored_quant_block: Optional[tuple[int, ...]] = None
    stored_quant_scale_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = None
    stored_quant_zero_point: Optional[bool] = None  # None: false
    stored_quant_keep: Optional[str] = None  # comma-separated tfcalc components, e.g. "lm_head,attn_q_weight"
    # --- DeepSeek-V2/V3, Kimi K2 (tfcalc.config_latent): latent attention in every layer when kv_lora_rank is
    # set (tfcalc.architecture.latent); the router (.routing); YaRN (.latent.Yarn); MTP modules (.mtp) ---
    kv_lora_rank: Optional[int] = None
    q_lora_rank: Optional[int] = None  # None: a plain Q projection (DeepSeek-V2-Lite)
    qk_nope_head_dim: Optional[int] = None
    qk_rope_head_dim: Optional[int] = None
    v_head_dim: Optional[int] = None
    rope_interleave: Optional[bool] = None  # None: true (DeepSeek's rotary pairs (2i, 2i+1))
    router_scoring: Literal["softmax", "sigmoid"] = "softmax"
    router_groups: Optional[int] = None  # n_group
    router_topk_groups: Optional[int] = None  # topk_group
    routed_scaling: Optional[float] = None  # routed_scaling_factor; None: 1
    router_score_bias: bool = False  # e_score_correction_bias (a buffer, no parameter)
    rope_scaling: Optional[Literal["yarn"]] = None
    rope_scaling_factor: Optional[float] = None
    rope_original_max_seq_len: Optional[int] = None
    yarn_beta_fast: Optional[float] = None  # None: 32
    yarn_beta_slow: Optional[float] = None  # None: 1
    yarn_mscale: Optional[float] = None
    yarn_mscale_all_dim: Optional[float] = None
    mtp_layers: int = 0  # multi-token prediction modules, counted beside the model
    # --- scales, per-head Q/K norms and a projected embedding (issue 22: granite, cohere, opt-350m) ---
    # Granite (modeling_granite.py): token embeddings times embedding_multiplier, each sub-layer's output
    # times residual_multiplier before the residual add; logit_scale multiplies the logits (Cohere's
    # logit_scale; Granite's 1 / logits_scaling). None: 1, no multiply.
    embedding_multiplier: Optional[float] = None
    residual_multiplier: Optional[float] = None
    logit_scale: Optional[float] = None
    # Q/K norms with their own weights per head (Cohere's use_qk_norm: CohereLayerNorm over each head's
    # d_head channels, weights (n_head, d_head) and (n_kv_head, d_head)); false: one norm shared by the heads
    qk_norm_per_head: bool = False
    # the token table's width when it is not d_model: Linear(embedding_dim, d_model) after the lookup and
    # Linear(d_model, embedding_dim) before the LM head, both bias-free (OPT-350m's word_embed_proj_dim,
    # modeling_opt.py project_in / project_out). None: d_model, no projections
    embedding_dim: Optional[int] = None

    # --- attention per layer (tfcalc.architecture.patterns; see "Per-layer attention" above) ---
    rope_local_theta: Optional[float] = None  # RoPE base of the local layers (Gemma 3: 10,000; global 1e6)
    attention_chunk_size: Optional[int] = None  # local layers attend within chunks of this many (Llama 4: 8192)
    nope_every: Optional[int] = None  # layers n-1, 2n-1, ... have no RoPE (Llama 4, SmolLM3: 4)
    layer_pattern: Optional[str] = None  # each layer's kind, as runs: "(local*5, full)*10, local*2"

    # --- norms and heads of issue 22's families (OLMo 2) ---
    # Q/K norms over each head (head: Qwen3, Gemma 3) or over each whole projection, n_head·d_head and
    # n_kv_head·d_head wide (projection: OLMo 2, modeling_olmo2.py q_norm, k_norm)
    qk_norm_over: QkNormOver = "head"

    # --- Llama 4 (modeling_llama4.py) ---
    # Q and K of each head divided by their RMS, no weight, after RoPE, in the RoPE layers only (use_qk_norm)
    qk_l2_norm: bool = False
    # attention temperature on the NoPE layers (attn_temperature_tuning; arXiv 2501.19399): Q times
    # 1 + scale·log(1 + floor((p + 1) / floor)) at position p (Llama 4: floor_scale 8192, attn_scale 0.1)
    attn_temperature_floor: Optional[int] = None
    attn_temperature_scale: Optional[float] = None
    # the router's sigmoid of each chosen logit (not renormalized) scales the token's input to that expert,
    # not its output (Llama4Router, Llama4TextMoe)
    router_sigmoid_input: bool = False

    # --- state-space layers: Mamba2 (tfcalc.architecture.mamba2; built in tfcalc.architecture.flat) ---
    # one letter per layer, each layer ONE sub-layer beside its norm (Nemotron-H's hybrid_override_pattern,
    # modeling_nemotron_h.py): M a Mamba2 mixer, * attention, - the dense FFN, E the mixture of experts; a Mamba2
    # model (Codestral Mamba) is all M. None: every layer attention and FFN
    hybrid_pattern: Optional[str] = None
    # each M and * layer has the FFN after its mixer too (the mixture of experts, with its shared expert, where
    # n_expert is given): Granite-4.0-H (modeling_granitemoehybrid.py); the pattern then has no - or E
    hybrid_with_ffn: bool = False
    ssm_heads: Optional[int] = None  # H (mamba_num_heads; Mamba2Config num_heads)
    ssm_head_dim: Optional[int] = None  # P (mamba_head_dim)
    ssm_groups: int = 1  # G groups of B and C (n_groups)
    ssm_state_size: int = 128  # N (ssm_state_size; Mamba2Config state_size)
    ssm_conv_kernel: int = 4  # K taps of the causal depthwise convolution (conv_kernel)
    ssm_chunk_size: int = 256  # the chunked scan's chunk (chunk_size)
    ssm_conv_bias: bool = True  # use_conv_bias
    ssm_bias: bool = False  # in_proj and out_proj biases (use_bias; mamba_proj_bias)
    ssm_state_dtype: Optional[Literal["fp32", "bf16", "fp16"]] = "fp32"  # the SSM state's dtype; None: the cache's

    def __post_init__(self) -> None:
        if isinstance(self.dense_layers, list):  # a YAML or JSON list; a tuple keeps the config hashable
            object.__setattr__(self, "dense_layers", tuple(self.dense_layers))
        if isinstance(self.stored_quant_block, list):
            object.__setattr__(self, "stored_quant_block", tuple(self.stored_quant_block))
        validate(self)  # the flat fields' own rules (tfcalc.config_rules)
        # then the description, built once here: its components check their own rules (GQA's grouping, a
        # norm's bias, a parallel block's layout, a mixture's top-k), so a bad config is refused as it is
        # made, before any work, and each rule is said in one place
        self.__dict__["architecture"] = self.to_architecture()
        validate_stored_groups(self)  # a quantization group against the matrices it quantizes

    def to_architecture(self) -> Architecture:
        """The per-layer description these flat fields say (tfcalc.architecture.flat), built anew: the one
        way from the front end to the description. ``architecture`` is it, cached."""
        return build_architecture(self)

    @functools.cached_property
    def architecture(self) -> Architecture:
        """The per-layer description every count folds over (tfcalc.architecture; built once, then cached:
        the config is frozen, so it can never go stale)."""
        return self.to_architecture()

    # --- derived sizes (properties, so a changed field can never leave a stale copy behind) ---
    @property
    def head_dim(self) -> int:
        if self.kv_lora_rank is not None:  # latent attention: each query and key head
            return self.qk_nope_head_dim + self.qk_rope_head_dim
        return self.d_head if self.d_head is not None else self.d_model // self.n_head

    @property
    def kv_heads(self) -> int:
        return self.n_kv_head if self.n_kv_head is not None else self.n_head

    @property
    def q_dim(self) -> int:
        """Attention width: n_head * head_dim (need not equal d_model)."""
        return self.n_head * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V): kv_heads * head_dim."""
        return self.kv_heads * self.head_dim

    @property
    def ffn_dim(self) -> int:
        """Hidden width of the FFN.

        Explicit ``d_ff`` wins. Otherwise, following Meta's Llama reference code (model.py,
        FeedForward.__init__): hidden = int(ffn_mult * d_model); for a gated FFN hidden =
        int(2 * hidden / 3) (Shazeer 2020 keeps the parameter count of the ungated FFN); then
        hidden = int(ffn_dim_multiplier * hidden) if given; finally round up to a multiple of
        ffn_multiple_of. Llama 2 7B: int(2*16384/3) = 10922 -> 11008 (multiple of 256).
        """
        if self.d_ff is not None:
            return self.d_ff
        hidden = int(self.ffn_mult * self.d_model)
        if self.gated_ffn:
            hidden = int(2 * hidden / 3)
        if self.ffn_dim_multiplier is not None:
            hidden = int(self.ffn_dim_multiplier * hidden)
        m = self.ffn_multiple_of
        return m * math.ceil(hidden / m)

    def resolved(self) -> dict[str, Any]:
        """All fields with the derived sizes written in: a file that rebuilds the same model."""
        out = dataclasses.asdict(self)
        out.update(d_head=self.head_dim, n_kv_head=self.kv_heads, d_ff=self.ffn_dim)
        if self.kv_lora_rank is not None:  # latent attention: its heads are given by its own fields
            out.update(d_head=None, n_kv_head=None)
        if self.arch == "encoder-decoder":
            out.update(n_encoder_layer=self.encoder_layers)
        out.update(attn_out_bias=self.o_bias, norm_bias=self.norm_has_bias)
        if self.pos_encoding == "relative":
            out.update(rel_pos_buckets=self.rel_buckets, rel_pos_max_distance=self.rel_max_distance)
        for derivation_only in ("ffn_mult", "ffn_dim_multiplier", "ffn_multiple_of"):
            out.pop(derivation_only)
        return out


register(ModelConfig)  # the fields' types, read from the annotations above: the one list of them
LIST_FIELDS: tuple[str, ...] = list_fields()  # the fields --set may give a YAML list (tfcalc.presets)
FIELD_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ModelConfig))
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelConfig) if f.default is dataclasses.MISSING
)


def replace(cfg: ModelConfig, **changes: Any) -> ModelConfig:
    """dataclasses.replace, re-validated (a frozen dataclass validates in __post_init__)."""
    return dataclasses.replace(cfg, **changes)


def from_mapping(data: dict[str, Any]) -> ModelConfig:
    """Build a ModelConfig from a mapping, naming any unknown field and the closest known one."""
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"field names must be strings; got {shown(key)}")
        if key not in FIELD_NAMES:
            raise ConfigError(f"unknown field {shown(key)}{suggest(key, FIELD_NAMES)}")
    for key in REQUIRED_FIELDS:
        if key not in data:
            raise ConfigError(f"missing required field '{key}'")
    for key, value in data.items():
        check_field_type(key, value)
    return ModelConfig(**data)


__all__ = [
    "ConfigError",
    "InputError",
    "ModelConfig",
    "FIELD_NAMES",
    "LIST_FIELDS",
    "check_field_type",
    "from_mapping",
    "replace",
    "suggest",
    "validate",
]
