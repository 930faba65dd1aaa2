"""DeepSeek-V3 (and R1), Kimi K2, DeepSeek-V2 and DeepSeek-V3.2 config.json files: deepseek_v3, kimi_k2 (Kimi K2's
files say model_type "kimi_k2" with architectures ["DeepseekV3ForCausalLM"]: the same model), deepseek_v2 and
deepseek_v32, as transformers' modeling_deepseek_v3.py, modeling_deepseek_v2.py and modeling_deepseek_v32.py
build them. DeepSeek-V3.2 is V3 with DeepSeek Sparse Attention in every layer (index_topk, index_n_heads,
index_head_dim: tfcalc.architecture.sparse_latent); its layer_types are all "indexed_attention" and its
mlp_layer_types dense layers then sparse ones (read before first_k_dense_replace, as the config class does; other
orders are refused by name).
glm_moe_dsa (GLM-5, modeling_glm_moe_dsa.py) is the same model with the indexer's RoPE on interleaved pairs.

Required: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size (the dense layers'),
vocab_size. Optional, with the defaults of DeepseekV3Config / DeepseekV2Config: moe_intermediate_size,
n_routed_experts, num_experts_per_tok, n_shared_experts (one shared MLP n_shared_experts ×
moe_intermediate_size wide), first_k_dense_replace (the first k layers dense), kv_lora_rank, q_lora_rank
(null: a plain Q projection), qk_nope_head_dim, qk_rope_head_dim, v_head_dim, attention_bias, rms_norm_eps,
max_position_embeddings, rope_theta, rope_scaling (yarn or none), rope_interleave (V3), routed_scaling_factor,
n_group, topk_group, norm_topk_prob, num_nextn_predict_layers (the MTP modules, counted beside).

The routers, as transformers runs them: V3 scores with a sigmoid, adds the correction bias and scores
groups by their two best (noaux_tc) whatever ``topk_method`` says; V2 scores with a softmax and groups
only with topk_method group_limited_greedy, never renormalizing (its router does not read norm_topk_prob:
true is refused). Refused by name: moe_layer_freq other than 1 and num_key_value_heads other than the
heads (transformers builds neither), scoring_func other than the router's.
"""

from __future__ import annotations

from typing import Any

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.llama_like import llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

V3_DEFAULTS = dict(n_routed_experts=256, moe_intermediate_size=2048, num_experts_per_tok=8, n_shared_experts=1,
                   first_k_dense_replace=3, q_lora_rank=1536, max_position_embeddings=4096)
V2_DEFAULTS = dict(n_routed_experts=64, moe_intermediate_size=1407, num_experts_per_tok=None, n_shared_experts=2,
                   first_k_dense_replace=0, q_lora_rank=1536, max_position_embeddings=2048)


def shared_fields(r: Reader, defaults: dict[str, Any]) -> None:
    """The fields every config of this shape shares (sizes, norms, RoPE and YaRN, latent attention, the
    experts), with the family's ``defaults`` where a key is absent: DeepSeek-V3/V2/V3.2 here, and GLM-4.7-Flash
    (tfcalc.hf_config.glm4_moe_lite), whose model is DeepSeek-V3's."""
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("vocab_size", "vocab_size"))
    kv = r.number("num_key_value_heads", None, integer=True)
    if kv is not None and kv != r.raw["num_attention_heads"]:
        raise r.fail(f"'num_key_value_heads' {shown(kv)} is not supported: latent attention expands one key and "
                     "value head per query head (num_attention_heads)")
    r.take("max_position_embeddings", "max_seq_len", defaults["max_position_embeddings"])
    r.take("rms_norm_eps", "norm_eps", defaults.get("rms_norm_eps", 1e-6))
    r.rope(10000.0)
    r.activation("hidden_act", "silu")
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.take("attention_bias", "attn_bias", False)
    r.dtype()
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    ffn_bias=False)
    _latent(r, defaults)
    experts(r, defaults)
    yarn_scaling(r)


def _latent(r: Reader, defaults: dict[str, Any]) -> None:
    r.take("kv_lora_rank", "kv_lora_rank", 512)
    r.take("q_lora_rank", "q_lora_rank", defaults["q_lora_rank"])
    if "q_lora_rank" in r.raw and r.raw["q_lora_rank"] is None:  # null: a plain Q projection
        r.fields["q_lora_rank"] = None
    r.take("qk_nope_head_dim", "qk_nope_head_dim", defaults.get("qk_nope_head_dim", 128))
    r.take("qk_rope_head_dim", "qk_rope_head_dim", 64)
    r.take("v_head_dim", "v_head_dim", defaults.get("v_head_dim", 128))


