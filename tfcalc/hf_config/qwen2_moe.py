"""Qwen2-MoE config.json files (modeling_qwen2_moe.py): the Llama-shaped keys (tfcalc.hf_config.llama_like) with
num_experts, num_experts_per_tok, norm_topk_prob (false: the top-k softmax weights are not renormalized), a shared
expert (shared_expert_intermediate_size) with a sigmoid gate, qkv_bias; dense layers of intermediate_size where
decoder_sparse_step > 1 (moe_every) or mlp_only_layers lists them (first_dense_layers for the first k, else
dense_layers; ``expert_layers``, which Qwen3-MoE reads too); a file where no layer has the experts (num_experts 0,
every layer in mlp_only_layers, decoder_sparse_step past the depth) is read as the dense model transformers builds
from it: every layer an MLP of intermediate_size, no router, no shared expert.
"""

from __future__ import annotations

from typing import Any

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.qwen2 import qwen_windows
from tfcalc.hf_config.reader import Reader


def qwen2_moe(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0), d_ff_key=None)
    if expert_layers(r, r.get("num_experts")):
        r.required(("moe_intermediate_size", "d_ff"), ("num_experts", "n_expert"),
                   ("num_experts_per_tok", "n_expert_active"))
        r.fields["router_norm_topk"] = r.flag("norm_topk_prob", False)
        shared = r.take("shared_expert_intermediate_size", "shared_expert_d_ff", 5632)
        r.fields["shared_expert_gate"] = bool(shared)
    qkv_bias = r.flag("qkv_bias", True)
    r.fields.update(attn_bias=qkv_bias, attn_out_bias=False)
    qwen_windows(r)
    r.causal_or_base("Qwen2Moe")


def expert_layers(r: Reader, experts: Any, dense_width: int = 5632) -> bool:
    """Dense layers among the sparse ones (modeling_qwen2_moe.py, Qwen2MoeDecoderLayer; the same in
    modeling_qwen3_moe.py): layer i has the experts when i is not in mlp_only_layers and num_experts > 0
    and (i + 1) % decoder_sparse_step == 0, else a dense MLP of intermediate_size -- tfcalc's moe_every,
    with first_dense_layers for a list 0..k-1 and dense_layers for any other list, and dense_d_ff.
    Whether any layer has the experts; where none has (num_experts 0, every layer listed, a step past
    the depth), the model is the dense one it is: d_ff from intermediate_size, no expert field."""
    step = r.number("decoder_sparse_step", 1, integer=True)
    dense = r.get("mlp_only_layers", [])
    if not isinstance(dense, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in dense):
        raise r.fail(f"'mlp_only_layers' must be a list of layer numbers; got {shown(dense)}")
    dense, depth = sorted(set(dense)), r.fields["n_layer"]
    if dense and (dense[0] < 0 or dense[-1] >= depth):
        raise r.fail(f"'mlp_only_layers' names layer {dense[0] if dense[0] < 0 else dense[-1]}: the layers are 0 .. "
                     f"{depth - 1}")
    if step is not None and step < 1:  # transformers would divide by it (or count back from the end)
        raise r.fail(f"'decoder_sparse_step' must be a positive integer; got {step}")
    step = step or 1
    # layers i < depth with (i + 1) % step == 0: depth // step of them, less those listed dense (no loop
    # over the depth: a hostile file may give 2**40 layers)
    sparse = depth // step - sum(1 for i in dense if (i + 1) % step == 0)
    no_experts = isinstance(experts, int) and not isinstance(experts, bool) and experts == 0
    if no_experts or sparse == 0:
        r.take("intermediate_size", "d_ff", dense_width)
        return False
    if step > 1:
        r.fields["moe_every"] = step
    if dense and dense == list(range(len(dense))):
        r.fields["first_dense_layers"] = len(dense)
    elif dense:
        r.fields["dense_layers"] = dense
    if dense or step > 1:
        r.take("intermediate_size", "dense_d_ff", dense_width)
    return True


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Llama's tensor names and its experts' (tfcalc.hf_config.llama_like)."""
    return llama_names(arch)
