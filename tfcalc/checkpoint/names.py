"""Hugging Face tensor names -> the parameters of tfcalc's model, per model type.

Each rule maps a name (after the wrapper prefix -- ``model.``, ``transformer.``, ``bert.``,
``gpt_neox.`` -- is taken off) to one tfcalc parameter, a named block of its rows (``q``, ``k``, ``v``
of ``attn.qkv``; ``gate``, ``up`` of an FFN's ``up``), and how the tensor is laid out differently:

- ``T``: GPT-2's Conv1D stores (in, out), the transpose of a Linear's weight;
- ``neox_qkv``: GPT-NeoX interleaves per head, rows [head][q, k, v][d_head] (modeling_gpt_neox.py);
- ``falcon_qkv``: Falcon-7B's multi-query [Q | K | V] is tfcalc's layout; with several K/V heads the
  rows are grouped, [kv head][its query heads..., k, v][d_head] (modeling_falcon.py, _split_heads);
- ``norm+1``: Gemma's RMSNorm scales by (1 + w) (modeling_gemma.py): tfcalc's weight is w + 1;
- ``rope_pairs``: GLM-4 rotates interleaved channel pairs (modeling_glm4.py, rotate_half); tfcalc rotates
  halves, so the rotated rows of each Q and K head are reordered (pairs (0, 1), (2, 3), ... to halves
  0, 2, ... | 1, 3, ...): Q·Kᵀ is unchanged by one reordering applied to both (Llama 4's complex RoPE too);
- ``mT``: Llama 4's grouped experts, stored (E, in, out): each expert's matrix transposed.

A layer's experts are grouped tensors in tfcalc's model (tfcalc.model.experts: ``ffn.experts.up.weight``
(E, m·f, d), rows [gate | up] per expert, and ``ffn.experts.down.weight`` (E, d, f)). A per-expert name
(transformers 4's ``experts.<e>.w1.weight``, ``experts.<e>.gate_proj.weight``) fills expert e's slice
(a target ``param@e``); transformers 5's grouped ``experts.gate_up_proj`` (E, 2f, d) and
``experts.down_proj`` (E, d, f) are tfcalc's layout already and fill the whole tensor.

A name no rule covers is unexplained; ``BUFFERS`` are tensors old checkpoints store that are not
parameters (causal masks, rotary tables); ``tied:`` targets are stored copies of a tied parameter.

What a name means is read from the description (tfcalc.architecture), never from flat fields: whether
the LM head is the token embedding (``Head.tied``), whether a layer's post-attention norm is a sandwich
output norm (``Block.placement``, Gemma 2) or the FFN's input norm, whether a T5 checkpoint is an
encoder-only model (``Architecture.kind``), and how many experts a stacked expert tensor holds (the
``MoE`` of that layer). The model type gives only how a family spells its names and lays out its tensors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tfcalc.architecture import Architecture, MoE
from tfcalc.checkpoint import names_dense_families
from tfcalc.config import ModelConfig
from tfcalc.count.model.components import block_of

PREFIXES = ("model.", "transformer.", "bert.", "gpt_neox.", "roberta.")
BUFFERS = re.compile(r".*(\.attn\.bias|\.attn\.masked_bias|\.attention\.bias|\.attention\.masked_bias|"
                     r"rotary_emb\.inv_freq|embeddings\.position_ids)$")


@dataclass(frozen=True)
class Piece:
    param: str  # tfcalc parameter path, e.g. "blocks.3.attn.qkv.weight"
    part: Optional[str] = None  # a named block of its rows; None: the whole parameter
    transform: Optional[str] = None  # see the module docstring
    tied: bool = False  # a stored copy of a parameter tied to another (counted there)
    expert: Optional[int] = None  # the expert whose slice (dim 0) of a grouped expert tensor it fills
    buffer: bool = False  # a buffer of the model, loaded but no parameter (DeepSeek-V3's router bias)


# (regex over the name, target: "param[@expert][|part][|transform]"; "tied:param"; "buffer"; "scales";
# "buffer:name" (a buffer of the model, loaded); "mtp" (DeepSeek-V3's MTP modules, counted beside the model))
Rule = tuple[str, str]


def _tied_head(arch: Architecture) -> str:
    """Where a stored LM head goes: a copy of the tied token embedding, or the head's own parameter."""
    return "tied:lm_head.weight" if arch.head.lm_head and arch.head.tied else "lm_head.weight"


