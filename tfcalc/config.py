"""ModelConfig: the flat front end users write (YAML fields, --set keys, Hugging Face mappers), and
``cfg.architecture``, the per-layer description (tfcalc.architecture) it builds once and every count folds over.

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
``x + norm(f(x))``, no input norm (OLMo 2, modeling_olmo2.py). A parallel block runs attention and FFN side
by side, ``x + attn(n1(x)) + ffn(n2(x))``: two norms in GPT-NeoX, one shared in GPT-J, PaLM and Falcon-7B.

Token mixers: each layer's is softmax attention unless the registry of mixer kinds (tfcalc.architecture.kinds)
says otherwise -- latent attention where ``kv_lora_rank`` is given, or the kind a ``layer_pattern`` word names
(``"(gdn*3, full)*12"``). Each kind declares its own flat fields (softmax attention's, with its per-layer windows,
chunks and NoPE: tfcalc.architecture.flat_attention; latent attention's: .flat_latent): those registered as
tfcalc.architecture is imported are this dataclass's fields by inheritance, those of a kind registered later
(a plugin) in ``mixer_fields``; either reads as ``cfg.<field>`` and is written in YAML and ``--set`` alike.

Validation rules live in tfcalc.config_rules; every failure is one ConfigError line naming the field.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Optional

from tfcalc.architecture import Architecture, kinds as mixer_kinds
from tfcalc.architecture.flat import build as build_architecture
from tfcalc.config_derived import DerivedSizes
from tfcalc.config_gemma import GemmaFields
from tfcalc.config_layers import PerLayerViews
from tfcalc.config_quant import validate_stored_groups
from tfcalc.config_rules import (
    Activation,
    Arch,
    LiveNames,
    Norm,
    NormPlacement,
    ParallelBlock,
    PosEncoding,
    check_field_type,
    list_fields,
    register,
    suggest,
    validate,
)
from tfcalc.errors import InputError, shown

# A config that cannot describe a transformer is bad input like any other: one family, exit 2.
ConfigError = InputError


def _frozen(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value  # a tuple keeps the config hashable

# The built-in mixer kinds' fields (softmax and latent attention, registered as tfcalc.architecture is imported)
# are this dataclass's own by inheritance: each kind's frozen dataclass of fields is a base, read from the registry
@dataclass(frozen=True)
class ModelConfig(PerLayerViews, DerivedSizes, GemmaFields, *(kind.fields for kind in mixer_kinds.kinds())):
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
    # --- DeepSeek-V2/V3, Kimi K2 (tfcalc.config_latent): the router (tfcalc.architecture.routing); YaRN
    # (.latent.Yarn); MTP modules (.mtp); latent attention's fields are its mixer kind's (.flat_latent) ---
    router_scoring: Literal["softmax", "sigmoid", "sqrtsoftplus"] = "softmax"
    router_groups: Optional[int] = None  # n_group
    router_topk_groups: Optional[int] = None  # topk_group
    routed_scaling: Optional[float] = None  # routed_scaling_factor; None: 1
    router_score_bias: bool = False  # e_score_correction_bias (a buffer, no parameter)
    mtp_layers: int = 0  # multi-token prediction modules, counted beside the model
    # --- RoPE scaling (tfcalc.config_rope, tfcalc.architecture.rope): no count changes, the model's tables do ---
    rope_scaling: Optional[Literal["yarn", "linear", "llama3", "longrope", "proportional"]] = None
    rope_scaling_factor: Optional[float] = None
    rope_original_max_seq_len: Optional[int] = None  # yarn, llama3, longrope: the context trained on
    rope_short_factor: Optional[tuple[float, ...]] = None  # longrope: one per frequency, within the original
    rope_long_factor: Optional[tuple[float, ...]] = None  # longrope: one per frequency, past it
    rope_scaling_layers: Optional[Literal["all", "full"]] = None  # None: all RoPE layers; full: the global ones
    rope_low_freq_factor: Optional[float] = None  # llama3 (Llama 3.1: 1)
    rope_high_freq_factor: Optional[float] = None  # llama3 (Llama 3.1: 4)
    yarn_beta_fast: Optional[float] = None  # None: 32
    yarn_beta_slow: Optional[float] = None  # None: 1
    yarn_mscale: Optional[float] = None
    yarn_mscale_all_dim: Optional[float] = None
    yarn_attention_factor: Optional[float] = None  # None: from the factor (and the mscales)
    yarn_truncate: Optional[bool] = None  # None: true (gpt-oss: false)
    # --- scales, per-head Q/K norms and a projected embedding (issue 22: granite, cohere, opt-350m) ---
    # Granite (modeling_granite.py): token embeddings times embedding_multiplier, each sub-layer's output
    # times residual_multiplier before the residual add; logit_scale multiplies the logits (Cohere's
    # logit_scale; Granite's 1 / logits_scaling). None: 1, no multiply.
    embedding_multiplier: Optional[float] = None
    residual_multiplier: Optional[float] = None
    logit_scale: Optional[float] = None
    # the token table's width when it is not d_model: Linear(embedding_dim, d_model) after the lookup and
    # Linear(d_model, embedding_dim) before the LM head, both bias-free (OPT-350m's word_embed_proj_dim,
    # modeling_opt.py project_in / project_out). None: d_model, no projections
    embedding_dim: Optional[int] = None

    # each layer's kind, as runs: "(local*5, full)*10, local*2"; a word of any registered mixer kind
    # (tfcalc.architecture.kinds) picks that mixer for the layer: "(gdn*3, full)*12"
    layer_pattern: Optional[str] = None

    # --- Llama 4 (modeling_llama4.py, Llama4Router, Llama4TextMoe) ---
    router_sigmoid_input: bool = False  # each chosen logit's sigmoid (not renormalized) scales the expert's input
    # --- LongCat-Flash's identity experts and shortcut MoE; Nemotron 3 Super's latent MoE (tfcalc.config_moe) ---
    zero_experts: Optional[int] = None  # zero_expert_num (tfcalc.architecture.ffn, step 5)
    moe_shortcut: bool = False  # even layers: dense FFN + shortcut experts; odd: dense FFN (architecture.block)
    moe_latent_dim: Optional[int] = None  # the routed experts' width between d -> L -> d projections (ffn, step 7)

    # the fields of mixer kinds registered after this class was made (a plugin's kind, tfcalc.architecture.kinds),
    # as sorted (name, value) pairs: read as cfg.<name> like every other field (__getattr__), written in YAML and
    # --set as theirs; not a field users write (from_mapping and replace fill it)
    mixer_fields: tuple = dataclasses.field(default=(), metadata={"front_end": False})

    def __post_init__(self) -> None:
        if isinstance(self.mixer_fields, list):  # from JSON (a measured run's ranks rebuild the config)
            object.__setattr__(self, "mixer_fields", tuple((k, _frozen(v)) for k, v in self.mixer_fields))
        for name in (n for n in list_fields() if n in self.__dataclass_fields__):  # YAML/JSON lists: tuples
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        validate(self)  # the flat fields' own rules (tfcalc.config_rules)
        # then the description, built once here: its components check their own rules (GQA's grouping, a
        # norm's bias, a parallel block's layout, a mixture's top-k), so a bad config is refused as it is
        # made, before any work, and each rule is said in one place
        self.__dict__["architecture"] = self.to_architecture()
        validate_stored_groups(self)  # a quantization group against the matrices it quantizes

    def __getattr__(self, name: str) -> Any:
        """A field of a mixer kind registered after this class was made (only asked where no attribute is):
        its value in mixer_fields, else the kind's default."""
        if name.startswith("__") or name == "mixer_fields":
            raise AttributeError(name)
        for key, value in self.mixer_fields:
            if key == name:
                return value
        for kind in late_kinds():
            if name in kind.field_names():
                return kind.defaults()[name]
        raise AttributeError(f"'ModelConfig' object has no attribute {name!r}")

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
        out = as_fields(self)
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
REQUIRED_FIELDS: tuple[str, ...] = tuple(
    f.name for f in dataclasses.fields(ModelConfig) if f.default is dataclasses.MISSING
)


