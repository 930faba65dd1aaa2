"""Llama-shaped config.json files (RoPE, RMSNorm, gated FFN, no biases unless said): llama, mistral,
mixtral, qwen2, qwen2_moe, qwen3, phi3, gemma, gemma2.

Required: num_hidden_layers, hidden_size, num_attention_heads, intermediate_size (qwen2_moe:
moe_intermediate_size), vocab_size. Optional, with the defaults of each transformers config class:
num_key_value_heads, head_dim, max_position_embeddings, rms_norm_eps, rope_theta (or
rope_parameters.rope_theta), hidden_act, tie_word_embeddings, torch_dtype, sliding_window and
layer_types. What each type adds, from its modeling file:

- llama: attention_bias, mlp_bias (biases on Q/K/V/O and on the FFN);
- mistral: sliding_window on every layer; mixtral: num_local_experts, num_experts_per_tok;
- qwen2: Q/K/V biases and no O bias (Qwen2Attention: o_proj bias=False);
- qwen2_moe: num_experts, num_experts_per_tok, norm_topk_prob (false: the top-k softmax weights are not
  renormalized), a shared expert (shared_expert_intermediate_size) with a sigmoid gate, qkv_bias; dense
  layers of intermediate_size where decoder_sparse_step > 1 (moe_every) or mlp_only_layers lists them
  (first_dense_layers for the first k, else dense_layers); a file where no layer has the experts
  (num_experts 0, every layer in mlp_only_layers, decoder_sparse_step past the depth) is read as the
  dense model transformers builds from it: every layer an MLP of intermediate_size, no router, no
  shared expert;
- qwen3: q_norm and k_norm (RMSNorm over each head), head_dim (default 128), attention_bias;
- phi3: fused qkv_proj and gate_up_proj (the same tensors split by rows), partial_rotary_factor;
- gemma: head_dim (default 256), GeGLU (hidden_activation gelu_pytorch_tanh), embeddings × √d, tied
  head; RMSNorm scales by (1 + w), the same parameters;
- gemma2: gemma's, plus sandwich norms, query_pre_attn_scalar (scores scaled by its inverse square
  root), attn_logit_softcapping, final_logit_softcapping, and windowed layers alternating with full ones.
"""

from __future__ import annotations

from typing import Any, Callable

from tfcalc.errors import shown
from tfcalc.hf_config.reader import Reader


def _heads(prefix: str) -> dict[str, str]:
    return {f"{prefix}ForCausalLM": "causal", f"{prefix}Model": "base"}


def _common(r: Reader, defaults: dict[str, Any], d_ff_key: str | None = "intermediate_size") -> None:
    """The fields every Llama-shaped file has; d_ff from d_ff_key (None: the caller reads it)."""
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("num_attention_heads", "n_head"),
               *([(d_ff_key, "d_ff")] if d_ff_key else []), ("vocab_size", "vocab_size"))
    r.take("num_key_value_heads", "n_kv_head")  # null: = num_attention_heads
    r.take("head_dim", "d_head", defaults.get("head_dim"))  # null: hidden_size / num_attention_heads
    r.take("max_position_embeddings", "max_seq_len", defaults["max_position_embeddings"])
    r.take("rms_norm_eps", "norm_eps", defaults["rms_norm_eps"])
    r.rope(defaults["rope_theta"])
    r.activation("hidden_act", defaults.get("hidden_act", "silu"), aliases=("hidden_activation",))
    r.take("tie_word_embeddings", "tie_embeddings", defaults.get("tie", False))
    r.dtype()
    r.fields.update(norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, gated_ffn=True,
                    attn_bias=False, ffn_bias=False)


def _finish(r: Reader, prefix: str) -> None:
    if r.head(_heads(prefix), f"{prefix}ForCausalLM") == "base":
        r.base_model()


