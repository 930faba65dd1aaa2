"""MiniMax-01 config.json files (MiniMax-Text-01, MiniMax-M1; transformers 5.24 modeling_minimax.py,
configuration_minimax.py): Llama-shaped keys (tfcalc.hf_config.llama_like) with MiniMaxConfig's defaults, and

- each layer's mixer from ``layer_types``: "linear_attention", lightning attention (tfcalc.architecture.lightning,
  layer_pattern word ``lightning``: the same heads and head_dim as the softmax layers, ``block_size``), or
  "full_attention", grouped-query softmax attention with RoPE over every channel, no biases. Without
  layer_types: the original files' ``attn_type_list`` (0 lightning, 1 softmax; MiniMax-Text-01's seven lightning
  layers then one softmax, ten times), else MiniMaxConfig.__post_init__'s alternation (even layers full). Note:
  transformers 5.24 reads no attn_type_list -- a minimax file with that list alone builds alternating layers
  there; tfcalc follows the list, the layout the checkpoint was trained in (the remote code's, vLLM's);
- the residual taken after each norm (MiniMaxDecoderLayer: ``residual = hidden_states`` after
  input_layernorm and after post_attention_layernorm; tfcalc's norm_placement normed_residual), weighted
  α·h + β·f(h) by the six *_alpha_factor / *_beta_factor keys (the original files' layernorm_*_alpha/_beta).
  tfcalc builds one α and one β for every sub-layer (residual_alpha, residual_multiplier), which every
  released file has (α 3.5565588200778455, β 1); other values are refused in one line;
- a mixture of ``num_local_experts`` experts of ``intermediate_size`` in every layer, top
  ``num_experts_per_tok`` of a softmax, renormalized (MiniMaxTopKRouter), no shared expert.

``hidden_act`` is both the experts' and the lightning projection's activation: SiLU only (tfcalc builds the
lightning mixer with SiLU). ``sliding_window`` (unused by every release) is refused.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.layer_pattern import compact
from tfcalc.hf_config.llama_like import base_fields, llama_names
from tfcalc.hf_config.names import Rule
from tfcalc.hf_config.reader import Reader

KINDS = ("linear_attention", "full_attention")
FACTORS = ("full_attn", "linear_attn", "mlp")


def minimax(r: Reader) -> None:
    base_fields(r, dict(max_position_embeddings=4096 * 32, rms_norm_eps=1e-5, rope_theta=1e6, n_kv_head=8))
    if r.fields["activation"] != "silu":
        raise r.fail(f"'hidden_act' {shown(r.raw.get('hidden_act'))}: tfcalc builds MiniMax's lightning attention "
                     "with SiLU only (its Q, K, V activation)")
    if r.raw.get("sliding_window") is not None:
        raise r.fail(f"'sliding_window' {shown(r.raw['sliding_window'])} is not built for minimax (every release "
                     "has null)")
    r.fields["rope_fraction"] = 1.0  # MiniMaxRotaryEmbedding's default rope: every channel of head_dim
    r.required(("num_local_experts", "n_expert"))
    r.take("num_experts_per_tok", "n_expert_active", 2)
    r.fields.update(router_norm_topk=True, norm_placement="normed_residual")
    _residual(r)
    _layers(r)
    r.causal_or_base("MiniMax")


def _residual(r: Reader) -> None:
    """One α and one β for every sub-layer (the module docstring), from the six factors."""
    values = {}
    for part in ("alpha", "beta"):
        given = {f"{f}_{part}_factor": r.number(f"{f}_{part}_factor", None) for f in FACTORS}
        given = {k: v for k, v in given.items() if v is not None}
        for key, value in given.items():
            if not 0 < value < float("inf"):
                raise r.fail(f"'{key}' must be a positive finite number; got {shown(value)}")
        if len(set(given.values()) | ({1} if len(given) < len(FACTORS) else set())) > 1:
            raise r.fail(f"the residual {part} factors differ ({', '.join(f'{k} {v}' for k, v in given.items())}): "
                         f"tfcalc builds one {part} for every sub-layer")
        values[part] = next(iter(given.values()), 1)
    r.fields["residual_alpha"] = None if values["alpha"] == 1 else float(values["alpha"])
    r.fields["residual_multiplier"] = None if values["beta"] == 1 else float(values["beta"])


def _layers(r: Reader) -> None:
    """layer_pattern from layer_types, else attn_type_list, else the alternation; block_size for lightning."""
    n = r.fields["n_layer"]
    kinds, types = r.raw.get("layer_types"), r.raw.get("attn_type_list")
    if kinds is None and types is not None:
        if not isinstance(types, list) or not all(t in (0, 1) and not isinstance(t, (bool, float)) for t in types):
            raise r.fail(f"'attn_type_list' must list 0 (lightning) or 1 (softmax) per layer; got {shown(types)}")
        kinds = ["full_attention" if t else "linear_attention" for t in types]
        what = "attn_type_list"
    elif kinds is None:
        kinds = ["full_attention" if (i + 1) % 2 else "linear_attention" for i in range(n)]
        what = "layer_types"
    else:
        what = "layer_types"
        if not isinstance(kinds, list) or not all(isinstance(k, str) and k in KINDS for k in kinds):
            raise r.fail(f"'layer_types' must be a list of {', '.join(KINDS)}; got {shown(kinds)}")
    if len(kinds) != n:
        raise r.fail(f"'{what}' lists {len(kinds)} layers; 'num_hidden_layers' is {n}")
    if "linear_attention" in kinds:
        r.fields["layer_pattern"] = compact(["lightning" if k == "linear_attention" else "full" for k in kinds])
        block = r.number("block_size", 256, integer=True)
        if block is None or block < 1:
            raise r.fail(f"'block_size' must be a positive integer; got {shown(block)}")
        r.fields["lightning_block_size"] = block


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Mixtral's names (llama_names) with the lightning layers' own: qkv_proj, output_gate, norm, out_proj under
    self_attn; transformers' decay buffers (slope_rate, query_decay, key_decay, diagonal_decay, written by
    save_pretrained) are stored tensors that are no parameter, recomputed by tfcalc's module."""
    return llama_names(arch, [
        (r"layers\.(\d+)\.self_attn\.(qkv_proj|output_gate|out_proj|norm)\.weight", "blocks.{0}.attn.{1}.weight"),
        (r"layers\.(\d+)\.self_attn\.(slope_rate|query_decay|key_decay|diagonal_decay)", "buffer")])
