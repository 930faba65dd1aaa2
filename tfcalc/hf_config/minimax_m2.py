"""MiniMax-M2 config.json files (modeling_minimax_m2.py, configuration_minimax_m2.py), Llama-shaped
(tfcalc.hf_config.llama_like): GQA without biases, RMSNorms over the whole Q and K projections (q_norm and k_norm,
n_head·head_dim and n_kv_head·head_dim wide, as OLMo 2's), rotary on the first ``rotary_dim`` channels of each
head (the released checkpoints' legacy key; ``partial_rotary_factor`` = rotary_dim / head_dim), and a mixture of
``num_local_experts`` experts of ``intermediate_size`` in every layer, no shared expert: MiniMaxM2TopKRouter
scores each expert with a sigmoid, chooses the top ``num_experts_per_tok`` of the scores plus a correction bias
(``e_score_correction_bias``, a buffer) and renormalizes the chosen scores. Keys transformers reads in no module
(use_qk_norm, qk_norm_type, the MTP keys num_mtp_modules, mtp_transformer_layers, shared_intermediate_size) are
left, as transformers leaves them.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def minimax_m2(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=196608, rms_norm_eps=1e-6, rope_theta=5_000_000.0, head_dim=128,
                        n_kv_head=8),
                d_ff_key=None)
    head = r.fields.get("d_head") or r.raw["hidden_size"] // r.raw["num_attention_heads"]
    rotary = r.raw.get("rotary_dim")
    if rotary is not None:
        if isinstance(rotary, bool) or not isinstance(rotary, int) or not 0 < rotary <= head or rotary % 2:
            raise r.fail(f"'rotary_dim' must be an even number of channels 2 .. head_dim ({head}); got {shown(rotary)}")
        r.raw = {**r.raw, "partial_rotary_factor": rotary / head}
    r.rope(5_000_000.0)  # MiniMaxM2Config.default_theta
    r.fields.update(qk_norm=True, qk_norm_over="projection")
    r.required(("intermediate_size", "d_ff"))
    r.take("num_local_experts", "n_expert", 256)
    r.take("num_experts_per_tok", "n_expert_active", 8)
    r.fields.update(router_scoring="sigmoid", router_score_bias=True, router_norm_topk=True)
    r.causal_or_base("MiniMaxM2")


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Mixtral's names with the router's correction bias beside the gate (a buffer of the model)."""
    return llama_names(arch, [(r"layers\.(\d+)\.(?:block_sparse_moe|mlp)\.e_score_correction_bias",
                               "buffer:blocks.{0}.ffn.score_bias")])
