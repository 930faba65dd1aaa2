"""BERT config.json files (modeling_bert.py): num_hidden_layers, hidden_size, num_attention_heads, intermediate_size,
vocab_size, max_position_embeddings (required); type_vocab_size, hidden_act, layer_norm_eps; is_decoder (causal
self-attention) and add_cross_attention. BertModel (pooler, no head: what BERT's published sizes count; with
is_decoder its pooler reads a causal stack's first token, as transformers builds it), BertForMaskedLM (the MLM head:
a transform Linear(d, d), activation and LayerNorm, then the projection tied to the word embeddings, with its own
bias; no pooler) or BertLMHeadModel (the same head, is_decoder). RoBERTa reads the same keys:
tfcalc.hf_config.roberta.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

_BERT_HEADS = {"BertModel": "base", "BertForMaskedLM": "masked", "BertLMHeadModel": "masked"}


def bert(r: Reader, heads: dict[str, str] = _BERT_HEADS, default: str = "BertModel") -> None:
    """BERT, or a type of its layout (RoBERTa: tfcalc.hf_config.roberta), with that type's head classes."""
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"), ("max_position_embeddings", "max_seq_len"))
    positions = r.get("position_embedding_type", "absolute")
    if positions != "absolute":
        raise r.fail(f"'position_embedding_type' {shown(positions)} is not supported (only 'absolute')")
    r.take("type_vocab_size", "type_vocab_size", 2)
    r.activation("hidden_act", "gelu")
    r.take("layer_norm_eps", "norm_eps", 1e-12)
    decoder, cross = r.flag("is_decoder", False), r.flag("add_cross_attention", False)
    r.fields.update(arch="decoder" if decoder else "encoder", pos_encoding="learned", norm="layernorm",
                    norm_placement="post", final_norm=False, gated_ffn=False, attn_bias=True, ffn_bias=True,
                    norm_bias=True, embedding_norm=True, cross_attention=cross)
    head = r.head(heads, default)
    if head == "base":  # BertModel: the pooler reads the first token (in a causal stack, that token alone)
        r.fields.update(pooler=True, lm_head=False, tie_embeddings=False)
    else:  # the MLM head: modeling_bert.py, BertOnlyMLMHead; its decoder weight is the word embeddings
        r.take("tie_word_embeddings", "tie_embeddings", True)
        r.fields.update(pooler=False, lm_head=True, lm_head_transform=True, lm_head_bias=True)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """modeling_bert.py: query, key and value as the q, k, v rows of tfcalc's fused projection; the masked-LM
    head's decoder is the tied word embeddings, its bias stored twice."""
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
        (r"cls\.predictions\.decoder\.weight", tied_head(arch)),
        (r"cls\.predictions\.decoder\.bias", "tied:lm_head.bias"),  # the same tensor as predictions.bias
    ]
