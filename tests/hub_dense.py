"""The published config.json files of issue 22's dense types (Hugging Face Hub, as published; keys that
change no count left in, to be ignored), with their published totals. Each total is also derived by hand
in tests/test_hf_dense.py and held against transformers on meta in tests/test_hf_reference.py."""

PHI_2 = {  # microsoft/phi-2
    "architectures": ["PhiForCausalLM"], "model_type": "phi", "attention_dropout": 0.0, "bos_token_id": 50256,
    "embd_pdrop": 0.0, "eos_token_id": 50256, "hidden_act": "gelu_new", "hidden_size": 2560,
    "initializer_range": 0.02, "intermediate_size": 10240, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32, "partial_rotary_factor": 0.4,
    "qk_layernorm": False, "resid_pdrop": 0.1, "rope_scaling": None, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "float16", "use_cache": True, "vocab_size": 51200,
}
STARCODER2_15B = {  # bigcode/starcoder2-15b
    "architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "attention_dropout": 0.1,
    "residual_dropout": 0.1, "embedding_dropout": 0.1, "bos_token_id": 0, "eos_token_id": 0,
    "hidden_act": "gelu_pytorch_tanh", "hidden_size": 6144, "initializer_range": 0.01275, "intermediate_size": 24576,
    "max_position_embeddings": 16384, "mlp_type": "default", "norm_epsilon": 1e-05, "norm_type": "layer_norm",
    "num_attention_heads": 48, "num_hidden_layers": 40, "num_key_value_heads": 4, "rope_theta": 100000,
    "sliding_window": 4096, "tie_word_embeddings": False, "torch_dtype": "float32", "use_bias": True,
    "use_cache": True, "vocab_size": 49152,
}
COMMAND_R = {  # CohereForAI/c4ai-command-r-v01
    "architectures": ["CohereForCausalLM"], "model_type": "cohere", "attention_bias": False, "attention_dropout": 0.0,
    "bos_token_id": 5, "eos_token_id": 255001, "hidden_act": "silu", "hidden_size": 8192, "initializer_range": 0.02,
    "intermediate_size": 22528, "layer_norm_eps": 1e-05, "logit_scale": 0.0625, "max_position_embeddings": 8192,
    "num_attention_heads": 64, "num_hidden_layers": 40, "num_key_value_heads": 64, "pad_token_id": 0,
    "rope_theta": 8000000.0, "torch_dtype": "float16", "use_cache": True, "use_qk_norm": False, "vocab_size": 256000,
}
GRANITE_3_1_8B = {  # ibm-granite/granite-3.1-8b-instruct
    "architectures": ["GraniteForCausalLM"], "model_type": "granite", "attention_bias": False,
    "attention_dropout": 0.1, "attention_multiplier": 0.0078125, "bos_token_id": 0, "embedding_multiplier": 12.0,
    "eos_token_id": 0, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 12800, "logits_scaling": 16.0, "max_position_embeddings": 131072, "mlp_bias": False,
    "num_attention_heads": 32, "num_hidden_layers": 40, "num_key_value_heads": 8, "pad_token_id": 0,
    "residual_multiplier": 0.22, "rms_norm_eps": 1e-05, "rope_scaling": None, "rope_theta": 10000000.0,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "vocab_size": 49155,
}
STARCODER = {  # bigcode/starcoder
    "activation_function": "gelu_pytorch_tanh", "architectures": ["GPTBigCodeForCausalLM"],
    "model_type": "gpt_bigcode", "attention_softmax_in_fp32": True, "multi_query": True, "attn_pdrop": 0.1,
    "bos_token_id": 0, "embd_pdrop": 0.1, "eos_token_id": 0, "initializer_range": 0.02, "layer_norm_epsilon": 1e-05,
    "n_embd": 6144, "n_head": 48, "n_inner": 24576, "n_layer": 40, "n_positions": 8192, "resid_pdrop": 0.1,
    "scale_attention_softmax_in_fp32": True, "scale_attn_weights": True, "torch_dtype": "float32",
    "use_cache": True, "vocab_size": 49152,
}
BLOOM_560M = {  # bigscience/bloom-560m
    "apply_residual_connection_post_layernorm": False, "architectures": ["BloomForCausalLM"], "model_type": "bloom",
    "attention_dropout": 0.0, "attention_softmax_in_fp32": True, "bias_dropout_fusion": True, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_dropout": 0.0, "hidden_size": 1024, "initializer_range": 0.02,
    "layer_norm_epsilon": 1e-05, "masked_softmax_fusion": True, "n_head": 16, "n_inner": None, "n_layer": 24,
    "offset_alibi": 100, "pad_token_id": 3, "pretraining_tp": 1, "skip_bias_add": True, "skip_bias_add_qkv": False,
    "slow_but_exact": False, "unk_token_id": 0, "use_cache": True, "vocab_size": 250880,
}
ROBERTA_BASE = {  # FacebookAI/roberta-base
    "architectures": ["RobertaForMaskedLM"], "model_type": "roberta", "attention_probs_dropout_prob": 0.1,
    "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 768,
    "initializer_range": 0.02, "intermediate_size": 3072, "layer_norm_eps": 1e-05, "max_position_embeddings": 514,
    "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1, "type_vocab_size": 1,
    "vocab_size": 50265,
}
OPT_350M = {  # facebook/opt-350m
    "activation_dropout": 0.0, "activation_function": "relu", "architectures": ["OPTForCausalLM"], "model_type": "opt",
    "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": False, "dropout": 0.1, "eos_token_id": 2,
    "ffn_dim": 4096, "hidden_size": 1024, "init_std": 0.02, "layerdrop": 0.0, "max_position_embeddings": 2048,
    "num_attention_heads": 16, "num_hidden_layers": 24, "pad_token_id": 1, "prefix": "</s>",
    "torch_dtype": "float16", "use_cache": True, "vocab_size": 50272, "word_embed_proj_dim": 512,
}
# model_type -> its file (OPT's is the projected OPT-350m; test_hf_config holds OPT-1.3B)
DENSE = {"phi": PHI_2, "starcoder2": STARCODER2_15B, "cohere": COMMAND_R, "granite": GRANITE_3_1_8B,
         "gpt_bigcode": STARCODER, "bloom": BLOOM_560M, "roberta": ROBERTA_BASE}
