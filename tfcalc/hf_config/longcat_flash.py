"""LongCat-Flash config.json files (model_type longcat_flash; transformers' configuration_longcat_flash.py and
modeling_longcat_flash.py; Meituan, "LongCat-Flash Technical Report", arXiv 2509.01322).

Each of the ``num_layers`` layers (LongcatFlashDecoderLayer) is two tfcalc blocks: (latent attention, dense FFN +
the shortcut MoE) then (latent attention, dense FFN) -- ``moe_shortcut`` (tfcalc.architecture.block); the two
attentions keep two caches, as transformers' cache holds ``num_hidden_layers`` = 2·num_layers layers. So:

- n_layer = 2·num_layers (``num_hidden_layers``, transformers' derived property, is read where given and must agree);
- the attention is DeepSeek-V3's MLA with the compressed query always on (``q_lora_rank``), rotary pairs
  interleaved, and LongCat's scaled latents (``mla_lora_scale``: LongcatFlashMLA's mla_scale_q_lora and
  mla_scale_kv_lora); ``qk_head_dim`` where given must be qk_nope_head_dim + qk_rope_head_dim; ``head_dim`` is read
  by nothing in transformers ("For CI happiness") and is ignored;
- the dense FFNs are ``ffn_hidden_size`` wide (gated, ``hidden_act``), the experts ``expert_ffn_hidden_size``:
  ``n_routed_experts`` real ones and ``zero_expert_num`` identity ones, ``moe_topk`` per token, a softmax over all of
  them, the correction bias in the choice only, the chosen scores times ``routed_scaling_factor`` and not
  renormalized (LongcatFlashTopkRouter), ``router_bias`` on the router (default false);
- the MTP module (``model.mtp.*``) is stored but built by no transformers class (_keys_to_ignore_on_load_unexpected):
  its tensors are named apart as MTP.

Parameters: transformers 5.24 allocates ``experts.gate_up_proj`` for all n_routed_experts + zero_expert_num experts
(LongcatFlashExperts.__init__) but reads only the first n_routed_experts (its forward sends the rest to
nn.Identity); the rest is never used, and the published checkpoint stores none (a transformers-saved one stores
them as experts.<e>.gate_proj / up_proj for e >= n_routed_experts). tfcalc counts the model that runs -- 560.7B at
the published shapes, the paper's "560B" (abstract) -- and names those stored tensors as no parameter: at full size
transformers' numel is 180.4B (28·256·2·2048·6144) more.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config import deepseek
from tfcalc.hf_config.llama_like import llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def longcat_flash(r: Reader) -> None:
    """LongcatFlashConfig's keys, with its defaults (transformers 5.24) where a key is left out."""
    layers = r.number("num_layers", None, integer=True)
    hidden = r.number("num_hidden_layers", None, integer=True)
    if layers is None and hidden is not None:
        if hidden % 2:
            raise r.fail(f"'num_hidden_layers' {shown(hidden)} must be even: it is 2·num_layers (two attention "
                         "sub-layers to a LongCat layer)")
        layers = hidden // 2
    layers = 28 if layers is None else layers
    if hidden is not None and hidden != 2 * layers:
        raise r.fail(f"'num_hidden_layers' {shown(hidden)} must be 2·num_layers ({2 * layers}): transformers derives "
                     "it so")
    if layers < 1:
        raise r.fail(f"'num_layers' must be a positive integer; got {shown(layers)}")
    r.fields["n_layer"] = 2 * layers
    r.take("hidden_size", "d_model", 6144)
    r.take("num_attention_heads", "n_head", 64)
    r.take("vocab_size", "vocab_size", 131072)
    kv = r.number("num_key_value_heads", None, integer=True)
    if kv is not None and kv != r.fields["n_head"]:
        raise r.fail(f"'num_key_value_heads' {shown(kv)} is not supported: latent attention expands one key and "
                     "value head per query head (num_attention_heads)")
    r.take("max_position_embeddings", "max_seq_len", 131072)
    r.take("rms_norm_eps", "norm_eps", 1e-5)
    r.rope(10000000.0)
    r.activation("hidden_act", "silu")
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.take("attention_bias", "attn_bias", False)
    r.dtype()
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    ffn_bias=False, rope_interleave=True, mla_lora_scale=True, moe_shortcut=True)
    _latent(r)
    _experts(r)
    deepseek.yarn_scaling(r)
    r.causal_or_base("LongcatFlash")


def _latent(r: Reader) -> None:
    if "q_lora_rank" in r.raw and r.raw["q_lora_rank"] is None:
        raise r.fail("'q_lora_rank' null is not supported: LongcatFlashMLA always compresses the query")
    r.take("kv_lora_rank", "kv_lora_rank", 512)
    r.take("q_lora_rank", "q_lora_rank", 1536)
    r.take("qk_nope_head_dim", "qk_nope_head_dim", 128)
    r.take("qk_rope_head_dim", "qk_rope_head_dim", 64)
    r.take("v_head_dim", "v_head_dim", 128)
    qk = r.number("qk_head_dim", None, integer=True)
    want = (r.fields["qk_nope_head_dim"] or 0) + (r.fields["qk_rope_head_dim"] or 0)
    if qk is not None and qk != want:
        raise r.fail(f"'qk_head_dim' {shown(qk)} is not qk_nope_head_dim + qk_rope_head_dim ({want}): the query's "
                     "heads are built that wide (DeepseekV32Attention.q_b_proj)")


