"""Issue 33's config and checkpoint cases (causes 4 and 5): config.json files whose per-layer lists do not
match their depth, scales that divide by zero, and gpt-oss checkpoints whose stored experts are not what
their config says -- the files (written without torch) and the hostile table's rows for them."""

from __future__ import annotations

import json
import math

from hub_moe import GPT_OSS_20B

DTYPE_BYTES = {"F32": 4, "BF16": 2, "U8": 1}


def safetensors_bytes(tensors: dict[str, tuple[list[int], str]]) -> bytes:
    """A safetensors file of zero-filled tensors {name: (shape, dtype)} (8-byte length, JSON header, data)."""
    header, offset = {}, 0
    for name, (shape, dtype) in tensors.items():
        size = DTYPE_BYTES[dtype] * math.prod(shape)
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text + b"\x00" * offset


def _hf(model_type: str, n: int, **changes) -> str:
    fields = dict(model_type=model_type, num_hidden_layers=n, hidden_size=64, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=16, intermediate_size=64, vocab_size=61, sliding_window=8,
                  use_sliding_window=True, num_local_experts=4, num_experts_per_tok=2)
    fields.update(changes)
    return json.dumps(fields)


def _types(n: int, period: int = 2) -> list[str]:
    return ["full_attention" if (i + 1) % period == 0 else "sliding_attention" for i in range(n)]


D, F, E = 64, 32, 4  # a 2-layer gpt-oss: 4 heads and 2 KV heads of 16, 4 experts of 32
OSS = {**GPT_OSS_20B, "num_hidden_layers": 2, "hidden_size": D, "intermediate_size": F, "head_dim": 16,
       "num_attention_heads": 4, "num_key_value_heads": 2, "num_local_experts": E, "vocab_size": 50,
       "layer_types": ["sliding_attention", "full_attention"], "max_position_embeddings": 64, "rope_scaling": None}


