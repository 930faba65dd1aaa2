"""Nemotron-H config.json files (NVIDIA Nemotron-H, Nemotron-Nano-9B-v2, Nemotron-3-Nano-30B-A3B;
modeling_nemotron_h.py, configuration_nemotron_h.py): a decoder whose every layer is ONE sub-layer beside its
RMSNorm (NemotronHBlock: x + mixer(norm(x))), the kind per layer from ``hybrid_override_pattern`` (M a Mamba2
mixer, * attention, - an MLP, E a mixture of experts) or its list form ``layers_block_type`` / ``layer_types``
(linear_attention, full_attention, mlp, moe; the older mamba, attention read too), tfcalc's ``hybrid_pattern``;
the layer count is the pattern's (transformers ignores num_hidden_layers beside it, with a warning).

- Mamba2 (tfcalc.architecture.mamba2): mamba_num_heads, mamba_head_dim, n_groups, ssm_state_size, conv_kernel,
  chunk_size, use_bias (in_proj, out_proj), use_conv_bias; the SSM state kept in mamba_ssm_cache_dtype (float32);
- attention: num_attention_heads, num_key_value_heads, head_dim (no bias: attention_bias is unused); no positions
  at all (NemotronHAttention applies no rotary embedding: rope_theta and partial_rotary_factor in the files are
  unused);
- MLP and experts: up and down only (not gated), mlp_hidden_act (relu2), mlp_bias; the MLP intermediate_size
  wide, each routed expert moe_intermediate_size, the shared expert moe_shared_expert_intermediate_size (one,
  always on, not gated); the router as DeepSeek-V3's (sigmoid, correction bias, n_group / topk_group, top-k
  renormalized when norm_topk_prob, times routed_scaling_factor; NemotronHTopkRouter);
- moe_latent_size (Nemotron 3 Super's latent MoE), tfcalc's ``moe_latent_dim``: the routed experts work in that
  width, the routed input projected d -> L before them (fc1_latent_proj) and their sum L -> d after
  (fc2_latent_proj), the router and shared expert on the full width (tfcalc.architecture.ffn, step 7); without E
  layers transformers builds no projection and it is read and unused.

Not built, as transformers builds none of them: the num_nextn_predict_layers multi-token prediction layers
(mtp_hybrid_override_pattern; NemotronHForCausalLM ignores ``mtp.*`` on load, tfcalc counts those tensors beside the
model, tfcalc.hf_config.names' ``mtp``). Refused by name: a Mamba2 activation other than SiLU, a dt limit, sliding
windows.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.deepseek import sigmoid_router
from tfcalc.hf_config.mamba2 import backbone, ssm_fields
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

LETTERS = {"linear_attention": "M", "full_attention": "*", "mlp": "-", "moe": "E"}
# the names files written by transformers before 5.x list (configuration_utils._LEGACY_LAYER_TYPE_REMAP, which
# NemotronHConfig applies on read)
LEGACY = {"mamba": "M", "attention": "*"}
DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}


def _pattern(r: Reader) -> str:
    pattern = r.get("hybrid_override_pattern")
    if pattern is None:
        listed = r.get("layers_block_type", r.get("layer_types", ["linear_attention", "moe", "full_attention", "mlp"]))
        letters = {**LETTERS, **LEGACY}
        if not isinstance(listed, list) or any(not isinstance(k, str) or k not in letters for k in listed):
            raise r.fail(f"'layers_block_type' must list layer kinds of {', '.join(LETTERS)} (or mamba, attention); "
                         f"got {shown(listed)}")
        pattern = "".join(letters[k] for k in listed)
    if not isinstance(pattern, str) or not pattern or set(pattern) - set("M*-E"):
        raise r.fail(f"'hybrid_override_pattern' must be letters M, *, - and E, one per layer; got {shown(pattern)}")
    return pattern


def nemotron_h(r: Reader) -> None:
    r.required(("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    pattern = _pattern(r)
    r.fields.update(n_layer=len(pattern), hybrid_pattern=pattern)
    ssm_fields(r, "mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel", "chunk_size",
               "use_bias", {"mamba_num_heads": 128, "mamba_head_dim": 64, "ssm_state_size": 128, "n_groups": 8,
                            "conv_kernel": 4, "chunk_size": 128, "use_bias": False})
    cache = r.get("mamba_ssm_cache_dtype", "float32")
    if cache not in DTYPES:
        raise r.fail(f"'mamba_ssm_cache_dtype' {shown(cache)} is not one of {', '.join(DTYPES)}")
    r.fields["ssm_state_dtype"] = DTYPES[cache]
    r.take("num_attention_heads", "n_head", 32)
    r.take("num_key_value_heads", "n_kv_head", 8)  # NemotronHConfig's default
    r.take("head_dim", "d_head", 128)
    # NemotronHAttention builds its four projections without a bias whatever attention_bias says (read, held to
    # true or false)
    r.flag("attention_bias", False)
    r.fields["attn_bias"] = False
    r.take("max_position_embeddings", "max_seq_len", 4096)
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    # NemotronHForCausalLM ties nothing (_tied_weights_keys = {}): the head is its own weight whatever
    # tie_word_embeddings says (read, held to true or false)
    r.flag("tie_word_embeddings", False)
    r.fields["tie_embeddings"] = False
    r.activation("mlp_hidden_act", "relu2")
    r.take("mlp_bias", "ffn_bias", False)
    if r.fields["ffn_bias"] and "E" in pattern:  # NemotronHExperts' fused up/down tensors have no bias
        raise r.fail("'mlp_bias' true beside E layers is not supported: transformers biases the MLPs and the shared "
                     "expert but not the routed experts")
    r.dtype()
    _experts(r, pattern)
    if r.get("sliding_window") is not None:
        raise r.fail(f"'sliding_window' {shown(r.get('sliding_window'))} is not built (transformers' torch path for "
                     "it is not reproduced here)")
    mtp = r.number("num_nextn_predict_layers", 0, integer=True)
    if mtp is not None and mtp < 0:
        raise r.fail(f"'num_nextn_predict_layers' must be 0 or more; got {shown(mtp)}")
    r.fields.update(pos_encoding="none", norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True,
                    gated_ffn=False)
    r.causal_or_base("NemotronH")


def _experts(r: Reader, pattern: str) -> None:
    """The MLP's width as d_ff, or, with E layers, the experts' as d_ff and the MLP's as dense_d_ff (the flat
    fields' convention: tfcalc.architecture.flat); the router's keys."""
    if "E" not in pattern:
        r.take("intermediate_size", "d_ff", 21504)
        return
    r.take("moe_intermediate_size", "d_ff", 7688)
    if "-" in pattern:  # the MLP layers' width beside the experts'
        r.take("intermediate_size", "dense_d_ff", 21504)
    r.take("n_routed_experts", "n_expert", 8, aliases=("num_local_experts",))
    r.take("num_experts_per_tok", "n_expert_active", 2)
    shared = r.number("n_shared_experts", 1, integer=True)
    if shared != 1:  # 0 included: NemotronHMoE builds its shared MLP whatever n_shared_experts says
        raise r.fail(f"'n_shared_experts' {shown(shared)}: transformers' NemotronHMoE builds one shared MLP whatever "
                     "it says")
    r.take("moe_shared_expert_intermediate_size", "shared_expert_d_ff", 7688)
    latent = r.number("moe_latent_size", None, integer=True)
    if latent is not None and latent < 1:  # transformers builds Linear(d, 0) at 0 and fails below; neither is a model
        raise r.fail(f"'moe_latent_size' must be a positive integer (the experts' width) or null; got {shown(latent)}")
    r.fields["moe_latent_dim"] = latent
    sigmoid_router(r, 1, 1, 1.0)


# ---- its checkpoint names (tfcalc.hf_config.names): modeling_nemotron_h.py ----

def _layers(arch: Architecture) -> list[Rule]:
    """Each layer's norm is the mixer's input norm (``attn_norm``) in an M or * layer and the FFN's (``ffn_norm``)
    in a - or E layer, read from the description (``Block.norms``); attention (q, k, v, o), MLP (up, down), router
    (``gate``, its correction bias a buffer), the latent projections (fc1/fc2_latent_proj), experts (grouped
    (E, f, d) and (E, d, f), tfcalc's layout, or one tensor per expert as the released files store them) and shared
    expert as DeepSeek-V3's are."""
    layer = r"backbone\.layers\.(\d+)\.mixer\."
    by_norm: dict[str, list[str]] = {}
    for i, block in enumerate(arch.output.layers()):
        by_norm.setdefault(block.norms()[0][0], []).append(str(i))
    norms = [(rf"backbone\.layers\.({'|'.join(ids)})\.norm\.weight", "blocks.{0}.%s.weight" % name)
             for name, ids in by_norm.items()]
    return norms + [
        (layer + r"([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"up_proj\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"down_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        (layer + r"gate\.weight", "blocks.{0}.ffn.router.weight"),
        (layer + r"fc1_latent_proj\.(weight|bias)", "blocks.{0}.ffn.latent_in.{1}"),
        (layer + r"fc2_latent_proj\.(weight|bias)", "blocks.{0}.ffn.latent_out.{1}"),
        (layer + r"gate\.e_score_correction_bias", "buffer:blocks.{0}.ffn.score_bias"),
        (layer + r"experts\.up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (layer + r"experts\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
        (layer + r"experts\.(\d+)\.up_proj\.weight", "blocks.{0}.ffn.experts.up.weight@{1}"),
        (layer + r"experts\.(\d+)\.down_proj\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
        (layer + r"shared_experts\.up_proj\.weight", "blocks.{0}.ffn.shared.up.weight"),
        (layer + r"shared_experts\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
    ]


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    return [(r"mtp\..*", "mtp")] + _layers(arch) + backbone(arch)