def late_kinds() -> tuple[mixer_kinds.MixerKind, ...]:
    """The mixer kinds registered after ModelConfig was made (a plugin's): their fields live in mixer_fields."""
    return tuple(k for k in mixer_kinds.kinds() if not issubclass(ModelConfig, k.fields))


def _late_names() -> tuple[str, ...]:
    return tuple(n for k in late_kinds() for n in k.field_names())


# the class's own fields first (the order they are written in above), then the built-in kinds' (inherited)
_OWN = tuple(sorted((f.name for f in dataclasses.fields(ModelConfig) if f.metadata.get("front_end", True)),
                    key=lambda n: n not in ModelConfig.__dict__["__annotations__"]))
# every field users may write (YAML, --set, a mapper's output): the dataclass's and the later mixer kinds'
FIELD_NAMES: Sequence[str] = LiveNames(lambda: _OWN + _late_names())
LIST_FIELDS: Sequence[str] = LiveNames(list_fields)  # the fields --set may give a YAML list (tfcalc.presets)


def as_fields(cfg: ModelConfig) -> dict[str, Any]:
    """{field: value} of every field users write, a later mixer kind's among them (what from_mapping takes)."""
    out = {name: getattr(cfg, name) for name in _OWN}
    return out | {name: getattr(cfg, name) for name in _late_names()}