def oss_tensors(experts: str = "mxfp4", blocks_dtype: str = "U8") -> dict[str, tuple[list[int], str]]:
    """The released gpt-oss layout (modeling_gpt_oss.py names): experts as MXFP4 blocks and scales, or plain."""
    out = {"model.embed_tokens.weight": ([50, D], "BF16"), "lm_head.weight": ([50, D], "BF16"),
           "model.norm.weight": ([D], "BF16")}
    for i in range(2):
        p = f"model.layers.{i}."
        out.update({p + "input_layernorm.weight": ([D], "BF16"), p + "post_attention_layernorm.weight": ([D], "BF16"),
                    p + "self_attn.q_proj.weight": ([64, D], "BF16"), p + "self_attn.q_proj.bias": ([64], "BF16"),
                    p + "self_attn.k_proj.weight": ([32, D], "BF16"), p + "self_attn.k_proj.bias": ([32], "BF16"),
                    p + "self_attn.v_proj.weight": ([32, D], "BF16"), p + "self_attn.v_proj.bias": ([32], "BF16"),
                    p + "self_attn.o_proj.weight": ([D, 64], "BF16"), p + "self_attn.o_proj.bias": ([D], "BF16"),
                    p + "self_attn.sinks": ([4], "BF16"), p + "mlp.router.weight": ([E, D], "BF16"),
                    p + "mlp.router.bias": ([E], "BF16"), p + "mlp.experts.gate_up_proj_bias": ([E, 2 * F], "BF16"),
                    p + "mlp.experts.down_proj_bias": ([E, D], "BF16")})
        x = p + "mlp.experts."
        if experts == "mxfp4":
            out.update({x + "gate_up_proj_blocks": ([E, 2 * F, D // 32, 16], blocks_dtype),
                        x + "gate_up_proj_scales": ([E, 2 * F, D // 32], "U8"),
                        x + "down_proj_blocks": ([E, D, F // 32, 16], blocks_dtype),
                        x + "down_proj_scales": ([E, D, F // 32], "U8")})
        else:
            out.update({x + "gate_up_proj": ([E, D, 2 * F], experts), x + "down_proj": ([E, F, D], experts)})
    return out


def _oss_folder(config: dict, tensors: dict) -> dict[str, str | bytes]:
    return {"config.json": json.dumps(config), "model.safetensors": safetensors_bytes(tensors)}


NO_QUANT = {k: v for k, v in OSS.items() if k != "quantization_config"}
CHECKPOINTS = {
    "oss_ok": _oss_folder(OSS, oss_tensors()),
    "oss_blocks_f32": _oss_folder(OSS, oss_tensors(blocks_dtype="F32")),
    "oss_no_quant_config": _oss_folder(NO_QUANT, oss_tensors()),
    "oss_fp32_experts": _oss_folder(OSS, oss_tensors(experts="F32")),
}

DEEP = 2**40  # a size field's documented limit
FILES = {
    "deep_gemma3/config.json": _hf("gemma3_text", DEEP),
    "deep_llama4/config.json": _hf("llama4_text", DEEP),
    "deep_smollm3/config.json": _hf("smollm3", DEEP),
    "lt_oss_empty/config.json": _hf("gpt_oss", 24, layer_types=[]),
    "lt_qwen3_one/config.json": _hf("qwen3", 28, layer_types=["full_attention"]),
    "lt_gemma2_two/config.json": _hf("gemma2", 42, layer_types=_types(2)),
    "lt_oss_23/config.json": _hf("gpt_oss", 24, layer_types=_types(23)),
    "lt_qwen3_26/config.json": _hf("qwen3", 24, layer_types=_types(26)),
    "lt_gemma2_100/config.json": _hf("gemma2", 42, layer_types=_types(100)),
    "lt_oss_all_full_short/config.json": _hf("gpt_oss", 24, layer_types=["full_attention"] * 12),
    "g3_scalar_0/config.json": _hf("gemma3_text", 2, query_pre_attn_scalar=0),
    "g2_scalar_negative/config.json": _hf("gemma2", 2, query_pre_attn_scalar=-256),
    "g3_scalar_inf/config.json": _hf("gemma3_text", 2, query_pre_attn_scalar=1e999),
}

LENGTHS = "'layer_types' lists"
HOSTILE = [
    ("hf-layer-types-empty", ["params", "{d}/lt_oss_empty/config.json"], 2, f"{LENGTHS} 0 layers; 'num_hidden_layers"),
    ("hf-layer-types-one", ["memory", "{d}/lt_qwen3_one/config.json"], 2, f"{LENGTHS} 1 layers"),
    ("hf-layer-types-two", ["flops", "{d}/lt_gemma2_two/config.json"], 2, f"{LENGTHS} 2 layers"),
    ("hf-layer-types-23", ["params", "{d}/lt_oss_23/config.json"], 2, f"{LENGTHS} 23 layers"),
    ("hf-layer-types-26", ["infer", "{d}/lt_qwen3_26/config.json"], 2, f"{LENGTHS} 26 layers"),
    ("hf-layer-types-100", ["plan", "{d}/lt_gemma2_100/config.json", "--gpus", "8"], 2, f"{LENGTHS} 100 layers"),
    ("hf-layer-types-all-full", ["show", "{d}/lt_oss_all_full_short/config.json"], 2, f"{LENGTHS} 12 layers"),
    ("hf-query-scalar-0", ["params", "{d}/g3_scalar_0/config.json"], 2,
     "'query_pre_attn_scalar' must be a positive number; got 0"),
    ("hf-query-scalar-negative", ["flops", "{d}/g2_scalar_negative/config.json"], 2, "must be a positive number"),
    ("hf-query-scalar-inf", ["memory", "{d}/g3_scalar_inf/config.json"], 2, "'query_pre_attn_scalar' must be"),
    # cause 2: searches closed-form over the layer runs: a 2^40-layer pattern refused after its search, in seconds
    ("plan-pattern-2-40", ["plan", "gpt2", "--set", "n_layer=1099511627776", "--set",
                           "layer_pattern=(local, full)*549755813888", "--set", "sliding_window=8"], 2,
     "no layout of up to 16384 GPUs fits gpt2"),
    ("plan-pattern-2-40-gpus", ["plan", "gpt2", "--gpus", "64", "--set", "n_layer=1099511627776", "--set",
                                "layer_pattern=(local, full)*549755813888", "--set", "sliding_window=8"], 2,
     "no layout of 64 GPUs fits gpt2"),
    ("plan-size-2-40", ["plan", "gpt2", "--gpus", "auto", "--set", "n_layer=1099511627776"], 2, "GPUs fits gpt2"),
    ("hf-deep-gemma3-default-list", ["params", "{d}/deep_gemma3/config.json"], 2,
     "'num_hidden_layers' 1,099,511,627,776 is past the 1,000,000 layers tfcalc lists layer_types for"),
    ("hf-deep-llama4-default-list", ["flops", "{d}/deep_llama4/config.json"], 2, "is past the 1,000,000 layers"),
    ("hf-deep-smollm3-default-list", ["plan", "{d}/deep_smollm3/config.json"], 2, "is past the 1,000,000 layers"),
    # cause 4: grouped experts past a storage's 2^63 bytes, refused before the build names n_expert
    ("measure-experts-2-40-params", ["params", "gpt-oss-20b", "--set", "n_expert=1099511627776"], 2,
     "expert_ffn_up_weight (n_expert 1,099,511,627,776 × 5760 × 2880) is past a PyTorch storage's 2^63 bytes"),
    ("measure-experts-2-40-flops", ["flops", "deepseek-v3", "--measure", "--set", "n_expert=1099511627776"], 2,
     "(n_expert 1,099,511,627,776 × 4096 × 7168) is past"),
    ("measure-experts-2-40-llama4", ["flops", "llama-4-scout", "--measure", "--set", "n_expert=1099511627776"], 2,
     "(n_expert 1,099,511,627,776 × 16384 × 5120) is past"),
    ("measure-experts-2-40-memory", ["memory", "gpt-oss-20b", "--measure", "--set", "n_expert=1099511627776"], 2,
     "is past a PyTorch storage's 2^63 bytes"),
    ("ckpt-mxfp4-blocks-f32", ["params", "{d}/oss_blocks_f32"], 2, "is an MXFP4 tensor, stored as U8"),
    ("ckpt-mxfp4-no-quant-config", ["memory", "{d}/oss_no_quant_config"], 2,
     "has no 'quantization_config' with quant_method mxfp4"),
    ("ckpt-mxfp4-config-fp32-experts", ["infer", "{d}/oss_fp32_experts"], 2,
     "'quantization_config' says MXFP4 experts, but the checkpoint stores"),
]
