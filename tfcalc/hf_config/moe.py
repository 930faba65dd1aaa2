"""Mixture-of-experts config.json files of 2025: qwen3_moe and gpt_oss, with the defaults of their
transformers config classes (configuration_qwen3_moe.py, configuration_gpt_oss.py).

- qwen3_moe (Qwen3 technical report, arXiv 2505.09388; modeling_qwen3_moe.py): Qwen3's attention (Q/K
  RMSNorm over each head, no biases unless attention_bias), experts of moe_intermediate_size with
  norm_topk_prob (renormalize the top-k weights; false by default), no shared expert; layer i has the
  experts when i is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0, else a dense MLP of
  intermediate_size (where no layer has the experts, a dense model: tfcalc.hf_config.llama_like);
  use_sliding_window windows every layer.
- gpt_oss (OpenAI, arXiv 2508.10925; modeling_gpt_oss.py): biases on Q/K/V/O (attention_bias), one
  sink logit per head, sliding-window layers (128) alternating with full ones (layer_types), a router
  with a bias choosing the top-k of num_local_experts (softmax over the k chosen logits), experts with
  biases and the clamped SwiGLU (swiglu_limit, swiglu_alpha). ``quantization_config`` with quant_method
  mxfp4 stores the experts' weights as MXFP4 (``expert_format``); modules_to_not_convert names the
  modules kept in the checkpoint's dtype, which must not include the experts.
"""

from __future__ import annotations

from typing import Callable

from tfcalc.errors import shown
from tfcalc.hf_config.llama_like import _common, _finish, _qwen2_moe_layers
from tfcalc.hf_config.reader import Reader


def qwen3_moe(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0), d_ff_key=None)
    experts = r.get("num_experts", 128, aliases=("num_local_experts",))  # transformers 5 writes the latter
    if _qwen2_moe_layers(r, experts, dense_width=6144):  # some layer has the experts (else: a dense model)
        r.required(("moe_intermediate_size", "d_ff"))
        r.take("num_experts", "n_expert", 128, aliases=("num_local_experts",))
        r.take("num_experts_per_tok", "n_expert_active", 8)
        r.fields["router_norm_topk"] = r.flag("norm_topk_prob", False)
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(qk_norm=True)
    r.windows(used=r.flag("use_sliding_window", False))  # every layer (Qwen3MoeAttention.sliding_window)
    _finish(r, "Qwen3Moe")


def gpt_oss(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=150000.0, head_dim=64))
    r.take("num_local_experts", "n_expert", 128, aliases=("num_experts",))
    r.take("num_experts_per_tok", "n_expert_active", 4, aliases=("experts_per_token",))
    bias = r.flag("attention_bias", True)
    r.fields.update(attn_bias=bias, attn_out_bias=bias, ffn_bias=True, router_bias=True, attn_sinks=True)
    r.take("swiglu_limit", "swiglu_limit", 7.0)
    r.take("swiglu_alpha", "swiglu_alpha", 1.702)
    if r.raw.get("layer_types") is None:  # GptOssConfig's default: layers 0, 2, 4, ... windowed
        n = r.fields["n_layer"]
        r.raw = {**r.raw, "layer_types": ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]}
    r.raw.setdefault("sliding_window", 128)
    r.windows()
    _expert_format(r)
    _finish(r, "GptOss")


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


MAPPERS: dict[str, Callable[[Reader], None]] = {"qwen3_moe": qwen3_moe, "gpt_oss": gpt_oss}