def llama(r: Reader) -> None:
    r.divisible_heads()
    _common(r, dict(max_position_embeddings=2048, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.take("attention_bias", "attn_bias", False)
    r.take("mlp_bias", "ffn_bias", False)
    _finish(r, "Llama")


def mistral(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.windows()
    _finish(r, "Mistral")


def mixtral(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-5, rope_theta=1e6))
    r.required(("num_local_experts", "n_expert"), ("num_experts_per_tok", "n_expert_active"))
    r.windows()
    _finish(r, "Mixtral")


def _qwen_windows(r: Reader) -> None:
    """Qwen2/3: the window applies only with use_sliding_window, and then (without layer_types) only
    from layer max_window_layers on (full attention below it: a layer_pattern)."""
    used = r.flag("use_sliding_window", False)
    below = r.number("max_window_layers", 28, integer=True)
    if used and r.raw.get("layer_types") is None and below:  # configuration_qwen2.py's layer_types
        n = r.fields["n_layer"]
        r.raw = {**r.raw, "layer_types": ["sliding_attention" if i >= below else "full_attention" for i in range(n)]}
    r.windows(used=used)


def qwen2(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0))
    r.fields.update(attn_bias=True, attn_out_bias=False)  # modeling_qwen2.py: q/k/v_proj bias, o_proj none
    _qwen_windows(r)
    _finish(r, "Qwen2")


def qwen3(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=128))
    r.take("attention_bias", "attn_bias", False)
    r.fields.update(qk_norm=True)
    _qwen_windows(r)
    _finish(r, "Qwen3")


def qwen2_moe(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=10000.0), d_ff_key=None)
    if _qwen2_moe_layers(r, r.get("num_experts")):
        r.required(("moe_intermediate_size", "d_ff"), ("num_experts", "n_expert"),
                   ("num_experts_per_tok", "n_expert_active"))
        r.fields["router_norm_topk"] = r.flag("norm_topk_prob", False)
        shared = r.take("shared_expert_intermediate_size", "shared_expert_d_ff", 5632)
        r.fields["shared_expert_gate"] = bool(shared)
    qkv_bias = r.flag("qkv_bias", True)
    r.fields.update(attn_bias=qkv_bias, attn_out_bias=False)
    _qwen_windows(r)
    _finish(r, "Qwen2Moe")


def _qwen2_moe_layers(r: Reader, experts: Any, dense_width: int = 5632) -> bool:
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


def phi3(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=4096, rms_norm_eps=1e-5, rope_theta=10000.0))
    r.windows()
    _finish(r, "Phi3")


def _gemma_common(r: Reader) -> None:
    _common(r, dict(max_position_embeddings=8192, rms_norm_eps=1e-6, rope_theta=10000.0, head_dim=256, tie=True))
    r.take("attention_bias", "attn_bias", False)
    r.refuse("use_bidirectional_attention", True, "every layer is causal here")
    r.fields.update(embedding_scale=True)  # modeling_gemma.py: embeddings × sqrt(hidden_size)


def gemma(r: Reader) -> None:
    _gemma_common(r)
    # configuration_gemma.py: the legacy hidden_act "gelu" of the released files means the tanh approximation
    act = r.get("hidden_activation", r.get("hidden_act", "gelu_pytorch_tanh"))
    r.raw = {**r.raw, "hidden_act": "gelu_pytorch_tanh" if act == "gelu" else act}
    r.activation("hidden_act", "gelu_pytorch_tanh")
    _finish(r, "Gemma")


def gemma2(r: Reader) -> None:
    r.divisible_heads()
    _gemma_common(r)
    r.activation("hidden_activation", "gelu_pytorch_tanh")  # modeling_gemma2.py reads this key, not hidden_act
    scalar = r.number("query_pre_attn_scalar", 256)
    r.fields.update(norm_placement="sandwich", attn_scale=scalar ** -0.5,
                    attn_softcap=r.number("attn_logit_softcapping", 50.0),
                    logit_softcap=r.number("final_logit_softcapping", 30.0))
    if r.raw.get("layer_types") is None:  # Gemma2Config's default: layers 0, 2, 4, ... windowed
        n = r.fields["n_layer"]
        r.raw = {**r.raw, "layer_types": ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]}
    r.raw.setdefault("sliding_window", 4096)
    r.windows()
    _finish(r, "Gemma2")


MAPPERS: dict[str, Callable[[Reader], None]] = {
    "llama": llama, "mistral": mistral, "mixtral": mixtral, "qwen2": qwen2, "qwen2_moe": qwen2_moe, "qwen3": qwen3,
    "phi3": phi3, "gemma": gemma, "gemma2": gemma2,
}
