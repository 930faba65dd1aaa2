"""ERNIE-4.5 MoE config.json files (model_type ernie4_5_moe; modeling_ernie4_5_moe.py,
configuration_ernie4_5_moe.py, defaults of ERNIE-4.5-21B-A3B), Llama-shaped (tfcalc.hf_config.llama_like): GQA
with RoPE on interleaved channel pairs over the whole head (apply_rotary_pos_emb repeats each frequency twice:
GLM-4's pairs, ``rope_pairs``), base 500,000, the embedding tied to the head by default. Layer i has the mixture of
experts when (i + 1) % ``moe_layer_interval`` == 0 and ``moe_layer_start_index`` <= i <= ``moe_layer_end_index``
(-1: the last layer), else a dense MLP of ``intermediate_size`` (Ernie4_5_MoeDecoderLayer): ``moe_num_experts``
experts of ``moe_intermediate_size``, top ``moe_k``, beside one shared MLP ``moe_num_shared_experts`` ×
``moe_intermediate_size`` wide. Ernie4_5_MoeTopKRouter: a softmax over every expert, the top k chosen by the
softmax plus a correction bias (``moe_statics.e_score_correction_bias``), their softmax weights renormalized
(tfcalc.architecture.routing: softmax scoring, the bias for choosing only).

Counted as in DeepSeek-V3, the correction bias is a buffer here, not a parameter: transformers holds it as an
nn.Parameter with requires_grad false (Ernie4_5_MoeStatics), so its parameters() are tfcalc's plus
moe_num_experts per MoE layer (1,728 at the defaults), a statistic no optimizer updates.

Refused by name: ``use_bias`` true (transformers puts biases on the attention, the dense MLPs and the shared
experts but not on the routed experts, a layout tfcalc does not build), ``moe_layer_interval`` below 1. Keys
transformers reads in no module (moe_capacity, moe_gate, moe_use_aux_free, the MTP keys
num_nextn_predict_layers and multi_token_pred_lambda) are left, as transformers leaves them; a checkpoint's MTP
tensors (``mtp_*``, which transformers ignores on loading) are counted beside the model.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader


def ernie4_5_moe(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0, tie=True, n_kv_head=4),
                d_ff_key=None)
    if r.flag("use_bias", False):
        raise r.fail("'use_bias' true is not supported: transformers puts biases on the attention, the dense MLPs "
                     "and the shared experts but not on the routed experts, a layout tfcalc does not build")
    r.fields.update(attn_out_bias=False, rope_fraction=1.0)  # Ernie4_5_MoeRotaryEmbedding: the whole head
    if not _expert_layers(r):
        return r.causal_or_base("Ernie4_5_Moe")
    r.take("moe_intermediate_size", "d_ff", 1536)
    r.take("moe_num_experts", "n_expert", 64, aliases=("num_experts",))
    r.take("moe_k", "n_expert_active", 6, aliases=("num_experts_per_tok",))
    shared = r.number("moe_num_shared_experts", 2, integer=True) or 0
    if shared < 0:
        raise r.fail(f"'moe_num_shared_experts' must be 0 or more; got {shared}")
    if shared:
        r.fields["shared_expert_d_ff"] = shared * r.fields["d_ff"]
    r.fields.update(router_scoring="softmax", router_score_bias=True, router_norm_topk=True)
    r.causal_or_base("Ernie4_5_Moe")


def _expert_layers(r: Reader) -> bool:
    """Which layers have the experts (module docstring), as first_dense_layers (below the start), moe_every
    (the interval) and dense_layers (past the end); whether any has. None has: the dense model transformers
    builds, every layer an MLP of intermediate_size."""
    n = r.fields["n_layer"]
    start = r.number("moe_layer_start_index", 1, integer=True)
    end = r.number("moe_layer_end_index", -1, integer=True)
    every = r.number("moe_layer_interval", 1, integer=True)
    start, end, every = 1 if start is None else start, -1 if end is None else end, 1 if every is None else every
    if every < 1:  # transformers would take (layer_idx + 1) % 0
        raise r.fail(f"'moe_layer_interval' must be a positive integer; got {every}")
    end = n - 1 if end == -1 else min(end, n - 1)  # Ernie4_5_MoeConfig.__post_init__: -1 is the last layer
    start = max(start, 0)
    sparse = (end + 1) // every - start // every if end >= start else 0  # i in [start, end], (i + 1) % every == 0
    if sparse <= 0:
        r.take("intermediate_size", "d_ff", required=True)
        return False
    if start or every > 1 or end < n - 1:  # some layer dense: intermediate_size is its MLP's width
        r.take("intermediate_size", "dense_d_ff", required=True)
    if start:
        r.fields["first_dense_layers"] = start
    if every > 1:
        r.fields["moe_every"] = every
    if end < n - 1:
        r.per_layer_list("the dense layers past moe_layer_end_index")
        r.fields["dense_layers"] = list(range(end + 1, n))
    return True


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_ernie4_5_moe.py: Llama's names with Q and K rotated in interleaved pairs (``rope_pairs``), the
    router's correction bias stored (1, E) in moe_statics (``flat``: tfcalc's buffer is (E,)), the shared experts
    (shared_experts, DeepSeek's spelling), and the MTP modules the released checkpoints keep (mtp_block,
    mtp_emb_norm, mtp_hidden_norm, mtp_linear_proj)."""
    return llama_names(arch, [
        (r"mtp_.*", "mtp"),
        (r"layers\.(\d+)\.self_attn\.([qk])_proj\.weight", "blocks.{0}.attn.qkv.weight|{1}|rope_pairs"),
        (r"layers\.(\d+)\.mlp\.moe_statics\.e_score_correction_bias", "buffer:blocks.{0}.ffn.score_bias||flat"),
        (r"layers\.(\d+)\.mlp\.shared_experts\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (r"layers\.(\d+)\.mlp\.shared_experts\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
    ])
