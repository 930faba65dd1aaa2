"""gpt-oss config.json files (OpenAI, arXiv 2508.10925; modeling_gpt_oss.py), with the defaults of
configuration_gpt_oss.py: biases on Q/K/V/O (attention_bias), one sink logit per head, sliding-window layers (128)
alternating with full ones (layer_types), a router with a bias choosing the top-k of num_local_experts (softmax over
the k chosen logits), experts with biases and the clamped SwiGLU (swiglu_limit, swiglu_alpha).
``quantization_config`` with quant_method mxfp4 stores the experts' weights as MXFP4 (``expert_format``);
modules_to_not_convert names the modules kept in the checkpoint's dtype, which must not include the experts.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def gpt_oss(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000.0, head_dim=64,
                        n_kv_head=8))
    r.take("num_local_experts", "n_expert", 128, aliases=("num_experts",))
    r.take("num_experts_per_tok", "n_expert_active", 4, aliases=("experts_per_token",))
    bias = r.flag("attention_bias", True)
    r.fields.update(attn_bias=bias, attn_out_bias=bias, ffn_bias=True, router_bias=True, attn_sinks=True)
    r.take("swiglu_limit", "swiglu_limit", 7.0)
    r.take("swiglu_alpha", "swiglu_alpha", 1.702)
    r.raw.setdefault("sliding_window", 128)
    if r.raw.get("layer_types") is None:  # GptOssConfig's default: layers 0, 2, 4, ... windowed
        r.every_kth_full(2)
    else:
        r.windows()
    _expert_format(r)
    r.causal_or_base("GptOss")


def _expert_format(r: Reader) -> None:
    """quantization_config: mxfp4 experts (the released gpt-oss checkpoints), or none."""
    quant = r.raw.get("quantization_config")
    if quant is None:
        return
    method = quant.get("quant_method") if isinstance(quant, dict) else None
    if method != "mxfp4":
        raise r.fail(f"'quantization_config' quant_method {shown(method)} is not supported: tfcalc reads mxfp4 "
                     "experts only")
    kept = quant.get("modules_to_not_convert") or []
    if not isinstance(kept, list) or not all(isinstance(m, str) for m in kept):
        raise r.fail(f"'quantization_config' modules_to_not_convert must be a list of names; got {shown(kept)}")
    if any("experts" in m or m.endswith("mlp") for m in kept):
        raise r.fail("'quantization_config' keeps the experts unquantized: tfcalc reads mxfp4 for every expert")
    r.fields["expert_format"] = "mxfp4"


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_gpt_oss.py: Llama's names, sinks, a router with a bias, and grouped experts stored (in, out):
    gate_up_proj (E, d, 2f) with gate and up columns interleaved [g0 u0 g1 u1 ...], its bias (E, 2f) likewise,
    down_proj (E, f, d) (transforms ``oss_gate_up``, ``oss_bias``, ``mT``). The released checkpoints store the
    expert weights as MXFP4 (``*_blocks``: two 4-bit values per byte, uint8 (E, rows, cols/32, 16); ``*_scales``:
    one 8-bit scale per 32 values), rows in the out dimension."""
    experts = r"layers\.(\d+)\.mlp\.experts\."
    return [rule for rule in llama_names(arch) if "experts" not in rule[1]] + [
        (r"layers\.(\d+)\.self_attn\.sinks", "blocks.{0}.attn.sinks"),
        (r"layers\.(\d+)\.mlp\.router\.(weight|bias)", "blocks.{0}.ffn.router.{1}"),
        (experts + r"gate_up_proj", "blocks.{0}.ffn.experts.up.weight||oss_gate_up"),
        (experts + r"gate_up_proj_bias", "blocks.{0}.ffn.experts.up.bias||oss_bias"),
        (experts + r"down_proj", "blocks.{0}.ffn.experts.down.weight||mT"),
        (experts + r"down_proj_bias", "blocks.{0}.ffn.experts.down.bias"),
        (experts + r"gate_up_proj_blocks", "blocks.{0}.ffn.experts.up.weight||mxfp4"),
        (experts + r"down_proj_blocks", "blocks.{0}.ffn.experts.down.weight||mxfp4"),
        (experts + r"(?:gate_up|down)_proj_scales", "scales"),
    ]