def experts(r: Reader, defaults: dict[str, Any]) -> None:
    """The dense layers first, then the mixture of experts with its shared MLP (DeepseekV3DecoderLayer)."""
    freq = r.number("moe_layer_freq", 1, integer=True)
    if freq != 1:
        raise r.fail(f"'moe_layer_freq' {shown(freq)} is not supported: transformers builds every layer past "
                     "first_k_dense_replace with the experts")
    n_layer, dense = r.fields["n_layer"], r.number("first_k_dense_replace", defaults["first_k_dense_replace"],
                                                   integer=True) or 0
    if dense >= n_layer:  # every layer dense: no experts at all
        r.take("intermediate_size", "d_ff", required=True)
        return
    r.take("moe_intermediate_size", "d_ff", defaults["moe_intermediate_size"])
    r.take("n_routed_experts", "n_expert", defaults["n_routed_experts"], aliases=("num_local_experts",))
    r.take("num_experts_per_tok", "n_expert_active", defaults["num_experts_per_tok"], required=True)
    shared = r.number("n_shared_experts", defaults["n_shared_experts"], integer=True) or 0
    if shared:
        r.fields["shared_expert_d_ff"] = shared * r.fields["d_ff"]
    if dense:
        r.fields["first_dense_layers"] = dense
        r.take("intermediate_size", "dense_d_ff", required=True)


def yarn_scaling(r: Reader) -> None:
    """rope_scaling (transformers 4) or rope_parameters (5): yarn, or none; with DeepSeek's mscale keys. Read
    here and by the other families that scale RoPE as DeepSeek does (Ling 3, LongCat-Flash, DeepSeek-V4)."""
    scaling = r.get("rope_scaling") or r.rope_parameters()
    if not isinstance(scaling, dict):
        raise r.fail(f"'rope_scaling' must be an object; got {shown(scaling)}")
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind == "default":
        return
    if kind != "yarn":
        raise r.fail(f"'rope_scaling' type {shown(kind)} is not supported (yarn or none)")
    sub = Reader({"model_type": r.model_type, **scaling}, f"{r.where}: 'rope_scaling'")
    sub.take("factor", "rope_scaling_factor", required=True)
    sub.take("original_max_position_embeddings", "rope_original_max_seq_len", required=True)
    for key, field in (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"), ("mscale", "yarn_mscale"),
                       ("mscale_all_dim", "yarn_mscale_all_dim"), ("attention_factor", "yarn_attention_factor"),
                       ("truncate", "yarn_truncate")):
        sub.take(key, field)
    r.fields.update({k: v for k, v in sub.fields.items() if v is not None}, rope_scaling="yarn")


def sigmoid_router(r: Reader, groups: int, topk_groups: int, scaling: float) -> None:
    """DeepSeek-V3's router as its config keys say it (DeepseekV3TopkRouter, noaux_tc): sigmoid scores, the
    correction bias in the choice, norm_topk_prob (default true), n_group groups of which topk_group are kept, and
    routed_scaling_factor; each family's defaults given. Shared by the families that took it over (GLM-4.5 and
    4.7-Flash, Nemotron-H, MiMo-V2-Flash, DeepSeek-V3.2)."""
    r.fields.update(router_scoring="sigmoid", router_score_bias=True, router_norm_topk=r.flag("norm_topk_prob", True))
    r.take("n_group", "router_groups", groups)
    r.take("topk_group", "router_topk_groups", topk_groups)
    r.take("routed_scaling_factor", "routed_scaling", scaling)


def deepseek_v3(r: Reader) -> None:
    shared_fields(r, V3_DEFAULTS)
    scoring = r.get("scoring_func", "sigmoid")
    if scoring != "sigmoid":
        raise r.fail(f"'scoring_func' {shown(scoring)} is not supported: DeepseekV3TopkRouter scores with a sigmoid")
    r.fields["rope_interleave"] = r.flag("rope_interleave", True)
    if "n_expert" in r.fields:
        sigmoid_router(r, 8, 4, 2.5)
    r.take("num_nextn_predict_layers", "mtp_layers", 0, aliases=("num_mtp_layers",))
    r.causal_or_base("DeepseekV3")


