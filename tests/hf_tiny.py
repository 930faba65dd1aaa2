"""Tiny Hugging Face transformers models of every supported model type, built from config objects with
random weights (nothing is downloaded), for the tests that hold tfcalc against transformers.

Each case: a transformers config class and keyword arguments, the model class, and what its forward
takes besides input_ids (an encoder-decoder's decoder ids; a cross-attention stack's encoder states).
Shapes are small and odd on purpose: GQA, sliding windows shorter than the test sequence, partial
rotary, experts that not every token reaches. transformers is imported lazily (seconds to import).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

V, D, L, H, F, T = 61, 32, 2, 4, 48, 10  # vocab, width, layers, heads, FFN width, positions
ALIASES = {"kimi_k2": "deepseek_v3"}  # a model type that is another's architecture (tested in test_deepseek.py)
LLAMA_LIKE = dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, num_key_value_heads=2,
                  intermediate_size=F, max_position_embeddings=32)

TOKENS = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)  # within the tiny vocabulary


@dataclass(frozen=True)
class Case:
    config: str  # transformers config class
    model: str  # transformers model class
    kwargs: dict[str, Any]
    inputs: str = "ids"  # "ids", "seq2seq" (input_ids and decoder_input_ids), "cross" (and encoder_hidden_states)
    output: str = "logits"  # or "last_hidden_state"
    extra: dict[str, Any] = field(default_factory=dict)


# DeepSeek-V3 / V2: every feature switched on in one case or another -- a compressed Q (q_lora_rank) and a
# plain one, YaRN and plain RoPE, interleaved rotary pairs and rotate-half, grouped routing (V3's sigmoid with
# the top-2-sum group score; V2's softmax with the max), the first layer dense, attention biases.
DS = dict(vocab_size=V, hidden_size=D, num_hidden_layers=3, num_attention_heads=H, num_key_value_heads=H,
          intermediate_size=40, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
          first_k_dense_replace=1, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6,
          max_position_embeddings=64)
YARN = dict(rope_type="yarn", rope_theta=10000.0, factor=4.0, original_max_position_embeddings=16, mscale=0.707,
            mscale_all_dim=1.0, beta_fast=32, beta_slow=1)
DEEPSEEK_CASES = {
    "deepseek_v3": Case("DeepseekV3Config", "DeepseekV3ForCausalLM",
                        dict(DS, q_lora_rank=20, n_group=4, topk_group=2, routed_scaling_factor=2.5,
                             rope_parameters=YARN)),
    "deepseek_v3-plain": Case("DeepseekV3Config", "DeepseekV3ForCausalLM",
                              dict(DS, q_lora_rank=None, n_group=1, topk_group=1, first_k_dense_replace=0,
                                   rope_interleave=False, attention_bias=True, n_shared_experts=2,
                                   norm_topk_prob=False)),
    # DeepSeek Sparse Attention: top-5 keys of T = 10, 16 indexer heads (no exact tie at the 5th place)
    "deepseek_v32": Case("DeepseekV32Config", "DeepseekV32ForCausalLM",
                         dict(DS, q_lora_rank=20, n_group=4, topk_group=2, index_topk=5, index_n_heads=16,
                              index_head_dim=8, rope_parameters=YARN)),
    "glm_moe_dsa": Case("GlmMoeDsaConfig", "GlmMoeDsaForCausalLM",
                        dict(DS, q_lora_rank=20, index_topk=5, index_n_heads=16, index_head_dim=8)),
    "deepseek_v2": Case("DeepseekV2Config", "DeepseekV2ForCausalLM",
                        dict(DS, q_lora_rank=None, topk_method="group_limited_greedy", n_group=4, topk_group=2,
                             routed_scaling_factor=1.5, rope_parameters=YARN)),
    "deepseek_v2-lora": Case("DeepseekV2Config", "DeepseekV2ForCausalLM",
                             dict(DS, q_lora_rank=20, n_shared_experts=2)),
}
CASES = {
    "gpt2": Case("GPT2Config", "GPT2LMHeadModel", dict(vocab_size=V, n_embd=D, n_layer=L, n_head=H, n_positions=32)),
    "gpt2-cross": Case("GPT2Config", "GPT2LMHeadModel",
                       dict(vocab_size=V, n_embd=D, n_layer=L, n_head=H, n_positions=32, add_cross_attention=True),
                       inputs="cross"),
    "gpt2-base": Case("GPT2Config", "GPT2Model", dict(vocab_size=V, n_embd=D, n_layer=L, n_head=H, n_positions=32),
                      output="last_hidden_state"),
    "llama": Case("LlamaConfig", "LlamaForCausalLM", dict(LLAMA_LIKE, attention_bias=True, rope_theta=500.0)),
    "mistral": Case("MistralConfig", "MistralForCausalLM", dict(LLAMA_LIKE, sliding_window=4)),
    "mixtral": Case("MixtralConfig", "MixtralForCausalLM",
                    dict(LLAMA_LIKE, num_local_experts=4, num_experts_per_tok=2)),
    "bert": Case("BertConfig", "BertModel",
                 dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=F,
                      max_position_embeddings=32),
                 output="last_hidden_state"),
    "bert-mlm": Case("BertConfig", "BertForMaskedLM",
                     dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=F,
                          max_position_embeddings=32)),
    "bert-decoder": Case("BertConfig", "BertLMHeadModel",
                         dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                              intermediate_size=F, max_position_embeddings=32, is_decoder=True,
                              add_cross_attention=True),
                         inputs="cross"),
    "qwen2": Case("Qwen2Config", "Qwen2ForCausalLM", dict(LLAMA_LIKE)),
    "qwen2_moe": Case("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                      dict(LLAMA_LIKE, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                           shared_expert_intermediate_size=24)),
    "qwen2_moe-mixed": Case("Qwen2MoeConfig", "Qwen2MoeForCausalLM",
                            dict(LLAMA_LIKE, num_hidden_layers=3, num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=16, shared_expert_intermediate_size=24, mlp_only_layers=[0],
                                 decoder_sparse_step=2, intermediate_size=40)),
    "qwen3": Case("Qwen3Config", "Qwen3ForCausalLM", dict(LLAMA_LIKE, head_dim=16)),
    "qwen3_moe": Case("Qwen3MoeConfig", "Qwen3MoeForCausalLM",
                      dict(LLAMA_LIKE, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16,
                           norm_topk_prob=True)),
    "qwen3_moe-mixed": Case("Qwen3MoeConfig", "Qwen3MoeForCausalLM",  # layers 0 and 2 dense: dense_layers
                            dict(LLAMA_LIKE, num_hidden_layers=4, head_dim=16, num_experts=4, num_experts_per_tok=2,
                                 moe_intermediate_size=16, mlp_only_layers=[0, 2], intermediate_size=40)),
    # Qwen3-Next: three gated-DeltaNet layers, then gated attention (layer 3); layer 1 a dense MLP; two value
    # heads per key head, dk != dv; the chunked path pads T = 10 to one chunk of 64 (tests/test_qwen3_next.py)
    "qwen3_next": Case("Qwen3NextConfig", "Qwen3NextForCausalLM",
                       dict(LLAMA_LIKE, num_hidden_layers=4, head_dim=16, linear_num_key_heads=2,
                            linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12, num_experts=6,
                            num_experts_per_tok=2, moe_intermediate_size=20, shared_expert_intermediate_size=24,
                            mlp_only_layers=[1], max_position_embeddings=256)),
    # Qwen3.5: the same hybrid, the DeltaNet's projections as four tensors (tests/test_qwen3_5.py)
    "qwen3_5_text": Case("Qwen3_5TextConfig", "Qwen3_5ForCausalLM",
                         dict(LLAMA_LIKE, num_hidden_layers=4, head_dim=16, linear_num_key_heads=2,
                              linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12)),
    "qwen3_5_moe_text": Case("Qwen3_5MoeTextConfig", "Qwen3_5MoeForCausalLM",
                             dict(LLAMA_LIKE, num_hidden_layers=4, head_dim=16, linear_num_key_heads=2,
                                  linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=12,
                                  num_experts=6, num_experts_per_tok=2, moe_intermediate_size=20,
                                  shared_expert_intermediate_size=24)),
    # sinks, a window of 4 (layer 0) beside full attention (layer 1), expert and router biases, and a SwiGLU
    # limit of 0.2 that the perturbed weights cross both ways (the released 7.0 would never bind here)
    "gpt_oss": Case("GptOssConfig", "GptOssForCausalLM",
                    dict(LLAMA_LIKE, head_dim=8, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
                         swiglu_limit=0.2, rope_parameters={"rope_type": "default", "rope_theta": 150000.0})),
    "phi3": Case("Phi3Config", "Phi3ForCausalLM", dict(LLAMA_LIKE, pad_token_id=0, sliding_window=6)),
    "gemma": Case("GemmaConfig", "GemmaForCausalLM", dict(LLAMA_LIKE, head_dim=16)),
    "gemma2": Case("Gemma2Config", "Gemma2ForCausalLM",
                   dict(LLAMA_LIKE, head_dim=8, sliding_window=4, query_pre_attn_scalar=12,
                        attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    "gpt_neox": Case("GPTNeoXConfig", "GPTNeoXForCausalLM",
                     dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=F,
                          max_position_embeddings=32, rotary_pct=0.25)),
    "gpt_neox-sequential": Case("GPTNeoXConfig", "GPTNeoXForCausalLM",
                                dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                     intermediate_size=F, max_position_embeddings=32, use_parallel_residual=False)),
    "falcon": Case("FalconConfig", "FalconForCausalLM",
                   dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, multi_query=True,
                        parallel_attn=True, new_decoder_architecture=False, bias=False)),
    "falcon-40b-like": Case("FalconConfig", "FalconForCausalLM",
                            dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                 num_kv_heads=2, new_decoder_architecture=True, bias=False)),
    "opt": Case("OPTConfig", "OPTForCausalLM",
                dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, ffn_dim=F,
                     max_position_embeddings=32, word_embed_proj_dim=D)),
    "t5": Case("T5Config", "T5ForConditionalGeneration",
               dict(vocab_size=V, d_model=D, d_kv=8, d_ff=F, num_layers=L, num_decoder_layers=3, num_heads=H,
                    relative_attention_num_buckets=8, relative_attention_max_distance=20), inputs="seq2seq"),
    "t5-gated": Case("T5Config", "T5ForConditionalGeneration",
                     dict(vocab_size=V, d_model=D, d_kv=8, d_ff=F, num_layers=L, num_heads=H,
                          feed_forward_proj="gated-gelu"), inputs="seq2seq"),
    # DeepSeek (latent attention, grouped routing, YaRN, dense-first layers), above
    **DEEPSEEK_CASES,
    # issue 22's dense types, each distinctive feature switched on
    "phi": Case("PhiConfig", "PhiForCausalLM",
                dict(LLAMA_LIKE, qk_layernorm=True, partial_rotary_factor=0.5, hidden_act="gelu_new")),
    "starcoder2": Case("Starcoder2Config", "Starcoder2ForCausalLM", dict(LLAMA_LIKE, sliding_window=4)),
    "cohere": Case("CohereConfig", "CohereForCausalLM",
                   dict(LLAMA_LIKE, use_qk_norm=True, logit_scale=0.5, attention_bias=True)),
    "granite": Case("GraniteConfig", "GraniteForCausalLM",
                    dict(LLAMA_LIKE, embedding_multiplier=3.0, residual_multiplier=0.5, attention_multiplier=0.2,
                         logits_scaling=4.0, tie_word_embeddings=True)),
    "gpt_bigcode": Case("GPTBigCodeConfig", "GPTBigCodeForCausalLM",
                        dict(vocab_size=V, n_embd=D, n_layer=L, n_head=H, n_positions=32)),
    "gpt_bigcode-mha": Case("GPTBigCodeConfig", "GPTBigCodeForCausalLM",
                            dict(vocab_size=V, n_embd=D, n_layer=L, n_head=H, n_positions=32, multi_query=False)),
    "bloom": Case("BloomConfig", "BloomForCausalLM", dict(vocab_size=V, hidden_size=48, n_layer=L, n_head=6)),
    "roberta": Case("RobertaConfig", "RobertaModel",
                    dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, intermediate_size=F,
                         max_position_embeddings=34, type_vocab_size=1, pad_token_id=1),
                    output="last_hidden_state", extra=dict(pad=1)),
    "roberta-mlm": Case("RobertaConfig", "RobertaForMaskedLM",
                        dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                             intermediate_size=F, max_position_embeddings=34, pad_token_id=3),
                        extra=dict(pad=3)),
    "opt-350m-like": Case("OPTConfig", "OPTForCausalLM",
                          dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H, ffn_dim=F,
                               max_position_embeddings=32, word_embed_proj_dim=24, do_layer_norm_before=False)),
    "bert-causal": Case("BertConfig", "BertLMHeadModel",
                        dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                             intermediate_size=F, max_position_embeddings=32, is_decoder=True)),
    "bert-decoder-base": Case("BertConfig", "BertModel",
                              dict(vocab_size=V, hidden_size=D, num_hidden_layers=L, num_attention_heads=H,
                                   intermediate_size=F, max_position_embeddings=32, is_decoder=True,
                                   add_cross_attention=True),
                              inputs="cross", output="last_hidden_state"),
    # issue 22 (part D): NoPE layers, OLMo 2's output norms and whole-projection Q/K norms, GLM-4's four
    # norms and interleaved partial rotary
    "smollm3": Case("SmolLM3Config", "SmolLM3ForCausalLM",
                    dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, no_rope_layer_interval=2, rope_theta=1000.0)),
    "smollm3-listed": Case("SmolLM3Config", "SmolLM3ForCausalLM",
                           dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, no_rope_layers=[0, 1, 1],
                                tie_word_embeddings=False)),
    "olmo2": Case("Olmo2Config", "Olmo2ForCausalLM", dict(LLAMA_LIKE, **TOKENS)),
    # EXAONE 4: output norms, per-head Q/K norms, three sliding layers (window 3, RoPE) then a full one without RoPE
    "exaone4": Case("Exaone4Config", "Exaone4ForCausalLM",
                    dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, sliding_window=3, sliding_window_pattern=4,
                         rope_parameters={"rope_type": "default", "rope_theta": 100.0})),
    "exaone4-full": Case("Exaone4Config", "Exaone4ForCausalLM",
                         dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=2, sliding_window=None,
                              layer_types=["full_attention"] * 2, tie_word_embeddings=True)),
    # Seed-OSS: biases on Q, K, V (and on O and the MLP where asked), head_dim wider than hidden / heads
    "seed_oss": Case("SeedOssConfig", "SeedOssForCausalLM",
                     dict(LLAMA_LIKE, **TOKENS, head_dim=16, attention_dropout=0.0, residual_dropout=0.0)),
    "seed_oss-biases": Case("SeedOssConfig", "SeedOssForCausalLM",
                            dict(LLAMA_LIKE, **TOKENS, attention_out_bias=True, mlp_bias=True, attention_dropout=0.0,
                                 residual_dropout=0.0, tie_word_embeddings=True)),
    # GLM-4.5: GQA with Q/K/V biases and per-head Q/K norms, half-rotary; a dense layer, then DeepSeek-V3's experts
    # (4 experts in 2 groups, top-2 of 1 group, a shared expert, sigmoid routing with a correction bias, scaled)
    "glm4_moe": Case("Glm4MoeConfig", "Glm4MoeForCausalLM",
                     dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, head_dim=16, attention_bias=True, use_qk_norm=True,
                          moe_intermediate_size=12, n_routed_experts=4, num_experts_per_tok=2, n_shared_experts=1,
                          n_group=2, topk_group=1, routed_scaling_factor=2.5, first_k_dense_replace=1)),
    # GLM-4.7-Flash: DeepSeek-V3's latent attention (compressed Q, interleaved rotary pairs) and experts (8 in 4
    # groups, top-2 of 2 groups, a shared expert, scaled); mlp_layer_types with a dense layer that is not first
    "glm4_moe_lite": Case("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM",
                          dict({k: v for k, v in DS.items() if k != "first_k_dense_replace"}, **TOKENS,
                               q_lora_rank=20, n_group=4, topk_group=2, routed_scaling_factor=1.8,
                               mlp_layer_types=["sparse", "dense", "sparse"])),
    "glm4_moe_lite-default": Case("Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM",
                                  dict(DS, **TOKENS, q_lora_rank=None, rope_interleave=False, attention_bias=True)),
    # ERNIE-4.5 MoE: interleaved rotary pairs over the whole head; 8 experts top-2 (softmax, chosen with the
    # correction bias, renormalized) and 2 shared, on layers 1 and 3 only (start 1, interval 2, end 3 of 5)
    "ernie4_5_moe": Case("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM",
                         dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=5, moe_intermediate_size=12, moe_num_experts=8,
                              moe_k=2, moe_num_shared_experts=2, moe_layer_start_index=1, moe_layer_interval=2,
                              moe_layer_end_index=3, rope_parameters={"rope_type": "default", "rope_theta": 100.0})),
    "ernie4_5_moe-default": Case("Ernie4_5_MoeConfig", "Ernie4_5_MoeForCausalLM",
                                 dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, moe_intermediate_size=12,
                                      moe_num_experts=4, moe_k=2, moe_num_shared_experts=0)),
    # MiMo-V2-Flash: Q/K heads of 16 and V heads of 8, Q/K/V biases; five sliding layers (window 3, twice the K/V
    # heads, sinks) to one full, RoPE bases per type (10 and 1000) on a third of each head; values scaled; a dense
    # first layer, then 8 experts top-2 in 2 groups (sigmoid routing with a correction bias, scaled)
    "mimo_v2_flash": Case("MiMoV2FlashConfig", "MiMoV2FlashForCausalLM",
                          dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=6, num_key_value_heads=1, head_dim=16,
                               v_head_dim=8, attention_bias=True, sliding_window=3, moe_intermediate_size=12,
                               n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
                               routed_scaling_factor=1.5,
                               rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0,
                                                                   "partial_rotary_factor": 0.5},
                                                "sliding_attention": {"rope_type": "default", "rope_theta": 10.0,
                                                                      "partial_rotary_factor": 0.5}})),
    # MiniMax-M2: whole-projection Q/K norms, rotary on 8 of 16 channels (rotary_dim), 4 experts top-2 in every
    # layer, sigmoid routing with a correction bias, renormalized
    "minimax_m2": Case("MiniMaxM2Config", "MiniMaxM2ForCausalLM",
                       dict(LLAMA_LIKE, **TOKENS, head_dim=16, rotary_dim=8, intermediate_size=12, num_local_experts=4,
                            num_experts_per_tok=2)),
    # Apertus: xIELU MLP (not gated; its two scalars perturbed like every weight), Q/K norms per head, plain RoPE
    # (the released llama3 scaling is refused by load_model), and one with biases on Q, K, V and O
    "apertus": Case("ApertusConfig", "ApertusForCausalLM",
                    dict(LLAMA_LIKE, **TOKENS, rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    "apertus-biases": Case("ApertusConfig", "ApertusForCausalLM",
                           dict(LLAMA_LIKE, **TOKENS, attention_bias=True, tie_word_embeddings=True,
                                rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    # OLMo 3: OLMo 2's blocks, sliding layers (window 3) and a full one, RoPE bases per layer type (10 and 1000)
    "olmo3": Case("Olmo3Config", "Olmo3ForCausalLM",
                  dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, sliding_window=3,
                       layer_types=["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"],
                       rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
                                        "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}})),
    # OLMo-Hybrid: gated-DeltaNet layers (pre-norm, six projections, β in [0, 2]; 4 heads of dk = dv = 6, as
    # transformers 5.24's save_pretrained splits the convolution into three equal parts: tests/test_olmo_hybrid.py)
    # beside OLMo 3's attention (output norms); T = 10 in one chunk of 64
    "olmo_hybrid": Case("OlmoHybridConfig", "OlmoHybridForCausalLM",
                        dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, linear_value_head_dim=6,
                             layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
                             rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    # MiniMax-01: lightning layers (blocks of 4: T = 10 is two whole blocks and a last one of 2) beside softmax
    # attention (layer 1), the residual after each norm weighted 1.7·h + 0.6·f(h), 3 experts top 2 every layer
    # (tests/test_minimax.py)
    "minimax": Case("MiniMaxConfig", "MiniMaxForCausalLM",
                    dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, head_dim=8, num_local_experts=3, block_size=4,
                         layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
                         **{f"{p}_{a}_factor": v for p in ("full_attn", "linear_attn", "mlp")
                            for a, v in (("alpha", 1.7), ("beta", 0.6))},
                         rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    # LFM2: short gated convolutions (kernel 3) and one attention layer; biases on the convolutions (conv_bias),
    # and the MLP's width adjusted (int(2·48/3) = 32, a multiple of 16). LFM2-MoE: a dense first layer, then 8
    # experts of 16 (top 2, sigmoid routing, scaled); layer_types with conv layers first and last
    "lfm2": Case("Lfm2Config", "Lfm2ForCausalLM",
                 dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, conv_bias=True, block_multiple_of=16,
                      layer_types=["conv", "full_attention", "conv"],
                      rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    "lfm2_moe": Case("Lfm2MoeConfig", "Lfm2MoeForCausalLM",
                     dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, intermediate_size=40, moe_intermediate_size=16,
                          num_experts=8, num_experts_per_tok=2, num_dense_layers=1, routed_scaling_factor=1.5,
                          layer_types=["conv", "full_attention", "conv", "conv"],
                          rope_parameters={"rope_type": "default", "rope_theta": 1000.0})),
    # Gemma 3: local layers (window 4, base 10) and a global one (base 1000), 5 : 1 cut to 3 layers; Q/K norms
    "gemma3_text": Case("Gemma3TextConfig", "Gemma3ForCausalLM",
                        dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, head_dim=8, sliding_window=4,
                             query_pre_attn_scalar=12, layer_types=["sliding_attention", "full_attention",
                                                                     "sliding_attention"],
                             rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1000.0},
                                              "sliding_attention": {"rope_type": "default", "rope_theta": 10.0}})),
    # attn_logit_softcapping is ignored by modeling_gemma3.py (and so by tfcalc); the final soft-cap is not
    "gemma3_text-capped": Case("Gemma3TextConfig", "Gemma3ForCausalLM",
                               dict(LLAMA_LIKE, **TOKENS, head_dim=8, sliding_window=3, sliding_window_pattern=2,
                                    attn_logit_softcapping=2.0, final_logit_softcapping=3.0)),
    # Llama 4: MoE (4 experts, top-1, shared expert) on every 2nd layer, dense layers of intermediate_size_mlp;
    # NoPE every 2nd layer with the attention temperature (floor_scale 2: it varies within 10 tokens), chunks of
    # 3 on the RoPE layers, Q/K L2 norms
    "llama4_text": Case("Llama4TextConfig", "Llama4ForCausalLM",
                        dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, head_dim=8, intermediate_size=16,
                             intermediate_size_mlp=40, num_local_experts=4, interleave_moe_layer_step=2,
                             no_rope_layer_interval=2, attention_chunk_size=3, floor_scale=2, attn_scale=0.3,
                             rope_parameters={"rope_type": "default", "rope_theta": 100.0})),
    "glm4": Case("Glm4Config", "Glm4ForCausalLM", dict(LLAMA_LIKE, **TOKENS, head_dim=16, partial_rotary_factor=0.5)),
    # Gemma 4 (31B-like): global layers of 16-wide heads, one K/V head, V read from K, proportional RoPE (a
    # quarter of the head turns), the last layer global whatever layer_types says; final soft-cap; no per-layer
    # embeddings (hidden_size_per_layer_input 0)
    "gemma4_text": Case("Gemma4TextConfig", "Gemma4ForCausalLM",
                        dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=4, head_dim=8, global_head_dim=16,
                             num_global_key_value_heads=1, attention_k_eq_v=True, hidden_size_per_layer_input=0,
                             sliding_window=3, final_logit_softcapping=3.0,
                             layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                          "sliding_attention"])),
    # Gemma 4 E2B-like: per-layer inputs (6 channels a layer from a table of the vocabulary's rows), the last 3 of
    # 6 layers reading the K/V of layers 1 (global) and 2 (local), their MLPs twice as wide
    "gemma4_text-ple": Case("Gemma4TextConfig", "Gemma4ForCausalLM",
                            dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=6, head_dim=8, global_head_dim=16,
                                 hidden_size_per_layer_input=6, vocab_size_per_layer_input=V, sliding_window=3,
                                 num_kv_shared_layers=3, use_double_wide_mlp=True,
                                 layer_types=["sliding_attention", "full_attention", "sliding_attention",
                                              "sliding_attention", "full_attention", "full_attention"])),
    # Gemma 4 26B-A4B-like: 8 experts of 12, top 3, beside the MLP of 48 in every layer (their router reads the
    # unnormed stream), global layers of 16-wide heads and V from K
    "gemma4_text-moe": Case("Gemma4TextConfig", "Gemma4ForCausalLM",
                            dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, head_dim=8, global_head_dim=16,
                                 num_global_key_value_heads=1, attention_k_eq_v=True, hidden_size_per_layer_input=0,
                                 sliding_window=4, enable_moe_block=True, num_experts=8, top_k_experts=3,
                                 moe_intermediate_size=12, final_logit_softcapping=5.0,
                                 layer_types=["sliding_attention", "sliding_attention", "full_attention"])),
    # Gemma 3n: 3 AltUp streams, LAuReL of rank 5, per-layer inputs (6 a layer, a table of 50 rows: ids past it
    # read row 0), the last 2 of 6 layers reading K/V, activation sparsity on the first two layers
    "gemma3n_text": Case("Gemma3nTextConfig", "Gemma3nForCausalLM",
                         dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=6, head_dim=8, hidden_size_per_layer_input=6,
                              vocab_size_per_layer_input=50, sliding_window=3, num_kv_shared_layers=2, laurel_rank=5,
                              altup_num_inputs=3, activation_sparsity_pattern=[0.95, 0.9, 0.0, 0.0, 0.0, 0.0],
                              layer_types=["sliding_attention", "full_attention"] * 3)),
    # without attention_k_eq_v: the global layers keep V's projection and num_key_value_heads (the global K/V
    # heads are read with attention_k_eq_v only), default RoPE there with its own base
    "gemma4_text-plain": Case("Gemma4TextConfig", "Gemma4ForCausalLM",
                              dict(LLAMA_LIKE, **TOKENS, num_hidden_layers=3, head_dim=8, global_head_dim=12,
                                   num_global_key_value_heads=1, hidden_size_per_layer_input=0, sliding_window=4,
                                   layer_types=["sliding_attention", "full_attention", "full_attention"],
                                   rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 100.0},
                                                    "sliding_attention": {"rope_type": "default",
                                                                          "rope_theta": 10.0}})),
}
SOURCE = 7  # encoder tokens (or external states) for the cases that read them


def build(name: str):
    """The transformers model of a case, random weights, eval mode, eager attention (explicit matmuls)."""
    import torch
    import transformers

    case = CASES[name]
    torch.manual_seed(0)
    config = getattr(transformers, case.config)(**case.kwargs)
    config._attn_implementation = "eager"
    if hasattr(config, "_experts_implementation"):  # the per-expert loop: grouped_mm has no FLOP formula
        config._experts_implementation = "eager"
    model = getattr(transformers, case.model)(config).eval()
    with torch.no_grad():  # biases and norms start at 0 or 1: perturb every weight, so each one shows
        for p in model.parameters():
            p.add_(torch.randn_like(p), alpha=0.05)
    return model


def inputs(name: str, batch: int = 2, seq: int = T, seed: int = 1) -> dict[str, Any]:
    """Random keyword inputs of a case's forward."""
    import torch

    g = torch.Generator().manual_seed(seed)
    out = {"input_ids": torch.randint(0, V, (batch, seq), generator=g)}
    pad = CASES[name].extra.get("pad")
    if pad is not None:  # RoBERTa numbers positions past its padding: input without padding (as tfcalc assumes)
        out["input_ids"][out["input_ids"] == pad] = pad + 1
    if CASES[name].inputs == "seq2seq":
        out["input_ids"] = torch.randint(0, V, (batch, SOURCE), generator=g)
        out["decoder_input_ids"] = torch.randint(0, V, (batch, seq), generator=g)
    elif CASES[name].inputs == "cross":
        out["encoder_hidden_states"] = torch.randn(batch, SOURCE, D, generator=g)
    return out


def output(name: str, result) -> Any:
    return getattr(result, CASES[name].output)