def _llama_rules(arch: Architecture, model_type: str) -> list[Rule]:
    norm = "||norm+1" if model_type in ("gemma", "gemma2", "gemma3_text", *_HYBRID_QWEN) else ""  # a storage convention
    # post_attention_layernorm: the attention's output norm (Gemma 2's sandwich, OLMo 2's output norms), or
    # the FFN's input norm (Llama; GLM-4, whose attention output norm is post_self_attn_layernorm)
    sandwich = model_type != "glm4" and any(b.placement in ("sandwich", "output") for b, _ in arch.output.kinds())
    experts = r"layers\.(\d+)\.(?:block_sparse_moe|mlp)\.experts"
    first: list[Rule] = []
    if model_type == "glm4":  # modeling_glm4.py: rotary on interleaved channel pairs, and its own norm names
        first = [(r"layers\.(\d+)\.self_attn\.([qk])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}|rope_pairs"),
                 (r"layers\.(\d+)\.post_self_attn_layernorm\.weight", "blocks.{0}.attn_post_norm.weight"),
                 (r"layers\.(\d+)\.post_mlp_layernorm\.weight", "blocks.{0}.ffn_post_norm.weight")]
    if model_type == "llama4_text":  # modeling_llama4.py: complex (interleaved-pair) RoPE, feed_forward names,
        # experts stored (E, d, 2f) and (E, f, d): the transposes of tfcalc's grouped layout
        ff = r"layers\.(\d+)\.feed_forward\."
        first = [(r"layers\.(\d+)\.self_attn\.([qk])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}|rope_pairs"),
                 (ff + r"router\.weight", "blocks.{0}.ffn.router.weight"),
                 (ff + r"experts\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight||mT"),
                 (ff + r"experts\.down_proj", "blocks.{0}.ffn.experts.down.weight||mT"),
                 (ff + r"shared_expert\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
                 (ff + r"shared_expert\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
                 (ff + r"(gate|up)_proj\.weight", "blocks.{0}.ffn.up.weight|{1}"),
                 (ff + r"down_proj\.weight", "blocks.{0}.ffn.down.weight")]
    if model_type == "apertus":  # modeling_apertus.py, ApertusDecoderLayer's norm names
        first = [(r"layers\.(\d+)\.attention_layernorm\.weight", "blocks.{0}.attn_norm.weight"),
                 (r"layers\.(\d+)\.feedforward_layernorm\.weight", "blocks.{0}.ffn_norm.weight")]
    if model_type in _HYBRID_QWEN:  # Q/K norms of (1 + w) (Qwen3NextRMSNorm); the gated DeltaNet's tensors under
        # transformers' names, which its component's Weights keep (tfcalc.architecture.gated_deltanet); MTP beside
        first = [(r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight||norm+1"),
                 (r"layers\.(\d+)\.linear_attn\.(dt_bias|A_log)", "blocks.{0}.attn.{1}"),
                 (r"layers\.(\d+)\.linear_attn\.(\w+)\.weight", "blocks.{0}.attn.{1}.weight"),
                 (r"mtp\..*", "mtp")]
    if model_type == "gemma3_text":  # its Q/K norms scale by (1 + w) too (modeling_gemma3.py, Gemma3RMSNorm)
        first = [(r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight||norm+1")]
    return first + [
        (r"embed_tokens\.weight", "tok_emb.weight"),
        (r"norm\.weight", "final_norm.weight" + norm),
        (r"lm_head\.weight", _tied_head(arch)),
        (r"layers\.(\d+)\.input_layernorm\.weight", "blocks.{0}.attn_norm.weight" + norm),
        (r"layers\.(\d+)\.post_attention_layernorm\.weight",
         ("blocks.{0}.attn_post_norm.weight" if sandwich else "blocks.{0}.ffn_norm.weight") + norm),
        (r"layers\.(\d+)\.pre_feedforward_layernorm\.weight", "blocks.{0}.ffn_norm.weight" + norm),
        (r"layers\.(\d+)\.post_feedforward_layernorm\.weight", "blocks.{0}.ffn_post_norm.weight" + norm),
        (r"layers\.(\d+)\.self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (r"layers\.(\d+)\.self_attn\.qkv_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{1}"),
        (r"layers\.(\d+)\.self_attn\.o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (r"layers\.(\d+)\.self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight"),
        (r"layers\.(\d+)\.mlp\.(gate|up)_proj\.(weight|bias)", "blocks.{0}.ffn.up.{2}|{1}"),
        (r"layers\.(\d+)\.mlp\.gate_up_proj\.weight", "blocks.{0}.ffn.up.weight"),
        (r"layers\.(\d+)\.mlp\.down_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        (r"layers\.(\d+)\.mlp\.act_fn\.(alpha_p|alpha_n)", "blocks.{0}.ffn.act.{1}"),  # Apertus' xIELU
        (r"layers\.(\d+)\.mlp\.act_fn\.(beta|eps)", "buffer:blocks.{0}.ffn.act.{1}"),
        (r"layers\.(\d+)\.(?:block_sparse_moe|mlp)\.gate\.weight", "blocks.{0}.ffn.router.weight"),
        (experts + r"\.(\d+)\.(?:w1|gate_proj)\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|gate"),
        (experts + r"\.(\d+)\.(?:w3|up_proj)\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|up"),
        (experts + r"\.(\d+)\.(?:w2|down_proj)\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
        (experts + r"\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (experts + r"\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
        (r"layers\.(\d+)\.mlp\.shared_expert\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (r"layers\.(\d+)\.mlp\.shared_expert\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
        (r"layers\.(\d+)\.mlp\.shared_expert_gate\.weight", "blocks.{0}.ffn.shared_gate.weight"),
    ]


def _gpt_oss_rules(arch: Architecture) -> list[Rule]:
    """gpt-oss (modeling_gpt_oss.py): Llama's names, sinks, a router with a bias, and grouped experts stored
    (in, out): gate_up_proj (E, d, 2f) with gate and up columns interleaved [g0 u0 g1 u1 ...], its bias
    (E, 2f) likewise, down_proj (E, f, d) (transform ``oss_gate_up``, ``oss_bias``, ``mT``). The released
    checkpoints store the expert weights as MXFP4 (``*_blocks``: two 4-bit values per byte, uint8
    (E, rows, cols/32, 16); ``*_scales``: one 8-bit scale per 32 values), rows in the out dimension."""
    experts = r"layers\.(\d+)\.mlp\.experts\."
    return [rule for rule in _llama_rules(arch, "gpt_oss") if "experts" not in rule[1]] + [
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


def _gpt2_rules(arch: Architecture) -> list[Rule]:
    return [
        (r"wte\.weight", "tok_emb.weight"), (r"wpe\.weight", "pos_emb.weight"),
        (r"ln_f\.(weight|bias)", "final_norm.{0}"),
        (r"lm_head\.weight", _tied_head(arch)),
        (r"h\.(\d+)\.ln_1\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (r"h\.(\d+)\.ln_2\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (r"h\.(\d+)\.ln_cross_attn\.(weight|bias)", "blocks.{0}.cross_attn_norm.{1}"),
        (r"h\.(\d+)\.attn\.c_attn\.weight", "blocks.{0}.attn.qkv.weight||T"),
        (r"h\.(\d+)\.attn\.c_attn\.bias", "blocks.{0}.attn.qkv.bias"),
        (r"h\.(\d+)\.attn\.c_proj\.weight", "blocks.{0}.attn.out.weight||T"),
        (r"h\.(\d+)\.attn\.c_proj\.bias", "blocks.{0}.attn.out.bias"),
        (r"h\.(\d+)\.crossattention\.q_attn\.weight", "blocks.{0}.cross_attn.q.weight||T"),
        (r"h\.(\d+)\.crossattention\.q_attn\.bias", "blocks.{0}.cross_attn.q.bias"),
        (r"h\.(\d+)\.crossattention\.c_attn\.weight", "blocks.{0}.cross_attn.kv.weight||T"),
        (r"h\.(\d+)\.crossattention\.c_attn\.bias", "blocks.{0}.cross_attn.kv.bias"),
        (r"h\.(\d+)\.crossattention\.c_proj\.weight", "blocks.{0}.cross_attn.out.weight||T"),
        (r"h\.(\d+)\.crossattention\.c_proj\.bias", "blocks.{0}.cross_attn.out.bias"),
        (r"h\.(\d+)\.mlp\.c_fc\.weight", "blocks.{0}.ffn.up.weight||T"),
        (r"h\.(\d+)\.mlp\.c_fc\.bias", "blocks.{0}.ffn.up.bias"),
        (r"h\.(\d+)\.mlp\.c_proj\.weight", "blocks.{0}.ffn.down.weight||T"),
        (r"h\.(\d+)\.mlp\.c_proj\.bias", "blocks.{0}.ffn.down.bias"),
    ]


def _bert_rules(arch: Architecture) -> list[Rule]:
    layer = r"encoder\.layer\.(\d+)\."
    return [
        (r"embeddings\.word_embeddings\.weight", "tok_emb.weight"),
        (r"embeddings\.position_embeddings\.weight", "pos_emb.weight"),
        (r"embeddings\.token_type_embeddings\.weight", "type_emb.weight"),
        (r"embeddings\.LayerNorm\.(weight|bias)", "emb_norm.{0}"),
        (layer + r"attention\.self\.(query|key|value)\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"attention\.output\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"attention\.output\.LayerNorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"crossattention\.self\.query\.(weight|bias)", "blocks.{0}.cross_attn.q.{1}"),
        (layer + r"crossattention\.self\.(key|value)\.(weight|bias)", "blocks.{0}.cross_attn.kv.{2}|{1}"),
        (layer + r"crossattention\.output\.dense\.(weight|bias)", "blocks.{0}.cross_attn.out.{1}"),
        (layer + r"crossattention\.output\.LayerNorm\.(weight|bias)", "blocks.{0}.cross_attn_norm.{1}"),
        (layer + r"intermediate\.dense\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"output\.dense\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        (layer + r"output\.LayerNorm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (r"pooler\.dense\.(weight|bias)", "pooler.{0}"),
        (r"cls\.predictions\.transform\.dense\.(weight|bias)", "head_dense.{0}"),
        (r"cls\.predictions\.transform\.LayerNorm\.(weight|bias)", "head_norm.{0}"),
        (r"cls\.predictions\.bias", "lm_head.bias"),
        (r"cls\.predictions\.decoder\.weight", _tied_head(arch)),
        (r"cls\.predictions\.decoder\.bias", "tied:lm_head.bias"),  # the same tensor as predictions.bias
    ]


def _neox_falcon_opt_rules(arch: Architecture, model_type: str) -> list[Rule]:
    tied_head = _tied_head(arch)
    if model_type == "gpt_neox":
        return [
            (r"embed_in\.weight", "tok_emb.weight"), (r"embed_out\.weight", tied_head),
            (r"final_layer_norm\.(weight|bias)", "final_norm.{0}"),
            (r"layers\.(\d+)\.input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
            (r"layers\.(\d+)\.post_attention_layernorm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
            (r"layers\.(\d+)\.attention\.query_key_value\.(weight|bias)", "blocks.{0}.attn.qkv.{1}||neox_qkv"),
            (r"layers\.(\d+)\.attention\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
            (r"layers\.(\d+)\.mlp\.dense_h_to_4h\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
            (r"layers\.(\d+)\.mlp\.dense_4h_to_h\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        ]
    if model_type == "falcon":
        return [
            (r"word_embeddings\.weight", "tok_emb.weight"), (r"lm_head\.weight", tied_head),
            (r"ln_f\.(weight|bias)", "final_norm.{0}"),
            (r"h\.(\d+)\.(?:input_layernorm|ln_attn)\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
            (r"h\.(\d+)\.(?:post_attention_layernorm|ln_mlp)\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
            (r"h\.(\d+)\.self_attention\.query_key_value\.(weight|bias)", "blocks.{0}.attn.qkv.{1}||falcon_qkv"),
            (r"h\.(\d+)\.self_attention\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
            (r"h\.(\d+)\.mlp\.dense_h_to_4h\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
            (r"h\.(\d+)\.mlp\.dense_4h_to_h\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        ]
    layer = r"decoder\.layers\.(\d+)\."  # opt
    return [
        (r"decoder\.embed_tokens\.weight", "tok_emb.weight"), (r"decoder\.embed_positions\.weight", "pos_emb.weight"),
        (r"lm_head\.weight", tied_head), (r"decoder\.final_layer_norm\.(weight|bias)", "final_norm.{0}"),
        (layer + r"self_attn_layer_norm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.out_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"final_layer_norm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (layer + r"fc1\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"fc2\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        (r"decoder\.project_in\.weight", "project_in.weight"),  # OPT-350m's word_embed_proj_dim
        (r"decoder\.project_out\.weight", "project_out.weight"),
    ]


def _t5_rules(arch: Architecture) -> list[Rule]:
    """T5: the decoder is tfcalc's top-level stack, the encoder its ``encoder.`` stack (an encoder-only
    T5EncoderModel: the top level)."""
    enc = "" if arch.kind == "encoder" else "encoder."
    rules = [(r"shared\.weight", "tok_emb.weight"),
             (r"(?:encoder|decoder)\.embed_tokens\.weight", "tied:tok_emb.weight"),
             (r"lm_head\.weight", _tied_head(arch))]
    for stack, target, ffn_layer in (("encoder", enc, 1), ("decoder", "", 2)):
        block = stack + r"\.block\.(\d+)\.layer\."
        rules += [
            (block + r"0\.SelfAttention\.([qkv])\.weight", target + "blocks.{0}.attn.qkv.weight|{1}"),
            (block + r"0\.SelfAttention\.o\.weight", target + "blocks.{0}.attn.out.weight"),
            (block + r"0\.SelfAttention\.relative_attention_bias\.weight", target + "rel_bias.weight"),
            (block + r"0\.layer_norm\.weight", target + "blocks.{0}.attn_norm.weight"),
            (block + rf"{ffn_layer}\.DenseReluDense\.wi\.weight", target + "blocks.{0}.ffn.up.weight"),
            (block + rf"{ffn_layer}\.DenseReluDense\.wi_0\.weight", target + "blocks.{0}.ffn.up.weight|gate"),
            (block + rf"{ffn_layer}\.DenseReluDense\.wi_1\.weight", target + "blocks.{0}.ffn.up.weight|up"),
            (block + rf"{ffn_layer}\.DenseReluDense\.wo\.weight", target + "blocks.{0}.ffn.down.weight"),
            (block + rf"{ffn_layer}\.layer_norm\.weight", target + "blocks.{0}.ffn_norm.weight"),
            (stack + r"\.final_layer_norm\.weight", target + "final_norm.weight"),
        ]
    return rules + [
        (r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.q\.weight", "blocks.{0}.cross_attn.q.weight"),
        (r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.([kv])\.weight", "blocks.{0}.cross_attn.kv.weight|{1}"),
        (r"decoder\.block\.(\d+)\.layer\.1\.EncDecAttention\.o\.weight", "blocks.{0}.cross_attn.out.weight"),
        (r"decoder\.block\.(\d+)\.layer\.1\.layer_norm\.weight", "blocks.{0}.cross_attn_norm.weight"),
    ]


def _deepseek_rules(arch: Architecture, model_type: str) -> list[Rule]:
    """DeepSeek-V2/V3 and Kimi K2 (modeling_deepseek_v3.py): the latent attention's projections and norms,
    the router's correction bias (a buffer of the model, loaded as one), the shared experts; the MTP modules
    stored after the main layers (layers n_layer.., tfcalc.architecture.mtp) and the FP8 checkpoints' block
    scales (``weight_scale_inv``) are no parameters of the model Hugging Face builds."""
    attn = r"layers\.(\d+)\.self_attn\."
    return _deepseek_moe_rules(arch)[:2] + [
        (attn + r"q_proj\.weight", "blocks.{0}.attn.q.weight"),
        (attn + r"q_a_proj\.(weight|bias)", "blocks.{0}.attn.q_a.{1}"),
        (attn + r"q_a_layernorm\.weight", "blocks.{0}.attn.q_a_norm.weight"),
        (attn + r"q_b_proj\.weight", "blocks.{0}.attn.q_b.weight"),
        (attn + r"kv_a_proj_with_mqa\.(weight|bias)", "blocks.{0}.attn.kv_a.{1}"),
        (attn + r"kv_a_layernorm\.weight", "blocks.{0}.attn.kv_a_norm.weight"),
        (attn + r"kv_b_proj\.weight", "blocks.{0}.attn.kv_b.weight"),
        # DeepSeek-V3.2's lightning indexer (DeepseekV32Indexer; tfcalc.model.sparse_latent keeps its names)
        (attn + r"indexer\.(wq_b|wk|weights_proj)\.weight", "blocks.{0}.attn.indexer.{1}.weight"),
        (attn + r"indexer\.k_norm\.(weight|bias)", "blocks.{0}.attn.indexer.k_norm.{1}"),
    ] + _deepseek_moe_rules(arch)[2:] + _llama_rules(arch, model_type)


def _deepseek_moe_rules(arch: Architecture) -> list[Rule]:
    """DeepSeek-V3's mixture of experts, which GLM-4.5 (glm4_moe, beside Llama's attention) shares: the MTP modules
    after the main layers, FP8 block scales, the router's correction bias (a buffer), the shared experts."""
    mtp = "|".join(str(arch.output.n_layer + k) for k in range(8))
    return [
        (rf"layers\.(?:{mtp})\..*", "mtp"),
        (r".*\.weight_scale_inv", "buffer"),
        (r"layers\.(\d+)\.mlp\.gate\.e_score_correction_bias", "buffer:blocks.{0}.ffn.score_bias"),
        (r"layers\.(\d+)\.mlp\.shared_experts\.(gate|up)_proj\.weight", "blocks.{0}.ffn.shared.up.weight|{1}"),
        (r"layers\.(\d+)\.mlp\.shared_experts\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
    ]


_DEEPSEEK = ("deepseek_v3", "kimi_k2", "deepseek_v2", "deepseek_v32", "glm_moe_dsa")
_LLAMA_LIKE = ("llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "phi3", "gemma", "gemma2", "qwen3_moe",
               "smollm3", "olmo2", "olmo3", "apertus", "exaone4", "seed_oss", "glm4", "gemma3_text", "llama4_text",
               "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
# Qwen3-Next and Qwen3.5: (1 + w) RMSNorms and the gated DeltaNet (tfcalc.architecture.gated_deltanet)
_HYBRID_QWEN = ("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text")
_PARTS = {"query": "q", "key": "k", "value": "v"}


# a vision-language checkpoint (Gemma3ForConditionalGeneration, Llama4ForConditionalGeneration): its
# language model's names behind one more prefix (transformers 5: model.language_model.; 4: language_model.
# and language_model.model.), and its vision tower and projector, counted apart (the config's vision_params)
MULTIMODAL = {"gemma3": "gemma3_text", "llama4": "llama4_text", "qwen3_5": "qwen3_5_text",
              "qwen3_5_moe": "qwen3_5_moe_text"}
LANGUAGE_PREFIXES = ("language_model.model.", "language_model.")
VISION = re.compile(r"(?:model\.)?(?:vision_tower|vision_model|multi_modal_projector|visual)\..*")


def rules(cfg: ModelConfig, model_type: str) -> list[tuple[re.Pattern, str]]:
    """The compiled rules of one model type (the description decides what tied and layout-dependent names
    mean: see the module docstring)."""
    arch = cfg.architecture
    model_type = MULTIMODAL.get(model_type, model_type)
    if model_type in _DEEPSEEK:
        table = _deepseek_rules(arch, model_type)
    elif model_type == "glm4_moe":
        table = _deepseek_moe_rules(arch) + _llama_rules(arch, model_type)
    elif model_type == "minimax_m2":  # Mixtral's names with the router's correction bias beside the gate
        table = [(r"layers\.(\d+)\.(?:block_sparse_moe|mlp)\.e_score_correction_bias",
                  "buffer:blocks.{0}.ffn.score_bias")] + _llama_rules(arch, model_type)
    elif model_type in names_dense_families.TYPES:
        table = names_dense_families.rules(arch, model_type, _llama_rules(arch, model_type), _bert_rules(arch))
    elif model_type in _LLAMA_LIKE:
        table = _llama_rules(arch, model_type)
    elif model_type == "gpt_oss":
        table = _gpt_oss_rules(arch)
    elif model_type == "gpt2":
        table = _gpt2_rules(arch)
    elif model_type == "bert":
        table = _bert_rules(arch)
    elif model_type == "t5":
        table = _t5_rules(arch)
    else:
        table = _neox_falcon_opt_rules(arch, model_type)
    return [(re.compile(pattern), target) for pattern, target in table]


def map_name(table: list[tuple[re.Pattern, str]], name: str) -> Piece | str | None:
    """A Piece, "buffer" for a known non-parameter tensor, "scales" for a quantized tensor's scales (MXFP4),
    "mtp" for an MTP module's (DeepSeek-V3), "vision" for a vision-language checkpoint's vision tower and
    projector, or None when no rule explains the name."""
    if VISION.fullmatch(name):
        return "vision"
    short = name
    for prefix in PREFIXES:
        if short.startswith(prefix):
            short = short[len(prefix):]
            break
    for prefix in LANGUAGE_PREFIXES:
        if short.startswith(prefix):
            short = short[len(prefix):]
            break
    for pattern, target in table:
        m = pattern.fullmatch(short)
        if m:
            if target in ("buffer", "mtp", "scales"):
                return target
            if target.startswith("buffer:"):
                return Piece(target.removeprefix("buffer:").format(*m.groups()), buffer=True)
            tied = target.startswith("tied:")
            param, _, rest = target.removeprefix("tied:").partition("|")
            part, _, transform = rest.partition("|")
            part = part.format(*m.groups()) if part else None
            param, _, expert = param.format(*m.groups()).partition("@")
            return Piece(param, _PARTS.get(part, part), transform or None, tied, int(expert) if expert else None)
    return "buffer" if BUFFERS.fullmatch(name) else None


def experts_of(cfg: ModelConfig, param: str) -> int:
    """Experts of the mixture of experts a parameter path sits in (that layer's ``MoE``); 0 when the layer
    has no mixture of experts."""
    block = block_of(cfg, param)
    return block.ffn.n_expert if block is not None and isinstance(block.ffn, MoE) else 0
