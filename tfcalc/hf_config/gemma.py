"""Gemma config.json files (modeling_gemma.py): the Llama-shaped keys (tfcalc.hf_config.llama_like), head_dim
(default 256), GeGLU (hidden_activation gelu_pytorch_tanh), embeddings × √d, tied head; RMSNorm scales by (1 + w),
the same parameters. ``gemma_common``: what Gemma 2 and Gemma 3 read the same way.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def gemma_common(r: Reader, n_kv_head: int) -> None:
    """n_kv_head: the config class's default num_key_value_heads (Gemma 16, Gemma 2 and 3 4)."""
    base_fields(r, dict(max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256, tie=True,
                        n_kv_head=n_kv_head))
    r.take("attention_bias", "attn_bias", False)
    r.refuse("use_bidirectional_attention", True, "every layer is causal here")
    r.fields.update(embedding_scale=True)  # modeling_gemma.py: embeddings × sqrt(hidden_size)


def gemma(r: Reader) -> None:
    gemma_common(r, 16)
    # configuration_gemma.py: the legacy hidden_act "gelu" of the released files means the tanh approximation
    act = r.get("hidden_activation", r.get("hidden_act", "gelu_pytorch_tanh"))
    r.raw = {**r.raw, "hidden_act": "gelu_pytorch_tanh" if act == "gelu" else act}
    r.activation("hidden_act", "gelu_pytorch_tanh")
    r.causal_or_base("Gemma")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names; every RMSNorm scales by (1 + w) (modeling_gemma.py, GemmaRMSNorm)."""
    return llama_names(arch, unit_offset=True)
