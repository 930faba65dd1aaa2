"""config.json files of GPT-NeoX (Pythia), Falcon, OPT and T5, from their modeling files.

- ``gpt_neox``: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size, vocab_size
  (required); max_position_embeddings, layer_norm_eps, hidden_act, rotary_pct (or partial_rotary_factor,
  default 0.25), rotary_emb_base (or rope_theta), use_parallel_residual (default true: attention and
  FFN side by side, each with its own LayerNorm), attention_bias, tie_word_embeddings (default false).
  Biases on every Linear and norm. GPTNeoXForCausalLM or GPTNeoXModel.
- ``falcon``: num_hidden_layers (n_layer), hidden_size, num_attention_heads (n_head), vocab_size
  (required); multi_query (one K/V head), new_decoder_architecture (num_kv_heads K/V heads, and with
  num_ln_in_parallel_attn 2 -- the default there -- two norms), parallel_attn (one shared norm: Falcon-7B),
  bias, ffn_hidden_size (default 4·hidden), activation, layer_norm_epsilon, tie_word_embeddings (default
  true). ALiBi (falcon-rw) is refused. FalconForCausalLM or FalconModel.
- ``opt``: num_hidden_layers, hidden_size, num_attention_heads, ffn_dim, vocab_size (required);
  max_position_embeddings, do_layer_norm_before (false: post-LN, OPT-350m), enable_bias,
  activation_function, tie_word_embeddings (default true). Learned positions with 2 extra rows (OPT's
  offset). A word_embed_proj_dim other than hidden_size (OPT-350m) is the token table's width, projected
  in to hidden_size after the lookup and out again before the LM head (bias-free project_in, project_out).
- ``t5``: d_model, d_kv, d_ff, num_layers, num_heads, vocab_size (required); num_decoder_layers,
  relative_attention_num_buckets, relative_attention_max_distance, feed_forward_proj (relu, gated-gelu,
  ...), layer_norm_epsilon, tie_word_embeddings. An encoder-decoder with one shared token embedding,
  RMSNorm (T5LayerNorm) before each sub-layer, no biases, unscaled scores, and a relative position bias
  per stack. T5 has no position limit; max_seq_len is n_positions (default 512, what it was trained on).
  tie_word_embeddings false (T5 v1.1) counts an untied LM head, as those checkpoints store one
  (transformers 5's T5Config forces tying and keeps the flag only to decide the output scaling).
  T5ForConditionalGeneration, T5Model (no head) or T5EncoderModel (the encoder alone).
"""

from __future__ import annotations

from tfcalc.hf_config.reader import Reader


def gpt_neox(r: Reader) -> None:
    r.divisible_heads()
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("intermediate_size", "d_ff"), ("vocab_size", "vocab_size"))
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.take("layer_norm_eps", "norm_eps", 1e-5)
    r.activation("hidden_act", "gelu")
    r.rope(10000.0, fraction=0.25, fraction_keys=("partial_rotary_factor", "rotary_pct"),
           theta_keys=("rotary_emb_base",))
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.take("attention_bias", "attn_bias", True)
    r.dtype()
    parallel = r.flag("use_parallel_residual", True)
    r.fields.update(norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True, gated_ffn=False,
                    ffn_bias=True, parallel_block="two_norms" if parallel else "none")
    if r.head({"GPTNeoXForCausalLM": "causal", "GPTNeoXModel": "base"}, "GPTNeoXForCausalLM") == "base":
        r.base_model()


def falcon(r: Reader) -> None:
    r.take("num_hidden_layers", "n_layer", required=True, aliases=("n_layer",))
    r.take("num_attention_heads", "n_head", required=True, aliases=("n_head",))
    r.required(("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    r.refuse("alibi", True, "Falcon's ALiBi variant (falcon-rw) is not built here")
    r.refuse("apply_residual_connection_post_layernorm", True, "the residual would start after the norm")
    new_arch, parallel = r.flag("new_decoder_architecture", False), r.flag("parallel_attn", True)
    if new_arch:  # modeling_falcon.py: grouped K/V heads; two norms (ln_attn, ln_mlp) unless told one
        r.take("num_kv_heads", "n_kv_head")
        norms = r.number("num_ln_in_parallel_attn", 2, integer=True)
        layout = "two_norms" if norms == 2 else "shared_norm"
    else:
        r.fields["n_kv_head"] = 1 if r.flag("multi_query", True) else None
        layout = "shared_norm" if parallel else "none"
    r.take("ffn_hidden_size", "d_ff")  # null: 4 * hidden_size
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.activation("activation", "gelu")
    r.rope(10000.0)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    bias = r.flag("bias", False)
    r.fields.update(norm="layernorm", norm_bias=True, norm_placement="pre", final_norm=True, gated_ffn=False,
                    attn_bias=bias, ffn_bias=bias, parallel_block=layout)
    if r.head({"FalconForCausalLM": "causal", "FalconModel": "base"}, "FalconForCausalLM") == "base":
        r.base_model()


def opt(r: Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               ("ffn_dim", "d_ff"), ("vocab_size", "vocab_size"))
    projected = r.number("word_embed_proj_dim", None, integer=True)  # OPT-350m: 512 beside hidden_size 1024
    if projected is not None and projected < 1:
        raise r.fail(f"'word_embed_proj_dim' must be positive; got {projected}")
    r.take("word_embed_proj_dim", "embedding_dim")
    r.refuse("layer_norm_elementwise_affine", False, "LayerNorms without weights are not built here")
    r.take("max_position_embeddings", "max_seq_len", 2048)
    r.activation("activation_function", "relu")
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    pre = r.flag("do_layer_norm_before", True)
    bias = r.flag("enable_bias", True)
    final = pre and not r.flag("_remove_final_layer_norm", False)  # OPTDecoder: a final norm only when pre-LN
    r.fields.update(pos_encoding="learned", position_offset=2, norm="layernorm", norm_bias=True, norm_eps=1e-5,
                    norm_placement="pre" if pre else "post", final_norm=final, gated_ffn=False,
                    attn_bias=bias, ffn_bias=bias)
    if r.head({"OPTForCausalLM": "causal", "OPTModel": "base"}, "OPTForCausalLM") == "base":
        r.base_model()


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


MAPPERS = {"gpt_neox": gpt_neox, "falcon": falcon, "opt": opt, "t5": t5}
