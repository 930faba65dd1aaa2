"""Kimi Linear config.json files (model_type kimi_linear; Kimi Team, "Kimi Linear", arXiv 2510.26692;
transformers 5.24's configuration_kimi_linear.py and modeling_kimi_linear.py): Kimi Delta Attention layers
(tfcalc.architecture.kimi_delta, layer_pattern's ``kda``) beside multi-head latent attention without RoPE
(``nope`` layers of latent attention: KimiLinearAttention rotates nothing, its qk_rope_head_dim channels are one
key shared by the heads), and DeepSeek-V3's mixture of experts (sigmoid router with the correction bias, shared
experts, the first layers dense).

Keys, with KimiLinearConfig's defaults and its attribute_map's other names (both read): hidden_size 2304,
num_hidden_layers 27, num_attention_heads 32, num_key_value_heads (the heads: latent attention), vocab_size
163840, intermediate_size 9216 (the dense layers'), moe_intermediate_size 1024, num_experts / num_local_experts
256, num_experts_per_token / num_experts_per_tok 8, num_shared_experts / n_shared_experts 1, moe_renormalize /
norm_topk_prob true, num_expert_group / n_group 1, topk_group 1, routed_scaling_factor 2.446, kv_lora_rank 512,
q_lora_rank null, qk_nope_head_dim 128, qk_rope_head_dim 64, v_head_dim 128, rms_norm_eps 1e-5 (the KDA's gated
norm's too), model_max_length / max_position_embeddings 1048576, attention_bias, tie_word_embeddings, hidden_act
(SiLU only: the KDA convolution's). The KDA's sizes: linear_attn_config's num_heads, head_dim and
short_conv_kernel_size (the released files) or linear_num_heads, linear_head_dim, linear_conv_kernel_dim
(transformers' own), 32, 128, 4. Which layers: ``layer_types`` (linear_attention, full_attention), else
linear_attn_config's kda_layers and full_attn_layers (numbered from 1), else every 4th from layer 4 full (0-based
i > 0 with i % 4 == 0, KimiLinearConfig.__post_init__). The experts' layers: ``mlp_layer_types`` (dense,
sparse), else the first first_k_dense_replace (default 1) dense.

Refused by name: mla_use_nope false and moe_router_activation_func other than sigmoid (transformers builds
neither), a layer list that is not the layers'.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.deepseek import checkpoint_names as deepseek_names
from tfcalc.hf_config.layer_pattern import compact
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

KINDS = {"linear_attention": "kda", "full_attention": "nope"}
# KimiLinearConfig's defaults of the experts' keys (bailing_hybrid reads the same keys with its own)
MOE_DEFAULTS = dict(first_k_dense_replace=1, intermediate_size=9216, moe_intermediate_size=1024, num_experts=256,
                    num_experts_per_token=8, num_shared_experts=1, num_expert_group=1, topk_group=1,
                    routed_scaling_factor=2.446)


def kimi_linear(r: Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"))
    r.take("vocab_size", "vocab_size", 163840)
    one_kv_head_per_query(r)
    if r.get("mla_use_nope", True) is not True:
        raise r.fail("'mla_use_nope' false is not supported: transformers' KimiLinearAttention rotates nothing")
    r.take("model_max_length", "max_seq_len", 1048576, aliases=("max_position_embeddings",))
    r.take("rms_norm_eps", "norm_eps", 1e-5)
    r.rope(10000.0)  # read, never applied: every attention layer is a nope layer of the pattern
    silu_block(r)
    latent_sizes(r)
    _kda(r)
    experts(r)
    r.causal_or_base("KimiLinear")


def one_kv_head_per_query(r: Reader) -> None:
    """Latent attention expands one K and V head per query head: another num_key_value_heads is refused (Kimi
    Linear's and Ling 3's)."""
    kv = r.number("num_key_value_heads", None, integer=True)
    if kv is not None and kv != r.raw["num_attention_heads"]:
        raise r.fail(f"'num_key_value_heads' {shown(kv)} is not supported: latent attention expands one key and "
                     "value head per query head (num_attention_heads)")


def silu_block(r: Reader) -> None:
    """The block both KDA families build: SiLU only (KDA's convolution's activation), RMSNorm before each
    sub-layer and at the end, gated bias-free FFNs, untied embeddings."""
    r.activation("hidden_act", "silu")
    if r.fields["activation"] != "silu":
        raise r.fail(f"'hidden_act' {shown(r.raw.get('hidden_act'))}: tfcalc builds Kimi Delta Attention with SiLU "
                     "only (its convolution's activation)")
    # KimiLinearForCausalLM and BailingHybridForCausalLM tie nothing (_tied_weights_keys = {}): the head is its
    # own weight whatever tie_word_embeddings says (read, held to true or false)
    r.flag("tie_word_embeddings", False)
    r.fields["tie_embeddings"] = False
    r.take("attention_bias", "attn_bias", False)
    r.dtype()
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    ffn_bias=False)


def latent_sizes(r: Reader) -> None:
    """The latent attention's ranks and head widths, with KimiLinearConfig's and BailingHybridConfig's defaults."""
    r.take("kv_lora_rank", "kv_lora_rank", 512)
    r.take("q_lora_rank", "q_lora_rank", None)
    r.take("qk_nope_head_dim", "qk_nope_head_dim", 128)
    r.take("qk_rope_head_dim", "qk_rope_head_dim", 64)
    r.take("v_head_dim", "v_head_dim", 128)