def _experts(r: Reader) -> None:
    r.take("ffn_hidden_size", "dense_d_ff", 12288, aliases=("intermediate_size",))
    r.take("expert_ffn_hidden_size", "d_ff", 2048, aliases=("moe_intermediate_size",))
    r.take("n_routed_experts", "n_expert", 512, aliases=("num_local_experts",))
    k = r.take("moe_topk", "n_expert_active", 12, aliases=("num_experts_per_tok",))
    if isinstance(k, int) and isinstance(r.fields["n_expert"], int) and k > r.fields["n_expert"]:
        raise r.fail(f"'moe_topk' {shown(k)} is more than 'n_routed_experts' ({r.fields['n_expert']}): not built "
                     "(tfcalc counts the upper bound, every pick on a real expert)")
    zero = r.number("zero_expert_num", 256, integer=True)
    if zero is not None and zero < 0:
        raise r.fail(f"'zero_expert_num' must be 0 or more; got {shown(zero)}")
    r.fields["zero_experts"] = zero or None  # 0: none (LongcatFlashTopkRouter: zero_expert_num or 0)
    kind = r.get("zero_expert_type", "identity")
    if zero and kind != "identity":
        raise r.fail(f"'zero_expert_type' {shown(kind)} is not supported: transformers' zero experts are identities")
    r.fields["router_bias"] = r.flag("router_bias", False)
    r.fields["routed_scaling"] = r.positive("routed_scaling_factor", 6.0)
    r.fields.update(router_scoring="softmax", router_score_bias=True, router_norm_topk=False)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_longcat_flash.py's names, layer i's sub-layer s being tfcalc's block 2i + s (``{0:2n+1}``: see
    tfcalc.checkpoint.names); its experts one by one (the published checkpoint, and what save_pretrained writes),
    the zero experts' unused gate and up (see the module docstring) and the MTP module named apart."""
    layer, first = r"layers\.(\d+)\.", _first_moe(arch)
    E, Z = (first.n_expert, first.n_zero) if first is not None else (0, 0)
    zero = "|".join(str(e) for e in range(E, E + Z)) or "x"
    rules: list[Rule] = [
        (r"mtp\..*", "mtp"),
        (layer + rf"mlp\.experts\.(?:{zero})\.(?:gate|up)_proj\.weight", "buffer"),
        (layer + r"mlp\.router\.classifier\.weight", "blocks.{0:2n}.ffn.router.weight"),
        (layer + r"mlp\.router\.classifier\.bias", "blocks.{0:2n}.ffn.router.bias"),
        (layer + r"mlp\.router\.e_score_correction_bias", "buffer:blocks.{0:2n}.ffn.score_bias"),
        (layer + r"mlp\.experts\.(\d+)\.(gate|up)_proj\.weight", "blocks.{0:2n}.ffn.experts.up.weight@{1}|{2}"),
        (layer + r"mlp\.experts\.(\d+)\.down_proj\.weight", "blocks.{0:2n}.ffn.experts.down.weight@{1}"),
        (layer + r"mlps\.0\.(gate|up)_proj\.weight", "blocks.{0:2n}.ffn.shared.up.weight|{1}"),
        (layer + r"mlps\.0\.down_proj\.weight", "blocks.{0:2n}.ffn.shared.down.weight"),
        (layer + r"mlps\.1\.(gate|up)_proj\.weight", "blocks.{0:2n+1}.ffn.up.weight|{1}"),
        (layer + r"mlps\.1\.down_proj\.weight", "blocks.{0:2n+1}.ffn.down.weight"),
    ]
    attn = {"q_a_proj": "q_a", "q_a_layernorm": "q_a_norm", "q_b_proj": "q_b", "kv_a_proj_with_mqa": "kv_a",
            "kv_a_layernorm": "kv_a_norm", "kv_b_proj": "kv_b", "o_proj": "out"}
    for s in (0, 1):
        rules += [(layer + rf"input_layernorm\.{s}\.weight", f"blocks.{{0:2n+{s}}}.attn_norm.weight"),
                  (layer + rf"post_attention_layernorm\.{s}\.weight", f"blocks.{{0:2n+{s}}}.ffn_norm.weight")]
        rules += [(layer + rf"self_attn\.{s}\.{name}\.(weight|bias)", f"blocks.{{0:2n+{s}}}.attn.{ours}.{{1}}")
                  for name, ours in attn.items()]
    return rules + llama_names(arch)


def _first_moe(arch: Architecture):
    """The first mixture of experts of the stack (every even block has the same one)."""
    return next((b.ffn for b, _ in arch.output.kinds() if b.is_moe), None)
