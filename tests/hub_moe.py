"""Published config.json files of the 2025 mixtures of experts (Hugging Face Hub, as released), the keys
that shape the model: openai/gpt-oss-120b and gpt-oss-20b, Qwen/Qwen3-30B-A3B and Qwen3-235B-A22B."""

from __future__ import annotations

_OSS_LAYERS = 36
GPT_OSS_120B = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "attention_bias": True, "attention_dropout": 0.0,
    "eos_token_id": 200002, "experts_per_token": 4, "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880,
    "initial_context_length": 4096, "initializer_range": 0.02, "intermediate_size": 2880,
    "layer_types": ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(_OSS_LAYERS)],
    "max_position_embeddings": 131072, "num_attention_heads": 64, "num_experts_per_tok": 4,
    "num_hidden_layers": _OSS_LAYERS, "num_key_value_heads": 8, "num_local_experts": 128,
    "output_router_logits": False, "pad_token_id": 199999,
    "quantization_config": {"modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                       "model.embed_tokens", "lm_head"], "quant_method": "mxfp4"},
    "rms_norm_eps": 1e-05,
    "rope_scaling": {"beta_fast": 32.0, "beta_slow": 1.0, "factor": 32.0, "original_max_position_embeddings": 4096,
                     "rope_type": "yarn", "truncate": False},
    "rope_theta": 150000, "router_aux_loss_coef": 0.9, "sliding_window": 128, "swiglu_limit": 7.0,
    "tie_word_embeddings": False, "use_cache": True, "vocab_size": 201088,
}
GPT_OSS_20B = {**GPT_OSS_120B, "num_hidden_layers": 24, "num_local_experts": 32,
               "layer_types": GPT_OSS_120B["layer_types"][:24]}
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
    "attention_dropout": 0.0, "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [], "moe_intermediate_size": 768,
    "norm_topk_prob": True, "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "output_router_logits": False, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": None,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
    "vocab_size": 151936,
}
QWEN3_235B_A22B = {**QWEN3_30B_A3B, "hidden_size": 4096, "intermediate_size": 12288, "max_window_layers": 94,
                   "moe_intermediate_size": 1536, "num_attention_heads": 64, "num_hidden_layers": 94}
# (config.json, preset, published total, published active, what the published active count leaves out)
PUBLISHED = {
    # OpenAI 2025, gpt-oss model card (arXiv 2508.10925), Table 1: 116.83B total, 5.13B active; 20.91B,
    # 3.61B. Its active count leaves out the input embedding (a lookup): V·d = 201,088 · 2,880.
    "gpt-oss-120b": (GPT_OSS_120B, 116.83e9, 5.13e9, 201088 * 2880),
    "gpt-oss-20b": (GPT_OSS_20B, 20.91e9, 3.61e9, 201088 * 2880),
    # Qwen Team 2025, Qwen3 Technical Report (arXiv 2505.09388) and the model cards: 30.5B total, 3.3B
    # activated; 235B, 22B (embeddings counted)
    "qwen3-30b-a3b": (QWEN3_30B_A3B, 30.5e9, 3.3e9, 0),
    "qwen3-235b-a22b": (QWEN3_235B_A22B, 235e9, 22e9, 0),
}
