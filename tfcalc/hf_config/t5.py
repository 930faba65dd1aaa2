"""T5 config.json files (modeling_t5.py): d_model, d_kv, d_ff, num_layers, num_heads, vocab_size (required);
num_decoder_layers, relative_attention_num_buckets, relative_attention_max_distance, feed_forward_proj (relu,
gated-gelu, ...), layer_norm_epsilon, tie_word_embeddings. An encoder-decoder with one shared token embedding,
RMSNorm (T5LayerNorm) before each sub-layer, no biases, unscaled scores, and a relative position bias per stack. T5
has no position limit; max_seq_len is n_positions (default 512, what it was trained on). tie_word_embeddings false
(T5 v1.1) counts an untied LM head, as those checkpoints store one (transformers 5's T5Config forces tying and keeps
the flag only to decide the output scaling). T5ForConditionalGeneration, T5Model (no head) or T5EncoderModel (the
encoder alone).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def t5(r: Reader) -> None:
    r.required(("num_layers", "n_layer"), ("d_model", "d_model"), ("num_heads", "n_head"), ("d_kv", "d_head"),
               ("d_ff", "d_ff"), ("vocab_size", "vocab_size"))
    head = r.head({"T5ForConditionalGeneration": "causal", "T5Model": "base", "T5EncoderModel": "encoder"},
                  "T5ForConditionalGeneration")
    if head == "encoder":
        r.fields["arch"] = "encoder"
    else:  # num_layers is the encoder's depth; num_decoder_layers the decoder's (default: the same)
        r.fields.update(arch="encoder-decoder", n_encoder_layer=r.fields["n_layer"])
        r.take("num_decoder_layers", "n_layer", r.fields["n_layer"])
    r.take("n_positions", "max_seq_len", 512)
    r.take("relative_attention_num_buckets", "rel_pos_buckets", 32)
    r.take("relative_attention_max_distance", "rel_pos_max_distance", 128)
    r.take("layer_norm_epsilon", "norm_eps", 1e-6)
    proj = r.get("feed_forward_proj", "relu")
    gated, act = (True, proj.split("-", 1)[1]) if isinstance(proj, str) and proj.startswith("gated-") else (False, proj)
    r.raw = {**r.raw, "feed_forward_proj": "gelu_new" if proj == "gated-gelu" else act}  # configuration_t5.py
    r.activation("feed_forward_proj", "relu")
    r.dtype()
    tied = r.flag("tie_word_embeddings", True)
    r.fields.update(pos_encoding="relative", norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True,
                    gated_ffn=gated, attn_bias=False, ffn_bias=False, attn_scale=1.0, tie_embeddings=tied)
    if head != "causal":
        r.base_model()


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """T5: the decoder is tfcalc's top-level stack, the encoder its ``encoder.`` stack (an encoder-only
    T5EncoderModel: the top level)."""
    enc = "" if arch.kind == "encoder" else "encoder."
    rules = [(r"shared\.weight", "tok_emb.weight"),
             (r"(?:encoder|decoder)\.embed_tokens\.weight", "tied:tok_emb.weight"),
             (r"lm_head\.weight", tied_head(arch))]
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