def _kda(r: Reader) -> None:
    """The KDA's sizes and which layers are KDA, which latent attention (module docstring)."""
    sub = r.raw.get("linear_attn_config")
    if sub is not None and not isinstance(sub, dict):
        raise r.fail(f"'linear_attn_config' must be an object; got {shown(sub)}")
    sub = Reader({"model_type": r.model_type, **(sub or {})}, f"{r.where}: 'linear_attn_config'")
    for key, field, flat_key, default in (("num_heads", "kda_heads", "linear_num_heads", 32),
                                          ("head_dim", "kda_head_dim", "linear_head_dim", 128),
                                          ("short_conv_kernel_size", "kda_conv_kernel", "linear_conv_kernel_dim", 4)):
        value = sub.get(key, r.get(flat_key, default))
        where, name = (sub, key) if key in sub.raw else (r, flat_key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise where.fail(f"'{name}' must be a positive integer; got {shown(value)}")
        r.fields[field] = value
    r.fields["layer_pattern"] = _pattern(r, sub)


def _pattern(r: Reader, sub: Reader) -> str:
    n = r.fields["n_layer"]
    kinds = r.raw.get("layer_types")
    if kinds is None and "full_attn_layers" in sub.raw and "kda_layers" in sub.raw:
        full, linear = sub.raw["full_attn_layers"], sub.raw["kda_layers"]
        numbers = [*full, *linear] if isinstance(full, list) and isinstance(linear, list) else []
        if len(numbers) != n or any(not isinstance(i, int) or isinstance(i, bool) for i in numbers) \
                or sorted(numbers) != list(range(1, n + 1)):
            raise sub.fail(f"'full_attn_layers' and 'kda_layers' must number each of the {n} layers once, from 1; "
                           f"got {shown(full)} and {shown(linear)}")
        full = set(full)
        kinds = ["full_attention" if i + 1 in full else "linear_attention" for i in range(n)]
    if kinds is None and n <= 4096:  # KimiLinearConfig's default: layers 4, 8, ... (from 0) full
        kinds = ["full_attention" if i and i % 4 == 0 else "linear_attention" for i in range(n)]
    elif kinds is None:  # the same written as a pattern, no list of n (a file may say 2**40 layers)
        groups, rest = divmod(n - 1, 4)
        return ", ".join(p for p in ("kda", f"(kda*3, nope)*{groups}" if groups else "",
                                     f"kda*{rest}" if rest else "") if p)
    if not isinstance(kinds, list) or not all(isinstance(k, str) and k in KINDS for k in kinds):
        raise r.fail(f"'layer_types' must be a list of {', '.join(KINDS)}; got {shown(kinds)}")
    if len(kinds) != n:
        raise r.fail(f"'layer_types' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
    return compact([KINDS[k] for k in kinds])


def experts(r: Reader, defaults: dict = MOE_DEFAULTS) -> None:
    """DeepSeek-V3's mixture of experts (KimiLinearMoE, KimiLinearTopkRouter) in the sparse layers; ``defaults``
    the config class's (MOE_DEFAULTS: Kimi Linear's)."""
    func = r.get("moe_router_activation_func", "sigmoid")
    if func != "sigmoid":
        raise r.fail(f"'moe_router_activation_func' {shown(func)} is not supported: KimiLinearTopkRouter scores "
                     "with a sigmoid")
    n = r.fields["n_layer"]
    mlp = r.raw.get("mlp_layer_types")
    if mlp is None:  # no list of n: the first first_k_dense_replace dense
        first = r.number("first_k_dense_replace", defaults["first_k_dense_replace"], integer=True)
        if first is None or first < 0:
            raise r.fail(f"'first_k_dense_replace' must be 0 or more; got {shown(first)}")
        first = min(first, n)
    elif not isinstance(mlp, list) or len(mlp) != n or not all(isinstance(k, str) and k in ("dense", "sparse")
                                                                for k in mlp):
        raise r.fail(f"'mlp_layer_types' must list dense or sparse for each of the {n} layers; got {shown(mlp)}")
    else:
        first = mlp.index("sparse") if "sparse" in mlp else n
        if "dense" in mlp[first:]:
            raise r.fail(f"'mlp_layer_types' {shown(mlp)} is not supported: the dense layers first, then the sparse "
                         "ones")
    if first == n:  # every layer dense
        r.take("intermediate_size", "d_ff", defaults["intermediate_size"])
        return
    r.take("moe_intermediate_size", "d_ff", defaults["moe_intermediate_size"])
    r.take("num_experts", "n_expert", defaults["num_experts"], aliases=("num_local_experts",))
    r.take("num_experts_per_token", "n_expert_active", defaults["num_experts_per_token"],
           aliases=("num_experts_per_tok",))
    shared = r.number("num_shared_experts", r.get("n_shared_experts", defaults["num_shared_experts"]),
                      integer=True) or 0
    if shared:
        r.fields["shared_expert_d_ff"] = shared * r.fields["d_ff"]
    if first:
        r.fields["first_dense_layers"] = first
        r.take("intermediate_size", "dense_d_ff", defaults["intermediate_size"])
    r.fields.update(router_scoring="sigmoid", router_score_bias=True,
                    router_norm_topk=r.flag("moe_renormalize", True, aliases=("norm_topk_prob",)))
    r.take("num_expert_group", "router_groups", defaults["num_expert_group"], aliases=("n_group",))
    r.take("topk_group", "router_topk_groups", defaults["topk_group"])
    r.take("routed_scaling_factor", "routed_scaling", defaults["routed_scaling_factor"])


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Kimi Linear's names as its checkpoints store them (and save_pretrained writes them back:
    conversion_mapping.py, kimi_linear) or as transformers' modules name them: the KDA's forget gate under
    self_attn (or self_attn.forget_gate), its convolution as three (q/k/v_conv1d); the mixture of experts under
    block_sparse_moe (or mlp), a dense layer's MLP too; DeepSeek-V3's names for the latent attention, the
    router, the experts (w1, w2, w3), and Llama's others (q_proj and o_proj: the KDA's q and out as latent
    attention's)."""
    attn, moe = r"layers\.(\d+)\.self_attn\.", r"layers\.(\d+)\.(?:block_sparse_moe|mlp)\."
    return [
        (attn + r"([kv])_proj\.weight", "blocks.{0}.attn.{1}.weight"),
        (attn + r"([qkv])_conv1d\.weight", "blocks.{0}.attn.{1}_conv1d.weight"),
        (attn + r"(?:forget_gate\.)?(dt_bias|A_log)", "blocks.{0}.attn.{1}"),
        (attn + r"(?:forget_gate\.)?(f_a_proj|f_b_proj)\.weight", "blocks.{0}.attn.{1}.weight"),
        (attn + r"(b_proj|g_a_proj|g_b_proj|o_norm)\.weight", "blocks.{0}.attn.{1}.weight"),
        (moe + r"gate\.e_score_correction_bias", "buffer:blocks.{0}.ffn.score_bias"),
        (moe + r"shared_experts\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (moe + r"shared_experts\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
        (r"layers\.(\d+)\.block_sparse_moe\.(gate|up)_proj\.weight", "blocks.{0}.ffn.up.weight|{1}"),
        (r"layers\.(\d+)\.block_sparse_moe\.down_proj\.weight", "blocks.{0}.ffn.down.weight"),
    ] + deepseek_names(arch, model_type)
