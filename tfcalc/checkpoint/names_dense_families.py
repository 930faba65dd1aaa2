"""Hugging Face tensor names of seven dense families -- phi, starcoder2, cohere, granite, gpt_bigcode, bloom,
roberta -> tfcalc's parameters (the rule format of tfcalc.checkpoint.names: "param|part|transform"), from each
type's modeling file in transformers. The name map itself, and the other families' rules: tfcalc.checkpoint.names.

Transforms beyond those of tfcalc.checkpoint.names:

- ``rope_pairs``: Cohere's RoPE rotates interleaved pairs (2i, 2i+1) of each head (modeling_cohere.py,
  rotate_half); tfcalc rotates the halves (i, i + h/2). Permuting each head's Q and K rows to [even | odd]
  channels makes the two the same function (the scores are a sum over a head's channels, so their order
  is free); ``rope_pairs_heads`` does the same to the per-head Q/K norm weights, (heads, h).
- ``neox_qkv``: BLOOM's query_key_value and StarCoder's (multi-head) c_attn interleave per head,
  [head][q, k, v][d_head], as GPT-NeoX does; StarCoder's multi-query c_attn is [Q | K | V] already.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture

Rule = tuple[str, str]
TYPES = ("phi", "starcoder2", "cohere", "granite", "gpt_bigcode", "bloom", "roberta", "lfm2", "lfm2_moe")


def _tied_head(arch: Architecture) -> str:
    return "tied:lm_head.weight" if arch.head.lm_head and arch.head.tied else "lm_head.weight"


def _phi(arch: Architecture) -> list[Rule]:
    layer = r"layers\.(\d+)\."
    return [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"final_layernorm\.(weight|bias)", "final_norm.{0}"),
        (r"lm_head\.weight", _tied_head(arch)), (r"lm_head\.bias", "lm_head.bias"),
        (layer + r"input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"self_attn\.([qk])_layernorm\.(weight|bias)", "blocks.{0}.attn.{1}_norm.{2}"),
        (layer + r"mlp\.fc1\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"mlp\.fc2\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]


def _starcoder2(arch: Architecture) -> list[Rule]:
    layer = r"layers\.(\d+)\."
    return [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"norm\.(weight|bias)", "final_norm.{0}"),
        (r"lm_head\.weight", _tied_head(arch)),
        (layer + r"input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"post_attention_layernorm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"mlp\.c_fc\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"mlp\.c_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]


def _cohere(arch: Architecture, llama: list[Rule]) -> list[Rule]:
    layer = r"layers\.(\d+)\."
    return [
        (r"norm\.weight", "final_norm.weight"),  # a bias-free LayerNorm, not Gemma's (1 + w)
        (layer + r"self_attn\.([qk])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}|rope_pairs"),
        (layer + r"self_attn\.([qk])_norm\.weight", "blocks.{0}.attn.{1}_norm.weight||rope_pairs_heads"),
        *llama,
    ]


def _gpt_bigcode(arch: Architecture) -> list[Rule]:
    attention = arch.output.layer(0).mixer  # GPT-BigCode: softmax attention
    qkv = "" if attention.n_kv_head == 1 else "||neox_qkv"  # multi-query: [Q | K | V]; else per head
    return [
        (r"wte\.weight", "tok_emb.weight"), (r"wpe\.weight", "pos_emb.weight"),
        (r"ln_f\.(weight|bias)", "final_norm.{0}"), (r"lm_head\.weight", _tied_head(arch)),
        (r"h\.(\d+)\.ln_1\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (r"h\.(\d+)\.ln_2\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (r"h\.(\d+)\.attn\.c_attn\.(weight|bias)", "blocks.{0}.attn.qkv.{1}" + qkv),
        (r"h\.(\d+)\.attn\.c_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (r"h\.(\d+)\.mlp\.c_fc\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (r"h\.(\d+)\.mlp\.c_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]


def _bloom(arch: Architecture) -> list[Rule]:
    layer = r"h\.(\d+)\."
    return [
        (r"word_embeddings\.weight", "tok_emb.weight"),
        (r"word_embeddings_layernorm\.(weight|bias)", "emb_norm.{0}"),
        (r"ln_f\.(weight|bias)", "final_norm.{0}"), (r"lm_head\.weight", _tied_head(arch)),
        (layer + r"input_layernorm\.(weight|bias)", "blocks.{0}.attn_norm.{1}"),
        (layer + r"self_attention\.query_key_value\.(weight|bias)", "blocks.{0}.attn.qkv.{1}||neox_qkv"),
        (layer + r"self_attention\.dense\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"post_attention_layernorm\.(weight|bias)", "blocks.{0}.ffn_norm.{1}"),
        (layer + r"mlp\.dense_h_to_4h\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"mlp\.dense_4h_to_h\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
    ]


def _roberta(arch: Architecture, bert: list[Rule]) -> list[Rule]:
    """BERT's names under ``roberta.``, and RobertaLMHead's (modeling_roberta.py): dense, layer_norm, decoder
    (the tied word embeddings) and its bias, stored twice (lm_head.bias, lm_head.decoder.bias)."""
    return bert + [
        (r"lm_head\.dense\.(weight|bias)", "head_dense.{0}"),
        (r"lm_head\.layer_norm\.(weight|bias)", "head_norm.{0}"),
        (r"lm_head\.decoder\.weight", _tied_head(arch)),
        (r"lm_head\.bias", "lm_head.bias"),
        (r"lm_head\.decoder\.bias", "tied:lm_head.bias"),
    ]


def _lfm2(arch: Architecture) -> list[Rule]:
    """LFM2 and LFM2-MoE (modeling_lfm2.py, modeling_lfm2_moe.py): the short convolution's in_proj, conv and
    out_proj are its component's Weights (tfcalc.architecture.short_conv) by name; the router's expert_bias
    is a buffer (DeepSeek-V3's score bias); experts grouped (transformers 5) or one by one (4's w1, w3, w2)."""
    layer, ff = r"layers\.(\d+)\.", r"layers\.(\d+)\.feed_forward\."
    return [
        (r"embed_tokens\.weight", "tok_emb.weight"), (r"embedding_norm\.weight", "final_norm.weight"),
        (r"lm_head\.weight", _tied_head(arch)),
        (layer + r"operator_norm\.weight", "blocks.{0}.attn_norm.weight"),
        (layer + r"ffn_norm\.weight", "blocks.{0}.ffn_norm.weight"),
        (layer + r"conv\.(in_proj|conv|out_proj)\.(weight|bias)", "blocks.{0}.attn.{1}.{2}"),
        (layer + r"self_attn\.([qkv])_proj\.weight", "blocks.{0}.attn.qkv.weight|{1}"),
        (layer + r"self_attn\.out_proj\.weight", "blocks.{0}.attn.out.weight"),
        (layer + r"self_attn\.([qk])_layernorm\.weight", "blocks.{0}.attn.{1}_norm.weight"),
        (ff + r"w1\.weight", "blocks.{0}.ffn.up.weight|gate"), (ff + r"w3\.weight", "blocks.{0}.ffn.up.weight|up"),
        (ff + r"w2\.weight", "blocks.{0}.ffn.down.weight"),
        (ff + r"gate\.weight", "blocks.{0}.ffn.router.weight"),
        (ff + r"expert_bias", "buffer:blocks.{0}.ffn.score_bias"),
        (ff + r"experts\.gate_up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (ff + r"experts\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
        (ff + r"experts\.(\d+)\.w1\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|gate"),
        (ff + r"experts\.(\d+)\.w3\.weight", "blocks.{0}.ffn.experts.up.weight@{1}|up"),
        (ff + r"experts\.(\d+)\.w2\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
    ]


def rules(arch: Architecture, model_type: str, llama: list[Rule], bert: list[Rule]) -> list[Rule]:
    """The rules of one of TYPES; ``llama`` and ``bert``: those families' rules, which Granite and Cohere
    (Llama's names) and RoBERTa (BERT's) extend."""
    if model_type == "granite":
        return llama
    if model_type == "cohere":
        return _cohere(arch, llama)
    if model_type == "roberta":
        return _roberta(arch, bert)
    if model_type in ("lfm2", "lfm2_moe"):
        return _lfm2(arch)
    return {"phi": _phi, "starcoder2": _starcoder2, "gpt_bigcode": _gpt_bigcode, "bloom": _bloom}[model_type](arch)
