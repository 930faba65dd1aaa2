"""Zamba2 config.json files (Zyphra; modeling_zamba2.py, configuration_zamba2.py): Mamba2 layers, and per
``layers_block_type`` some "hybrid" layers that first run one of ``num_mem_blocks`` shared transformer blocks on
[h | embeddings], with each use's LoRA adapters and Linear, then their own Mamba2 layer (tfcalc's ``hybrid_pattern``
M and H; tfcalc.architecture.zamba2).

- Mamba2 (Zamba2MambaMixer): n_mamba_heads, head width mamba_expand·hidden_size / heads, mamba_ngroups,
  mamba_d_state, mamba_d_conv, chunk_size, add_bias_linear (in_proj, out_proj); the convolution's bias always
  (transformers builds it whatever use_conv_bias says); dt at least time_step_min after softplus (its scan's
  dt_limit; transformers' decode step does not clamp); the gated norm's eps 1e-5, fixed there;
- the shared block: num_attention_heads heads of 2·hidden_size / heads over [h | e], scores scaled by
  (head_dim / 2)^-1/2, RoPE only with use_mem_rope; a gated MLP of intermediate_size (default 4·hidden_size),
  hidden_act; adapters of adapter_rank on gate_up always, on Q, K and V with use_shared_attention_adapter.

Refused in one line: use_long_context (its rescaled RoPE is not built), an rms_norm_eps other than 1e-5 (the Mamba2
norms' eps is fixed at 1e-5 there while tfcalc's reads rms_norm_eps), layer kinds other than Mamba2 and hybrid.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.mamba2 import MIXER
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

LETTERS = {"mamba": "M", "linear_attention": "M", "m": "M", "hybrid": "H", "g": "H"}
DEFAULT = ["M"] + (["M"] * 5 + ["H"]) * 7 + ["M"] * 4 + ["H"] + ["M"] * 3 + ["H"] + ["M"] * 2  # Zamba2Config's


def _pattern(r: Reader) -> str:
    kinds = r.get("layers_block_type", r.get("layer_types"))
    if kinds is None:
        return "".join(DEFAULT)
    if not isinstance(kinds, list) or not kinds or any(not isinstance(k, str) or k not in LETTERS for k in kinds):
        raise r.fail(f"'layers_block_type' must list layer kinds of mamba, hybrid; got {shown(kinds)}")
    return "".join(LETTERS[k] for k in kinds)


def _mamba(r: Reader, d: int) -> None:
    expand, heads = r.size("mamba_expand", 2), r.size("n_mamba_heads", 8)
    if (expand * d) % heads:
        raise r.fail(f"'n_mamba_heads' ({heads}) must divide mamba_expand·hidden_size ({expand * d})")
    r.fields.update(ssm_heads=heads, ssm_head_dim=expand * d // heads, ssm_state_size=r.size("mamba_d_state", 64),
                    ssm_groups=r.size("mamba_ngroups", 1), ssm_conv_kernel=r.size("mamba_d_conv", 4),
                    ssm_chunk_size=r.size("chunk_size", 256), ssm_conv_bias=True, ssm_gate_norm="gated")
    if heads % r.fields["ssm_groups"]:
        raise r.fail(f"'n_mamba_heads' ({heads}) must be a multiple of 'mamba_ngroups' ({r.fields['ssm_groups']})")
    floor = r.positive("time_step_min", 0.001)
    r.fields["ssm_dt_min"] = float(floor)


def zamba2(r: Reader) -> None:
    r.required(("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    d = r.fields["d_model"]
    pattern = _pattern(r)
    n = r.get("num_hidden_layers")
    if n is not None and n != len(pattern):
        raise r.fail(f"'layers_block_type' lists {len(pattern)} layers; 'num_hidden_layers' is {shown(n)}")
    r.fields.update(n_layer=len(pattern), hybrid_pattern=pattern)
    _mamba(r, d)
    bias = r.flag("add_bias_linear", False)
    heads = r.size("num_attention_heads", 32)
    if (2 * d) % heads:
        raise r.fail(f"'num_attention_heads' ({heads}) must divide 2·hidden_size ({2 * d}): the shared attention's "
                     "heads share [h | embeddings]")
    kv = r.size("num_key_value_heads", heads)
    adapters = r.flag("use_shared_attention_adapter", False)
    if adapters and kv != heads:
        raise r.fail("'use_shared_attention_adapter' adds 2·hidden_size to K and V: num_key_value_heads must equal "
                     "num_attention_heads (transformers' adapters fail otherwise)")
    head_dim = 2 * d // heads
    r.fields.update(n_head=heads, n_kv_head=kv, d_head=head_dim, attn_scale=(head_dim / 2) ** -0.5, attn_bias=False,
                    ssm_bias=bias, ffn_bias=bias, shared_blocks=r.size("num_mem_blocks", 1),
                    shared_adapter_rank=r.size("adapter_rank", 128), shared_attn_adapters=adapters)
    if r.flag("use_long_context", False):
        raise r.fail("'use_long_context' rescales the shared attention's RoPE, which tfcalc does not build")
    if r.flag("use_mem_rope", False):
        r.rope(10000.0)
    else:
        r.fields["pos_encoding"] = "none"
    ff = r.get("intermediate_size")
    r.fields["d_ff"] = 4 * d if ff is None else r.size("intermediate_size", 4 * d)
    eps = r.positive("rms_norm_eps", 1e-5)
    if eps != 1e-5:
        raise r.fail(f"'rms_norm_eps' {shown(eps)}: Zamba2's Mamba2 norms keep eps 1e-5 whatever it says, tfcalc's "
                     "read rms_norm_eps; only 1e-5 is built")
    r.take("max_position_embeddings", "max_seq_len", 4096)
    tied = r.take("tie_word_embeddings", "tie_embeddings", True)
    # transformers 5.24 ties the shared blocks only where it ties the embeddings (PreTrainedModel.
    # get_expanded_tied_weights_keys): otherwise every hybrid layer holds a copy of its own
    r.fields["shared_untied"] = not tied
    r.activation("hidden_act", "gelu")
    r.dtype()
    r.fields.update(norm="rmsnorm", norm_eps=1e-5, norm_bias=False, norm_placement="pre", final_norm=True,
                    gated_ffn=True)
    r.causal_or_base("Zamba2")


# ---- its checkpoint names (tfcalc.hf_config.names): modeling_zamba2.py, after ``model.`` ----

def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """A Mamba2 layer's ``mamba`` and ``input_layernorm``; a hybrid layer's ``mamba_decoder`` (its Mamba2 and norm:
    tfcalc's ``attn.ssm`` and ``attn.ssm_norm``), ``linear`` and ``shared_transformer`` (the shared block, stored
    under the first layer that uses it; each use's adapters in that block's lists, use j at hybrid layer j)."""
    layer = r"layers\.(\d+)\."
    hybrid = [i for i, b in enumerate(arch.output.layers()) if getattr(b.mixer, "reads_embeddings", False)]
    block = layer + r"shared_transformer\."
    out = [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"lm_head\.weight", tied_head(arch)),
        (r"final_layernorm\.weight", "final_norm.weight"),
        (r"layers\.(\d+)\.mamba_decoder" + MIXER.replace(r"\.mixer\.", r"\.mamba\."), "blocks.{0}.attn.ssm.{1}"),
        (layer + r"mamba_decoder\.mamba\.norm\.weight", "blocks.{0}.attn.ssm.gate_norm.weight"),
        (layer + r"mamba_decoder\.input_layernorm\.weight", "blocks.{0}.attn.ssm_norm.weight"),
        (layer + r"linear\.weight", "blocks.{0}.attn.linear.weight"),
        (block + r"input_layernorm\.weight", "blocks.{0}.attn.shared.in_norm.weight"),
        (block + r"pre_ff_layernorm\.weight", "blocks.{0}.attn.shared.ff_norm.weight"),
        (block + r"self_attn\.([qkv])_proj\.weight", "blocks.{0}.attn.shared.attn.qkv.weight|{1}"),
        (block + r"self_attn\.o_proj\.weight", "blocks.{0}.attn.shared.attn.out.weight"),
        (block + r"feed_forward\.gate_up_proj\.(weight|bias)", "blocks.{0}.attn.shared.ffn.up.{1}"),
        (block + r"feed_forward\.down_proj\.(weight|bias)", "blocks.{0}.attn.shared.ffn.down.{1}"),
        (r"layers\.(\d+)" + MIXER.replace(r"\.mixer\.", r"\.mamba\."), "blocks.{0}.attn.{1}"),
        (layer + r"mamba\.norm\.weight", "blocks.{0}.attn.gate_norm.weight"),
        (layer + r"input_layernorm\.weight", "blocks.{0}.attn_norm.weight"),
    ]
    untied = any(getattr(arch.output.layer(i).mixer, "spare_adapters", 0) for i in hybrid)
    blocks = max((arch.output.layer(i).mixer.shared_id for i in hybrid), default=0) + 1
    gate_up, qkv = r"feed_forward\.gate_up_proj_adapter_list\.%d\.([01])\.weight", \
        r"self_attn\.linear_([qkv])_adapter_list\.%d\.([01])\.weight"
    for j, i in enumerate(hybrid):  # use j's adapters, held in its block's lists at index j
        if not untied:
            out += [(block + gate_up % j, f"blocks.{i}.attn.gate_up_adapter.{{1}}.weight"),
                    (block + qkv % j, f"blocks.{i}.attn.{{1}}_adapter.{{2}}.weight")]
            continue
        others = [k for k in range(j % blocks, len(hybrid), blocks) if k != j]  # this copy's spare sets, in order
        here = rf"layers\.{i}\.shared_transformer\."
        out += [(here + gate_up % j, f"blocks.{i}.attn.gate_up_adapter.{{0}}.weight"),
                (here + qkv % j, f"blocks.{i}.attn.{{0}}_adapter.{{1}}.weight")]
        for n, k in enumerate(others):
            out += [(here + gate_up % k, f"blocks.{i}.attn.spare_adapters.{n}.gate_up.{{0}}.weight"),
                    (here + qkv % k, f"blocks.{i}.attn.spare_adapters.{n}.{{0}}.{{1}}.weight")]
    return out