def _split(data: dict[str, Any]) -> dict[str, Any]:
    """ModelConfig's keyword arguments for user fields: a later mixer kind's into mixer_fields."""
    late = set(_late_names())
    out = {k: v for k, v in data.items() if k not in late}
    own = tuple(sorted((k, _frozen(v)) for k, v in data.items() if k in late))
    return out | ({"mixer_fields": own} if own else {})


def replace(cfg: ModelConfig, **changes: Any) -> ModelConfig:
    """dataclasses.replace, re-validated (a frozen dataclass validates in __post_init__); a later mixer kind's
    fields changed by name like the others."""
    late = set(_late_names())
    if late & set(changes):
        given = dict(cfg.mixer_fields) | {k: v for k, v in changes.items() if k in late}
        changes = {k: v for k, v in changes.items() if k not in late} | _split(given)
    return dataclasses.replace(cfg, **changes)


def from_mapping(data: dict[str, Any]) -> ModelConfig:
    """Build a ModelConfig from a mapping, naming any unknown field and the closest known one (a mapping of a
    config's dataclass fields, ``mixer_fields`` among them, reads as the fields it holds)."""
    if "mixer_fields" in data:
        held = data["mixer_fields"]
        if not isinstance(held, (list, tuple)) or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) for p in held):
            raise ConfigError("unknown field 'mixer_fields' (a later mixer kind's fields are written by their names)")
        data = dict(held) | {k: v for k, v in data.items() if k != "mixer_fields"}
    names = tuple(FIELD_NAMES)
    for key in data:
        if not isinstance(key, str):
            raise ConfigError(f"field names must be strings; got {shown(key)}")
        if key not in names:
            raise ConfigError(f"unknown field {shown(key)}{suggest(key, names)}")
    for key in REQUIRED_FIELDS:
        if key not in data:
            raise ConfigError(f"missing required field '{key}'")
    for key, value in data.items():
        check_field_type(key, value)
    return ModelConfig(**_split(data))


__all__ = ["ConfigError", "InputError", "ModelConfig", "FIELD_NAMES", "LIST_FIELDS", "as_fields", "check_field_type",
           "from_mapping", "late_kinds", "replace", "suggest", "validate"]
