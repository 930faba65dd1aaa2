"""GLM-4.7-Flash config.json files (model_type glm4_moe_lite; modeling_glm4_moe_lite.py,
configuration_glm4_moe_lite.py): DeepSeek-V3's model (tfcalc.hf_config.deepseek) -- multi-head latent attention
(a compressed Q of ``q_lora_rank``, the latent of ``kv_lora_rank``, heads of ``qk_nope_head_dim`` +
``qk_rope_head_dim`` and values of ``v_head_dim``, interleaved rotary pairs unless ``rope_interleave`` is false),
the sigmoid router with a correction bias over ``n_group`` groups, renormalized and scaled, a shared expert --
with Glm4MoeLiteConfig's defaults (47 layers, hidden 2048, 20 heads of 192 + 64, values 256, 64 experts of 1536,
top 4, ``routed_scaling_factor`` 1.8). Which layers are dense is ``mlp_layer_types`` ("dense" / "sparse" per
layer; by default the first dense, the rest sparse), not first_k_dense_replace: transformers 5.24 reads no
first_k_dense_replace here, so a file whose first_k_dense_replace disagrees with its layer list is refused by name
rather than counted one way and run the other. ``head_dim`` is transformers' alias of ``qk_rope_head_dim``
(Glm4MoeLiteConfig.attribute_map). ``num_nextn_predict_layers`` MTP modules are counted beside the model, as
GLM-4.5's (transformers builds none).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import deepseek
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

# Glm4MoeLiteConfig's (transformers 5.24)
DEFAULTS = dict(deepseek.V3_DEFAULTS, n_routed_experts=64, moe_intermediate_size=1536, num_experts_per_tok=4,
                n_shared_experts=1, q_lora_rank=768, max_position_embeddings=202752, qk_nope_head_dim=192,
                v_head_dim=256, rms_norm_eps=1e-5)


def glm4_moe_lite(r: Reader) -> None:
    n_layer = r.number("num_hidden_layers", None, integer=True)
    dense = dense_layers(r, n_layer)
    first = dense if isinstance(dense, int) else 0
    rope = r.get("qk_rope_head_dim")
    alias = r.number("head_dim", None, integer=True)
    if alias is not None and rope is not None and alias != rope:
        raise r.fail(f"'head_dim' {shown(alias)} differs from 'qk_rope_head_dim' {shown(rope)}: transformers reads "
                     "head_dim as qk_rope_head_dim (Glm4MoeLiteConfig.attribute_map)")
    r.raw = {**r.raw, "first_k_dense_replace": first, **({"qk_rope_head_dim": alias} if rope is None and alias
                                                          else {})}
    deepseek.shared_fields(r, DEFAULTS)
    if not isinstance(dense, int) and "n_expert" in r.fields:  # dense layers not all first: listed
        r.fields["dense_layers"] = dense
        r.take("intermediate_size", "dense_d_ff", required=True)
    scoring = r.get("scoring_func", "sigmoid")
    if scoring != "sigmoid":
        raise r.fail(f"'scoring_func' {shown(scoring)} is not supported: Glm4MoeLiteTopkRouter scores with a sigmoid")
    r.fields["rope_interleave"] = r.flag("rope_interleave", True)
    if "n_expert" in r.fields:
        deepseek.sigmoid_router(r, 1, 1, 1.8)
    r.take("num_nextn_predict_layers", "mtp_layers", 0)
    r.causal_or_base("Glm4MoeLite")


def dense_layers(r: Reader, n_layer: int | None) -> int | list[int]:
    """The dense layers of mlp_layer_types (Glm4MoeLiteDecoderLayer: "sparse" has the experts): k where they are
    the first k, else their list. Absent: the first layer only (Glm4MoeLiteConfig.__post_init__)."""
    kinds = r.get("mlp_layer_types")
    given = r.number("first_k_dense_replace", None, integer=True)
    if kinds is None:
        if given is not None and given != 1 and n_layer:
            raise r.fail(f"'first_k_dense_replace' {shown(given)} is not read by transformers' {r.model_type}, which "
                         "keeps the first layer dense; give 'mlp_layer_types' to say which layers are")
        return 1
    if not isinstance(kinds, list) or any(k not in ("dense", "sparse") for k in kinds):
        raise r.fail(f"'mlp_layer_types' must be a list of 'dense' and 'sparse'; got {shown(kinds)}")
    if n_layer is not None and len(kinds) != n_layer:
        raise r.fail(f"'mlp_layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n_layer}")
    dense = [i for i, k in enumerate(kinds) if k == "dense"]
    k = len(dense) if dense == list(range(len(dense))) else None
    if given is not None and given != (k if k is not None else -1):
        raise r.fail(f"'first_k_dense_replace' {shown(given)} disagrees with 'mlp_layer_types' (dense layers "
                     f"{shown(dense)}), the one transformers reads")
    return k if k is not None else dense


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """DeepSeek-V3's names (modeling_glm4_moe_lite.py keeps them: q_a_proj, kv_a_proj_with_mqa, kv_b_proj, ...)."""
    return deepseek.checkpoint_names(arch, model_type)
