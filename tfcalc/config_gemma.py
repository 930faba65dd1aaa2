"""The flat fields of Gemma 4's and Gemma 3n's layers beyond Gemma 3's: a mixin of tfcalc.config.ModelConfig (its
fields inherited, keyword-only, each with a default), kept apart so the dataclass stays readable. What each builds
is in the description (tfcalc.architecture: block, model); their rules are checked where they are built. Pure
Python: no torch, typer or rich here.

- ``layer_scalar`` (Gemma 4, modeling_gemma4.py Gemma4TextDecoderLayer.layer_scalar): each block's output, residual
  included, times a scalar of its own, held as a buffer (no parameter; 1 until a checkpoint is loaded);
- ``rope_proportion`` (Gemma 4's global layers, with ``rope_scaling: proportional``; tfcalc.config_rope checks it,
  tfcalc.architecture.rope builds it): the share of a whole head's rotate-half frequencies that turn;
- ``kv_shared_layers`` k (Gemma 4's and Gemma 3n's num_kv_shared_layers; modeling_gemma4.py kv_sharing_modes): the
  last k layers of the stack read the K and V of the last earlier layer of their own kind (local or global): no
  K/V projection, no K norm, no cache of their own (tfcalc.architecture.attention, step 8);
  ``kv_shared_d_ff``: their FFN's width where it is not d_ff (Gemma 4's use_double_wide_mlp: 2 · d_ff);
- ``per_layer_dim`` p (Gemma 4's hidden_size_per_layer_input): per-layer inputs, p channels per layer and token,
  from a second token table of ``per_layer_vocab`` rows (None: vocab_size) and a projection of the embeddings,
  each block adding what it makes of its own (tfcalc.architecture.per_layer);
- ``moe_beside_mlp`` (Gemma 4's enable_moe_block): the mixture of experts runs beside the dense MLP, which is its
  shared expert (``shared_expert_d_ff``), with the router's scales and norms of tfcalc.architecture.ffn, step 5;
- Gemma 3n's (tfcalc.architecture.per_layer): ``altup_inputs`` n (AltUp's streams; ``altup_correct_scale``: the
  active corrected stream times a learned scale before the per-layer input reads it), ``laurel_rank`` (LAuReL beside
  the attention), ``activation_sparsity`` (one share per layer: the gate's Gaussian top-k, tfcalc.architecture.ffn).
  With AltUp the per-layer input is added to the other streams, not the active one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from tfcalc.architecture.patterns import layer_kind
from tfcalc.errors import InputError as ConfigError


@dataclass(frozen=True, kw_only=True)
class GemmaFields:
    layer_scalar: bool = False
    rope_proportion: Optional[float] = None
    kv_shared_layers: Optional[int] = None
    kv_shared_d_ff: Optional[int] = None
    per_layer_dim: Optional[int] = None
    per_layer_vocab: Optional[int] = None
    moe_beside_mlp: bool = False
    altup_inputs: Optional[int] = None
    altup_correct_scale: bool = True
    laurel_rank: Optional[int] = None
    activation_sparsity: Optional[tuple[float, ...]] = None


MAX_SHARED_DEPTH = 100_000  # a stack with shared K/V is described layer by layer (tfcalc.architecture.flat)


def validate_gemma(cfg) -> None:
    """The rules of these fields, one ConfigError line each."""
    if cfg.per_layer_vocab is not None and cfg.per_layer_dim is None:
        raise ConfigError("per_layer_vocab is the rows of the per-layer token table: give per_layer_dim too")
    if cfg.per_layer_dim is not None and (cfg.arch != "decoder" or cfg.parallel_block != "none"
                                          or cfg.embedding_dim not in (None, cfg.d_model)):
        raise ConfigError("per_layer_dim (per-layer inputs) is built for a decoder's sequential blocks, with token "
                          "embeddings d_model wide")
    if cfg.moe_beside_mlp and (cfg.n_expert is None or cfg.norm_placement != "sandwich"):
        raise ConfigError("moe_beside_mlp (Gemma 4's experts beside the MLP) needs n_expert, shared_expert_d_ff (the "
                          "MLP) and norm_placement sandwich")
    _validate_gemma3n(cfg)
    k = cfg.kv_shared_layers
    if k is None:
        if cfg.kv_shared_d_ff is not None:
            raise ConfigError("kv_shared_d_ff is the FFN width of the layers that share K/V: give kv_shared_layers")
        return
    if cfg.arch != "decoder":
        raise ConfigError("kv_shared_layers applies to a decoder's causal stack")
    if k >= cfg.n_layer:
        raise ConfigError(f"kv_shared_layers ({k}) must be below n_layer ({cfg.n_layer}): the layers whose K/V they "
                          "read come before them")
    if cfg.n_layer > MAX_SHARED_DEPTH:
        raise ConfigError(f"kv_shared_layers is described layer by layer: n_layer must be at most "
                          f"{MAX_SHARED_DEPTH:,}; got {cfg.n_layer:,}")
    if (cfg.kv_lora_rank is not None or cfg.cross_attention or cfg.hybrid_pattern is not None
            or getattr(cfg, "linear_mixer", None) is not None):
        raise ConfigError("kv_shared_layers is built for softmax self-attention layers (no latent attention, "
                          "cross-attention, hybrid_pattern or linear_mixer)")
    first = cfg.n_layer - k
    readers = {layer_kind(cfg, i).local for i in range(first, cfg.n_layer)}
    sources = set()
    for i in range(first - 1, -1, -1):  # back from the last source, until both kinds are seen
        sources.add(layer_kind(cfg, i).local)
        if sources >= readers:
            return
    kind = "local" if (readers - sources) == {True} else "global"
    raise ConfigError(f"kv_shared_layers ({k}): a {kind} layer among the last {k} has no earlier {kind} layer whose "
                      "K/V it could read")


def _validate_gemma3n(cfg) -> None:
    if cfg.altup_inputs is not None and (cfg.altup_inputs < 2 or cfg.per_layer_dim is None
                                         or cfg.norm_placement != "sandwich" or cfg.n_expert is not None):
        raise ConfigError("altup_inputs (AltUp's streams) is built as Gemma 3n has it: at least 2 streams, with "
                          "per_layer_dim, norm_placement sandwich and a dense FFN")
    if cfg.laurel_rank is not None and cfg.altup_inputs is None:
        raise ConfigError("laurel_rank is built with AltUp (Gemma 3n): give altup_inputs too")
    sparsity = cfg.activation_sparsity
    if sparsity is not None:
        if len(sparsity) != cfg.n_layer or not all(0 <= s < 1 for s in sparsity):
            raise ConfigError(f"activation_sparsity must give one share in [0, 1) for each of the {cfg.n_layer} "
                              "layers")
        if any(sparsity) and (not cfg.gated_ffn or cfg.n_expert is not None):
            raise ConfigError("activation_sparsity applies to a dense gated FFN's gate")
