"""Published config.json files of the LFM2 family (Hugging Face Hub, as released), the keys that shape the
model: LiquidAI/LFM2-1.2B (transformers 4.54, its attention layers as ``full_attn_idxs``, its MLP width as
``block_ff_dim`` before Lfm2MLP's adjustment) and LiquidAI/LFM2-8B-A1B (``layer_types``)."""

from __future__ import annotations

# huggingface.co/LiquidAI/LFM2-1.2B/blob/main/config.json
LFM2_1_2B = {
    "architectures": ["Lfm2ForCausalLM"], "model_type": "lfm2", "block_auto_adjust_ff_dim": True, "block_dim": 2048,
    "block_ff_dim": 12288, "block_ffn_dim_multiplier": 1.0, "block_mlp_init_scale": 1.0, "block_multiple_of": 256,
    "block_norm_eps": 1e-05, "block_out_init_scale": 1.0, "block_use_swiglu": True, "block_use_xavier_init": True,
    "bos_token_id": 1, "conv_L_cache": 3, "conv_bias": False, "conv_dim": 2048, "conv_dim_out": 2048,
    "conv_use_xavier_init": True, "eos_token_id": 7, "full_attn_idxs": [2, 5, 8, 10, 12, 14], "hidden_size": 2048,
    "initializer_range": 0.02, "max_position_embeddings": 128000, "norm_eps": 1e-05, "num_attention_heads": 32,
    "num_heads": 32, "num_hidden_layers": 16, "num_key_value_heads": 8, "pad_token_id": 0, "rope_theta": 1000000.0,
    "torch_dtype": "bfloat16", "use_cache": True, "use_pos_enc": True, "vocab_size": 65536,
}
# huggingface.co/LiquidAI/LFM2-8B-A1B/blob/main/config.json
LFM2_8B_A1B = {
    "architectures": ["Lfm2MoeForCausalLM"], "model_type": "lfm2_moe", "bos_token_id": 1, "conv_L_cache": 3,
    "conv_bias": False, "dtype": "bfloat16", "eos_token_id": 7, "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 7168,
    "layer_types": ["conv", "conv", "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
                    "full_attention", "conv", "conv", "conv", "full_attention", "conv", "conv", "conv",
                    "full_attention", "conv", "conv", "full_attention", "conv", "conv"],
    "max_position_embeddings": 128000, "moe_intermediate_size": 1792, "norm_eps": 1e-05, "norm_topk_prob": True,
    "num_attention_heads": 32, "num_dense_layers": 2, "num_experts": 32, "num_experts_per_tok": 4,
    "num_hidden_layers": 24, "num_key_value_heads": 8, "pad_token_id": 0, "rope_theta": 1000000.0,
    "routed_scaling_factor": 1.0, "tie_word_embeddings": True, "use_cache": True, "use_expert_bias": True,
    "vocab_size": 65536,
}