def deepseek_v2(r: Reader) -> None:
    r.divisible_heads()
    shared_fields(r, V2_DEFAULTS)
    scoring = r.get("scoring_func", "softmax")
    if scoring != "softmax":
        raise r.fail(f"'scoring_func' {shown(scoring)} is not supported: DeepseekV2TopkRouter scores with a softmax")
    if "n_expert" in r.fields:
        if r.flag("norm_topk_prob", False):
            raise r.fail("'norm_topk_prob' true is not supported: transformers' DeepseekV2TopkRouter never "
                         "renormalizes the chosen weights")
        method = r.get("topk_method", "greedy")
        if method not in ("greedy", "group_limited_greedy"):
            raise r.fail(f"'topk_method' {shown(method)} is not supported (greedy or group_limited_greedy)")
        r.fields["router_norm_topk"] = False
        if method == "group_limited_greedy":
            r.take("n_group", "router_groups", required=True)
            r.take("topk_group", "router_topk_groups", required=True)
        r.take("routed_scaling_factor", "routed_scaling", 1.0)
    r.causal_or_base("DeepseekV2")


def moe_names(arch: Architecture) -> list[Rule]:
    """DeepSeek-V3's mixture of experts, which GLM-4.5 (glm4_moe) shares: the MTP modules stored after the main
    layers (layers n_layer.., tfcalc.architecture.mtp), the FP8 block scales (``weight_scale_inv``), the
    router's correction bias (a buffer of the model, loaded as one), the shared experts."""
    mtp = "|".join(str(arch.output.n_layer + k) for k in range(8))
    return [
        (rf"layers\.(?:{mtp})\..*", "mtp"),
        (r".*\.weight_scale_inv", "buffer"),
        (r"layers\.(\d+)\.mlp\.gate\.e_score_correction_bias", "buffer:blocks.{0}.ffn.score_bias"),
        (r"layers\.(\d+)\.mlp\.shared_experts\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (r"layers\.(\d+)\.mlp\.shared_experts\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
    ]


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """DeepSeek-V2/V3 and Kimi K2 (modeling_deepseek_v3.py): the latent attention's projections and norms,
    the mixture of experts (moe_names), Llama's other names."""
    attn = r"layers\.(\d+)\.self_attn\."
    moe = moe_names(arch)
    return moe[:2] + [
        (attn + r"q_proj\.weight", "blocks.{0}.attn.q.weight"),
        (attn + r"q_a_proj\.(weight|bias)", "blocks.{0}.attn.q_a.{1}"),
        (attn + r"q_a_layernorm\.weight", "blocks.{0}.attn.q_a_norm.weight"),
        (attn + r"q_b_proj\.weight", "blocks.{0}.attn.q_b.weight"),
        (attn + r"kv_a_proj_with_mqa\.(weight|bias)", "blocks.{0}.attn.kv_a.{1}"),
        (attn + r"kv_a_layernorm\.weight", "blocks.{0}.attn.kv_a_norm.weight"),
        (attn + r"kv_b_proj\.weight", "blocks.{0}.attn.kv_b.weight"),
        # DeepSeek-V3.2's and GLM-5's lightning indexer (tfcalc.architecture.sparse_latent)
        (attn + r"indexer\.(wq_b|wk|weights_proj)\.weight", "blocks.{0}.attn.indexer.{1}.weight"),
        (attn + r"indexer\.k_norm\.(weight|bias)", "blocks.{0}.attn.indexer.k_norm.{1}"),
    ] + moe[2:] + llama_names(arch)

V32_DEFAULTS = dict(V3_DEFAULTS, max_position_embeddings=163840, index_n_heads=64, n_group=8, topk_group=4)
# GlmMoeDsaConfig's defaults (transformers 5.24, configuration_glm_moe_dsa.py; its checkpoint zai-org/GLM-5)
GLM_DSA_DEFAULTS = dict(V3_DEFAULTS, q_lora_rank=2048, max_position_embeddings=202752, qk_nope_head_dim=192,
                        v_head_dim=256, rms_norm_eps=1e-5, index_n_heads=32, n_group=1, topk_group=1)


def deepseek_v32(r: Reader) -> None:
    """DeepseekV32Config: V3's fields with the indexer's (defaults 2048, 64, 128, rotate-half RoPE); the main
    attention always rotates interleaved pairs and always compresses the query (no q_proj path)."""
    _sparse(r, V32_DEFAULTS, "DeepseekV32")


def glm_moe_dsa(r: Reader) -> None:
    """GlmMoeDsaConfig (GLM-5): DeepSeek-V3.2's model with the indexer's RoPE on interleaved pairs and 32
    indexer heads by default, and "shared" indexer layers (IndexCache, arXiv 2603.12201): a layer of indexer_types
    "shared" reuses the previous full layer's top-k and has no indexer (tfcalc's index_topk_pattern's S)."""
    _sparse(r, GLM_DSA_DEFAULTS, "GlmMoeDsa")
    r.fields["index_rope_interleave"] = True
    kinds = _indexer_types(r, r.fields["n_layer"])
    if "shared" in kinds:
        r.fields["index_topk_pattern"] = "".join("F" if k == "full" else "S" for k in kinds)


def _indexer_types(r: Reader, n: int) -> list[str]:
    """Each layer's indexer mode as GlmMoeDsaConfig.__post_init__ derives it (configuration_glm_moe_dsa.py):
    indexer_types, else index_topk_pattern (F/S letters or a list of modes), else the schedule: layer i full
    when max(i - index_skip_topk_offset + 1, 0) % index_topk_freq == 0 (freq 1, offset 2 by default)."""
    kinds, pattern = r.get("indexer_types"), r.get("index_topk_pattern")
    if kinds is None and pattern is not None:
        if isinstance(pattern, str) and not set(pattern) - {"F", "S"}:
            kinds = [{"F": "full", "S": "shared"}[c] for c in pattern]
        elif isinstance(pattern, list):
            kinds = pattern
        else:
            raise r.fail(f"'index_topk_pattern' {shown(pattern)} must be a string of F (full) and S (shared)")
        key = "index_topk_pattern"
    elif kinds is None:
        freq = r.number("index_topk_freq", 1, integer=True)
        offset = r.number("index_skip_topk_offset", 2, integer=True)
        kinds = ["full" if max(i - offset + 1, 0) % max(freq, 1) == 0 else "shared" for i in range(n)]
        key = "index_skip_topk_offset"
    else:
        key = "indexer_types"
    if not isinstance(kinds, list) or len(kinds) != n or set(kinds) - {"full", "shared"}:
        raise r.fail(f"'{key}' {shown(kinds)} must give each of the {n} layers 'full' or 'shared'")
    if kinds[0] != "full":
        raise r.fail(f"'{key}' {shown(kinds)}: the first layer must run its indexer ('full'): a shared layer reuses "
                     "an earlier full layer's top-k")
    return kinds


def _sparse(r: Reader, defaults: dict[str, Any], prefix: str) -> None:
    """The DSA families' reading (see deepseek_v32 and glm_moe_dsa)."""
    if "q_lora_rank" in r.raw and r.raw["q_lora_rank"] is None:
        raise r.fail("'q_lora_rank' null is not supported: DSA's attention always compresses the query "
                     "(its indexer reads the compressed query)")
    if r.get("rope_interleave", True) is not True:
        raise r.fail("'rope_interleave' false is not supported: DSA's attention always rotates interleaved pairs")
    mlp = r.get("mlp_layer_types")
    if isinstance(mlp, list) and all(k in ("dense", "sparse") for k in mlp) and "dense" not in mlp[
            mlp.index("sparse") if "sparse" in mlp else len(mlp):]:
        # the list is what the config class builds by (first_k_dense_replace only makes one where none is given,
        # DeepseekV32Config.__post_init__): its dense layers first, whatever first_k_dense_replace says
        r.raw = {**r.raw, "first_k_dense_replace": mlp.index("sparse") if "sparse" in mlp else len(mlp)}
    shared_fields(r, defaults)
    scoring = r.get("scoring_func", "sigmoid")
    if scoring != "sigmoid":
        raise r.fail(f"'scoring_func' {shown(scoring)} is not supported: {prefix}TopkRouter scores with a sigmoid")
    n_layer = r.fields["n_layer"]
    kinds = r.get("layer_types")
    if kinds is not None and (not isinstance(kinds, list) or set(kinds) != {"indexed_attention"}
                              or len(kinds) != n_layer):
        raise r.fail(f"'layer_types' {shown(kinds)} is not supported: {n_layer} layers of 'indexed_attention'")
    dense = min(r.number("first_k_dense_replace", 3, integer=True) or 0, n_layer)
    mlp = r.get("mlp_layer_types")
    if mlp is not None and mlp != ["dense"] * dense + ["sparse"] * (n_layer - dense):
        raise r.fail(f"'mlp_layer_types' {shown(mlp)} is not supported: one of dense or sparse per layer "
                     f"({n_layer}), the dense layers first")
    r.fields["rope_interleave"] = True
    if "n_expert" in r.fields:
        sigmoid_router(r, defaults["n_group"], defaults["topk_group"], 2.5)
    r.take("index_topk", "index_topk", 2048)
    r.take("index_n_heads", "index_n_heads", defaults["index_n_heads"])
    r.take("index_head_dim", "index_head_dim", 128)
    r.take("num_nextn_predict_layers", "mtp_layers", 0, aliases=("num_mtp_layers",))
    r.causal_or_base(prefix)
