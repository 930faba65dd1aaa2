"""DeepSeek-V4 config.json files (model_type deepseek_v4: DeepSeek-V4-Flash, V4-Pro), as transformers 5.24's
configuration_deepseek_v4.py reads them and modeling_deepseek_v4.py builds them, with DeepseekV4Config's defaults
(V4-Flash's sizes: hidden 4096, 43 layers, 64 heads of 512, 256 experts of 2048, 6 per token).

Each layer: its attention by ``layer_types`` (sliding_attention, compressed_sparse_attention,
heavily_compressed_attention: tfcalc.architecture.compressed_attention, layer_pattern words swa, csa, hca; older
files' ``compress_ratios`` per layer 0 / 4 / 128; neither: two HCA layers then CSA and HCA alternating, as
DeepseekV4Config.__post_init__), ``compress_rates`` (or ``compress_rate_csa``, ``compress_rate_hca``),
``q_lora_rank``, ``o_groups``, ``o_lora_rank``, ``sliding_window``, ``index_n_heads``, ``index_head_dim``,
``index_topk``, ``rope_theta`` (sliding layers), ``compress_rope_theta`` (compressed layers, with the file's YaRN),
``partial_rotary_factor`` (or ``qk_rope_head_dim`` / ``head_dim``); one shared K=V head (``num_key_value_heads``
1). Its MoE: ``n_routed_experts`` experts of ``moe_intermediate_size``, ``num_experts_per_tok`` each token, one
shared expert of the same width, the SwiGLU clamped at ``swiglu_limit``, scores by ``scoring_func``
(sqrtsoftplus, softmax or sigmoid) with the correction bias, renormalized (``norm_topk_prob``), times
``routed_scaling_factor``; the first layers of ``mlp_layer_types`` "hash_moe" (older files:
``num_hash_layers``; default 3) choose their experts by token id (tid2eid). Hyper-connections of ``hc_mult``
streams (``hc_sinkhorn_iters``, ``hc_eps``) around every sub-layer and before the final norm.

Refused by name: num_key_value_heads other than 1, hash_moe layers that are not the first ones, mlp_bias true
(transformers biases the shared expert and not the routed ones), n_shared_experts other than 1 (transformers builds
one shared MLP whatever it says), a YaRN attention_factor other than 1, any
quantization_config (V4's FP4 experts with FP8 ue8m0-scaled weights are not modelled: ``_quantization``). Not
counted: the MTP layer (num_nextn_predict_layers; transformers does not instantiate it, its checkpoint tensors are
counted beside, as DeepSeek-V3's).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.deepseek import moe_names, yarn_scaling
from tfcalc.hf_config.layer_pattern import compact
from tfcalc.hf_config.llama_like import llama_names
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

WORDS = {"sliding_attention": "swa", "compressed_sparse_attention": "csa", "heavily_compressed_attention": "hca"}
RATIO_TYPES = {0: "sliding_attention", 4: "compressed_sparse_attention", 128: "heavily_compressed_attention"}


def deepseek_v4(r: Reader) -> None:
    r.take("num_hidden_layers", "n_layer", 43)
    r.take("hidden_size", "d_model", 4096)
    r.take("num_attention_heads", "n_head", 64)
    kv = r.number("num_key_value_heads", 1, integer=True)
    if kv != 1:
        raise r.fail(f"'num_key_value_heads' {shown(kv)} is not supported: DeepSeek-V4's attention has one shared "
                     "K=V head")
    r.fields["n_kv_head"] = 1
    r.take("head_dim", "d_head", 512)
    r.take("vocab_size", "vocab_size", 129280)
    r.take("max_position_embeddings", "max_seq_len", 1048576)
    r.take("rms_norm_eps", "norm_eps", 1e-6)
    _rope(r)
    r.activation("hidden_act", "silu")
    # DeepseekV4ForCausalLM ties lm_head.weight to embed_tokens.weight when the file says so (_tied_weights_keys)
    r.fields["tie_embeddings"] = r.flag("tie_word_embeddings", False)
    if r.flag("mlp_bias", False):
        raise r.fail("'mlp_bias' true is not supported: transformers biases the shared expert and not the routed ones")
    r.dtype()
    _quantization(r)
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    ffn_bias=False, attn_bias=False)
    _attention(r)
    _experts(r)
    r.take("hc_mult", "hyper_connections", 4)
    r.take("hc_sinkhorn_iters", "hc_sinkhorn_iters", 20)
    r.take("hc_eps", "hc_eps", 1e-6)
    r.causal_or_base("DeepseekV4")


def _quantization(r: Reader) -> None:
    """DeepSeek-V4's published checkpoints store FP4 experts (``expert_dtype``, also a top-level key in V4's
    files) and FP8 weights with power-of-two (ue8m0) block scales, and keep the compressor's and indexer's
    projections in bf16 (modeling_deepseek_v4.py, _keep_in_fp32_modules): tfcalc.hf_config.quantization models
    none of these, so a file with a quantization_config is refused in one line rather than its weights miscounted."""
    q = r.raw.get("quantization_config")
    if q is not None:
        expert = q.get("expert_dtype", r.raw.get("expert_dtype")) if isinstance(q, dict) else None
        raise r.fail(f"'quantization_config' (expert_dtype {shown(expert)}) is not counted for deepseek_v4: its FP4 "
                     "experts, ue8m0 scales and bf16 compressors are not modelled; leave it out to count the weights "
                     "in the config's dtype")


def _rope(r: Reader) -> None:
    """θ of the sliding layers and of the compressed ones; the share of each head that rotates; the compressed
    layers' YaRN, from rope_scaling, a flat rope_parameters or its nested "compress" entry (transformers' own)."""
    params = r.rope_parameters()
    nested = params.get("main") if isinstance(params.get("main"), dict) else {}
    compress = params.get("compress") if isinstance(params.get("compress"), dict) else None
    r.take("rope_theta", "rope_theta", nested.get("rope_theta", 10000.0))
    r.take("compress_rope_theta", "compress_rope_theta", (compress or {}).get("rope_theta", 160000.0))
    head = r.fields.get("d_head") or r.raw.get("head_dim") or 512
    rope_dim = r.number("qk_rope_head_dim", None, integer=True)
    fraction = r.number("partial_rotary_factor", nested.get("partial_rotary_factor"))
    if fraction is None:
        fraction = 64 / 512 if rope_dim is None else rope_dim / head
    r.fields.update(rope_fraction=fraction, pos_encoding="rope")
    if compress is not None:
        scaled = dict(r.raw, rope_scaling=compress, rope_parameters=None)
        sub = Reader(scaled, r.where)
        sub.fields = r.fields
        yarn_scaling(sub)
    elif r.get("rope_scaling") or "main" not in params:
        yarn_scaling(r)
    if r.fields.get("rope_scaling") == "yarn":  # DeepseekV4Config: the compressed layers' cos and sin unscaled
        if r.fields.get("yarn_attention_factor") not in (None, 1.0):
            raise r.fail(f"YaRN 'attention_factor' {shown(r.fields['yarn_attention_factor'])} is not supported: "
                         "DeepSeek-V4's compressed layers rotate with an attention factor of 1")
        r.fields["yarn_attention_factor"] = 1.0


def _layer_types(r: Reader, n: int) -> list[str]:
    kinds = r.raw.get("layer_types")
    ratios = r.raw.get("compress_ratios")
    if kinds is None and ratios is not None:
        if not isinstance(ratios, list) or not all(x in RATIO_TYPES for x in ratios):
            raise r.fail(f"'compress_ratios' must list 0, 4 or 128 per layer; got {shown(ratios)}")
        kinds = [RATIO_TYPES[x] for x in ratios]
    if kinds is None:  # DeepseekV4Config.__post_init__: two HCA layers, then CSA and HCA alternating
        kinds = ["heavily_compressed_attention"] * min(n, 2) + [
            "compressed_sparse_attention" if i % 2 else "heavily_compressed_attention" for i in range(max(n - 2, 0))]
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in WORDS for k in kinds):
        raise r.fail(f"'layer_types' must list {', '.join(WORDS)}; got {shown(kinds)}")
    if len(kinds) < n:
        raise r.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
    return kinds[:n]  # DeepseekV4Config keeps the first num_hidden_layers


def _attention(r: Reader) -> None:
    n = r.fields["n_layer"]
    r.fields["layer_pattern"] = compact([WORDS[k] for k in _layer_types(r, n)])
    rates = r.raw.get("compress_rates")
    if rates is None:
        rates = {}
    if not isinstance(rates, dict):
        raise r.fail(f"'compress_rates' must be an object; got {shown(rates)}")
    for key, legacy, field, default in (("compressed_sparse_attention", "compress_rate_csa", "csa_ratio", 4),
                                        ("heavily_compressed_attention", "compress_rate_hca", "hca_ratio", 128)):
        value = r.raw.get(legacy, rates.get(key, default))
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise r.fail(f"'compress_rates' {key} must be an integer of at least 2; got {shown(value)}")
        r.fields[field] = value
    for key, field, default in (("q_lora_rank", "attn_q_lora_rank", 1024), ("o_groups", "o_groups", 8),
                                ("o_lora_rank", "o_lora_rank", 1024), ("index_topk", "csa_index_topk", 512),
                                ("index_n_heads", "csa_index_heads", 64),
                                ("index_head_dim", "csa_index_head_dim", 128)):
        r.take(key, field, default)
    r.take("sliding_window", "sliding_window", 128)


def _experts(r: Reader) -> None:
    n = r.fields["n_layer"]
    r.take("moe_intermediate_size", "d_ff", 2048)
    r.take("n_routed_experts", "n_expert", 256, aliases=("num_local_experts",))
    r.take("num_experts_per_tok", "n_expert_active", 6)
    shared = r.number("n_shared_experts", 1, integer=True)
    if shared != 1:
        raise r.fail(f"'n_shared_experts' {shown(shared)} is not supported: transformers builds one shared expert "
                     "of moe_intermediate_size")
    r.fields["shared_expert_d_ff"] = r.fields["d_ff"]
    scoring = r.get("scoring_func", "sqrtsoftplus")
    if scoring not in ("sqrtsoftplus", "softmax", "sigmoid"):
        raise r.fail(f"'scoring_func' {shown(scoring)} is not supported (sqrtsoftplus, softmax or sigmoid)")
    r.fields.update(router_scoring=scoring, router_score_bias=True, router_norm_topk=r.flag("norm_topk_prob", True))
    r.take("routed_scaling_factor", "routed_scaling", 1.5)
    r.take("swiglu_limit", "swiglu_limit", 10.0)
    kinds = r.raw.get("mlp_layer_types")
    if kinds is None:
        hashed = r.number("num_hash_layers", 3, integer=True)
        if hashed is None or hashed < 0:
            raise r.fail(f"'num_hash_layers' must be 0 or more; got {shown(hashed)}")
        kinds = ["hash_moe"] * min(n, hashed) + ["moe"] * max(0, n - hashed)
    if not isinstance(kinds, list) or len(kinds) < n or not all(k in ("hash_moe", "moe") for k in kinds):
        raise r.fail(f"'mlp_layer_types' must list hash_moe or moe for each of the {n} layers; got {shown(kinds)}")
    hashed = next((i for i, k in enumerate(kinds[:n]) if k != "hash_moe"), n)
    if "hash_moe" in kinds[hashed:n]:
        raise r.fail("'mlp_layer_types': hash_moe layers after a moe layer are not supported (the hash-routed "
                     "layers must come first)")
    if hashed:
        r.fields["hash_moe_layers"] = hashed


# DeepSeek's own tensor names inside the attention (what transformers' save_pretrained writes back:
# conversion_mapping.py "deepseek_v4") -> tfcalc's module path (transformers' in-memory names)
_ATTN = {"wq_a.weight": "q_a_proj.weight", "q_norm.weight": "q_a_norm.weight", "wq_b.weight": "q_b_proj.weight",
         "wkv.weight": "kv_proj.weight", "norm.weight": "kv_norm.weight", "wo_a.weight": "o_a_proj.weight",
         "wo_b.weight": "o_b_proj.weight", "attn_sink": "sinks"}
_COMPRESSOR = {"wkv.weight": "kv_proj.weight", "wgate.weight": "gate_proj.weight", "ape": "position_bias",
               "norm.weight": "kv_norm.weight"}


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """DeepSeek's names, as the published checkpoints and transformers' save_pretrained write them (transformers
    5.24 conversion_mapping.py, "deepseek_v4"), and transformers' in-memory names (modeling_deepseek_v4.py,
    tfcalc's module paths alike: tfcalc.model.compressed_attention): the attention, its compressor and indexer,
    the hyper-connections, the routers' correction bias and the hash layers' tid2eid (buffers, loaded), the experts
    and shared expert (w1 gate, w3 up, w2 down); the MTP layer's ``mtp.*`` counted beside."""
    layer, attn = r"layers\.(\d+)\.", r"layers\.(\d+)\.attn\."
    out = [(r".*\.weight_scale_inv", "buffer"), (r"mtp\..*", "mtp"),
           (r"head\.weight", tied_head(arch)), (r"embed\.weight", "tok_emb.weight"),
           (r"hc_head_(fn|base|scale)", "hc_head.hc_{0}"), (r"hc_head\.(hc_fn|hc_base|hc_scale)", "hc_head.{0}"),
           (layer + r"hc_(attn|ffn)_(fn|base|scale)", "blocks.{0}.{1}_hc.{2}"),
           (layer + r"(attn|ffn)_hc\.(fn|base|scale)", "blocks.{0}.{1}_hc.{2}"),
           (layer + r"(attn|ffn)_norm\.weight", "blocks.{0}.{1}_norm.weight")]
    out += [(attn + k.replace(".", r"\."), f"blocks.{{0}}.attn.{v}") for k, v in _ATTN.items()]
    out += [(attn + r"compressor\." + k.replace(".", r"\."), f"blocks.{{0}}.attn.compressor.{v}")
            for k, v in _COMPRESSOR.items()]
    out += [(attn + r"indexer\.compressor\." + k.replace(".", r"\."), f"blocks.{{0}}.attn.compressor.indexer.{v}")
            for k, v in _COMPRESSOR.items()]
    ffn = r"layers\.(\d+)\.(?:ffn|mlp)\."
    out += [(attn + r"indexer\.wq_b\.weight", "blocks.{0}.attn.compressor.indexer.q_b_proj.weight"),
            (attn + r"indexer\.weights_proj\.weight", "blocks.{0}.attn.compressor.indexer.scorer.weights_proj.weight"),
            (layer + r"self_attn\.(.+)", "blocks.{0}.attn.{1}"),
            (ffn + r"gate\.(?:bias|e_score_correction_bias)", "buffer:blocks.{0}.ffn.score_bias"),
            (ffn + r"gate\.tid2eid", "buffer:blocks.{0}.ffn.tid2eid"),
            (ffn + r"gate\.weight", "blocks.{0}.ffn.router.weight"),
            (ffn + r"experts\.(\d+)\.w1\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|gate"),
            (ffn + r"experts\.(\d+)\.w3\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|up"),
            (ffn + r"experts\.(\d+)\.w2\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
            (ffn + r"shared_experts\.w1\.weight", "blocks.{0}.ffn.shared.up.weight|gate"),
            (ffn + r"shared_experts\.w3\.weight", "blocks.{0}.ffn.shared.up.weight|up"),
            (ffn + r"shared_experts\.w2\.weight", "blocks.{0}.ffn.shared.down.weight")]
    return out + moe_names(arch)[2:] + llama_names(arch)
