"""MiMo-V2-Flash config.json files (model_type mimo_v2_flash; modeling_mimo_v2_flash.py,
configuration_mimo_v2_flash.py, MiMoV2FlashConfig's defaults): local and global softmax attention, five to one
(``layer_types``; by default layer 0 and every 6th layer full, the rest sliding), and DeepSeek-V3's sigmoid router
without a shared expert.

MiMoV2FlashAttention: Q and K heads of ``head_dim`` (192), V heads of ``v_head_dim`` (128; tfcalc's
attn_v_head_dim), Q/K/V biases with ``attention_bias`` (never on O). The sliding layers attend through
``sliding_window`` keys, the query included (129 by default; ``sliding_window_size`` W means W + 1, as the
config class reads it), keep twice ``num_key_value_heads`` K/V heads (local_n_kv_head) and one sink logit per
head (attn_sinks_local); the full layers neither. Values are scaled by ``attention_value_scale`` (0.707; null:
1) before attention: a constant times a linear map, folded into V's weights and bias at load (``value_scale``),
so it changes no count and no FLOP (transformers' elementwise multiply is no matmul). RoPE per layer type
(``rope_parameters``: full_attention and sliding_attention, bases 5,000,000 and 10,000 by default) on the first
int(head_dim × partial_rotary_factor) channels (0.334: 64 of 192), rotate-half.

The experts: ``mlp_layer_types`` ("dense" / "sparse" per layer; by default the first dense) as
tfcalc.hf_config.glm4_moe_lite reads it, ``n_routed_experts`` of ``moe_intermediate_size``, top
``num_experts_per_tok``, MiMoV2FlashTopkRouter's sigmoid with a correction bias over ``n_group`` groups,
renormalized (``norm_topk_prob``) and scaled (``routed_scaling_factor``, null: 1). Refused by name: the two
layer types with different ``partial_rotary_factor`` (tfcalc rotates as many channels in every layer), a
rope_type other than default. Keys transformers 5.24 reads in no module are left, as it leaves them.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import layers
from tfcalc.hf_config.deepseek import moe_names, sigmoid_router
from tfcalc.hf_config.glm4_moe_lite import dense_layers
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

THETAS = {"full_attention": 5_000_000.0, "sliding_attention": 10_000.0}  # MiMoV2FlashConfig.__post_init__
FRACTION = 0.334


def mimo_v2_flash(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=THETAS["full_attention"],
                        head_dim=192, n_kv_head=4), d_ff_key=None)
    _rope(r)
    r.take("attention_bias", "attn_bias", False)
    r.take("v_head_dim", "attn_v_head_dim", 128)
    r.positive("attention_value_scale", 0.707)  # folded into V's weights at load (checkpoint_names)
    r.fields["attn_out_bias"] = False
    n = r.fields["n_layer"]
    if r.raw.get("sliding_window_size") is not None:  # MiMoV2FlashConfig: the SGLang window, the query beside
        size = r.number("sliding_window_size", None, integer=True)
        r.raw = {**r.raw, "sliding_window": size + 1}
    r.raw = {**r.raw, "sliding_window": r.get("sliding_window", 129)}
    if r.raw.get("layer_types") is None:
        r.per_layer_list("layer_types")
    layers.layer_types(r, n, ["full_attention" if i == 0 or (i + 1) % 6 == 0 else "sliding_attention"
                              for i in range(n)] if r.raw.get("layer_types") is None else [])
    if r.fields.get("sliding_window"):
        r.fields.update(local_n_kv_head=2 * (r.fields["n_kv_head"] or r.fields["n_head"]), attn_sinks_local=True)
    else:  # no sliding layer (one full layer, or layer_types all full): no layer reads the sliding base
        r.fields.pop("rope_local_theta", None)
    _experts(r, n)
    r.causal_or_base("MiMoV2Flash")


def _rope(r: Reader) -> None:
    """RoPE bases and rotated fraction per layer type (rope_parameters, nested by type as transformers 5 writes
    it; absent: MiMoV2FlashConfig's), the sliding layers' base as rope_local_theta."""
    nested = r.rope_parameters()
    got = {}
    for kind, theta in THETAS.items():
        value = nested.get(kind, {"rope_theta": theta}) if nested else {"rope_theta": theta}
        if not isinstance(value, dict):
            raise r.fail(f"'rope_parameters' {kind} must be an object; got {shown(value)}")
        if value.get("rope_type", "default") != "default":
            raise r.fail(f"'rope_parameters' {kind} rope_type {shown(value.get('rope_type'))} is not supported "
                         "(default only)")
        base, fraction = value.get("rope_theta", theta), value.get("partial_rotary_factor", FRACTION)
        for key, v in (("rope_theta", base), ("partial_rotary_factor", fraction)):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
                raise r.fail(f"'rope_parameters' {kind} {key} must be a positive number; got {shown(v)}")
        got[kind] = (float(base), fraction)
    if got["full_attention"][1] != got["sliding_attention"][1]:
        raise r.fail("'rope_parameters' gives the full and sliding layers different partial_rotary_factor: tfcalc "
                     "rotates as many channels in every layer")
    r.fields.update(rope_theta=got["full_attention"][0], rope_fraction=got["full_attention"][1])
    if got["sliding_attention"][0] != got["full_attention"][0]:
        r.fields["rope_local_theta"] = got["sliding_attention"][0]


def _experts(r: Reader, n: int) -> None:
    dense = dense_layers(r, n)
    if dense == n:  # every layer dense
        r.take("intermediate_size", "d_ff", required=True)
        return
    r.take("moe_intermediate_size", "d_ff", 2048)
    r.take("n_routed_experts", "n_expert", 256, aliases=("num_local_experts",))
    r.take("num_experts_per_tok", "n_expert_active", 8)
    if dense:
        r.fields.update({"first_dense_layers": dense} if isinstance(dense, int) else {"dense_layers": dense})
        r.take("intermediate_size", "dense_d_ff", required=True)
    sigmoid_router(r, 1, 1, 1.0)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's names with V's rows (and bias) times attention_value_scale (``value_scale``), the sliding layers'
    sinks, the router's correction bias (a buffer), per-expert or grouped experts."""
    return llama_names(arch, moe_names(arch)[1:3] + [
        (r"layers\.(\d+)\.self_attn\.v_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{1}|v|value_scale"),
        (r"layers\.(\d+)\.self_attn\.(?:sinks|attention_sink_bias)", "blocks.{0}.attn.sinks"),
    ])
