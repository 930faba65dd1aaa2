"""Jamba config.json files (AI21; modeling_jamba.py, configuration_jamba.py): every layer a mixer then an FFN, each
behind its RMSNorm (input_layernorm, pre_ff_layernorm). The mixer is attention on the layers i with
i % attn_layer_period == attn_layer_offset (GQA, no positions: Jamba's attention has no RoPE, and no biases), a
Mamba-1 mixer on the others (tfcalc.architecture.mamba1: the inner width mamba_expand·hidden_size, mamba_d_state,
mamba_d_conv, mamba_dt_rank ("auto": ceil(hidden_size / 16)), mamba_conv_bias, mamba_proj_bias, and RMSNorms with
weights on dt, B and C, eps rms_norm_eps: JambaMambaMixer's dt_layernorm, b_layernorm, c_layernorm). The FFN is
num_experts SwiGLU experts of intermediate_size, top num_experts_per_tok of a softmax left unnormalized
(JambaTopKRouter), on the layers i with i % expert_layer_period == expert_layer_offset, and a SwiGLU MLP of
intermediate_size on the others (every layer where num_experts is 1). transformers refuses an offset not below its
period (JambaConfig.validate_architecture), and so does tfcalc. ``sliding_window`` and ``mamba_inner_layernorms``,
which older files carry, change nothing transformers 5.24 builds; hidden_act is the FFN's and the Mamba mixer's
activation (SiLU only: transformers' torch path of the mixer is built for it).
"""

from __future__ import annotations

import math

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.layer_pattern import compact
from tfcalc.hf_config.llama_like import llama_names
from tfcalc.hf_config.mamba import mamba1_mixer
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def _period(r: Reader, period: str, offset: str, defaults: tuple[int, int]) -> tuple[int, int]:
    p, o = r.size(period, defaults[0]), r.number(offset, defaults[1], integer=True)
    if o is None or o < 0 or o >= p:
        raise r.fail(f"'{offset}' ({shown(o)}) must be 0 or more and below '{period}' ({p}), as JambaConfig requires")
    return p, o


def jamba(r: Reader) -> None:
    r.required(("hidden_size", "d_model"), ("vocab_size", "vocab_size"), ("intermediate_size", "d_ff"))
    n = r.size("num_hidden_layers", 32)
    r.fields["n_layer"] = n
    r.per_layer_list("its attention and Mamba layers")
    r.take("num_attention_heads", "n_head", 32)
    r.take("num_key_value_heads", "n_kv_head", 8)
    r.take("head_dim", "d_head")  # JambaAttention reads it where the file gives one, else hidden / heads
    r.take("max_position_embeddings", "max_seq_len", 262144)
    r.take("rms_norm_eps", "norm_eps", 1e-6)
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.activation("hidden_act", "silu")
    if r.get("hidden_act", "silu") != "silu":
        raise r.fail(f"'hidden_act' {shown(r.get('hidden_act'))} is not built: it is the Mamba mixer's activation "
                     "too, and transformers' torch path of the mixer applies SiLU")
    r.dtype()
    attn_period, attn_offset = _period(r, "attn_layer_period", "attn_layer_offset", (8, 4))
    kinds = ["full" if i % attn_period == attn_offset else "mamba_one" for i in range(n)]
    d = r.fields["d_model"]
    rank = r.get("mamba_dt_rank", "auto")
    if rank == "auto":
        rank = math.ceil(d / 16)
    elif isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise r.fail(f"'mamba_dt_rank' must be \"auto\" or a positive integer; got {shown(rank)}")
    r.fields.update(layer_pattern=compact(kinds), pos_encoding="none", ssm_inner=r.size("mamba_expand", 2) * d,
                    ssm_dt_rank=rank, ssm_state_size=r.size("mamba_d_state", 16),
                    ssm_conv_kernel=r.size("mamba_d_conv", 4),
                    ssm_conv_bias=r.flag("mamba_conv_bias", True), ssm_bias=r.flag("mamba_proj_bias", False),
                    ssm_bcdt_norm="weighted", ssm_bcdt_norm_eps=r.fields["norm_eps"], ssm_state_dtype="fp32")
    experts = r.size("num_experts", 16)
    expert_period, expert_offset = _period(r, "expert_layer_period", "expert_layer_offset", (2, 1))
    if experts > 1 and expert_offset < n:  # JambaSparseMoeBlock on its layers (none where the offset is past the
        # last layer: every layer a JambaMLP), JambaMLP on the others
        r.fields.update(n_expert=experts, router_norm_topk=False)
        r.take("num_experts_per_tok", "n_expert_active", 2)
        if expert_offset == expert_period - 1:
            r.fields["moe_every"] = expert_period
        else:
            r.fields["dense_layers"] = tuple(i for i in range(n) if i % expert_period != expert_offset)
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    attn_bias=False, ffn_bias=False)
    r.causal_or_base("Jamba")


# ---- its checkpoint names (tfcalc.hf_config.names): modeling_jamba.py, after ``model.`` ----

def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's attention names, the Mamba-1 mixer under ``mamba``, the FFN under ``feed_forward`` (the MLP's
    gate/up/down, the router, and the experts one by one -- as transformers' save_pretrained writes them -- or
    fused, gate_up_proj and down_proj), ``pre_ff_layernorm`` the FFN's norm, ``final_layernorm`` the last."""
    ffn = r"layers\.(\d+)\.feed_forward"
    return llama_names(arch, [
        *mamba1_mixer(r"layers\.(\d+)", "mamba"),
        (r"layers\.(\d+)\.pre_ff_layernorm\.weight", "blocks.{0}.ffn_norm.weight"),
        (r"final_layernorm\.weight", "final_norm.weight"),
        (ffn + r"\.(gate|up)_proj\.weight", "blocks.{0}.ffn.up.weight|{1}"),
        (ffn + r"\.down_proj\.weight", "blocks.{0}.ffn.down.weight"),
        (ffn + r"\.router\.weight", "blocks.{0}.ffn.router.weight"),
        (ffn + r"\.experts\.(\d+)\.(gate|up)_proj\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|{2}"),
        (ffn + r"\.experts\.(\d+)\.down_proj\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
        (ffn + r"\.experts\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (ffn + r"\.experts\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
    ])
