"""Mamba2 config.json files (Codestral Mamba; modeling_mamba2.py, configuration_mamba2.py): every layer a
Mamba2 mixer alone beside its RMSNorm (Mamba2Block: x + mixer(norm(x)), no FFN), no positions, a final RMSNorm
(norm_f), an LM head tied to the embeddings only when tie_word_embeddings says so (default false). The mixer's
sizes (tfcalc.architecture.mamba2): num_heads, head_dim, n_groups, state_size, conv_kernel, chunk_size,
use_bias, use_conv_bias. transformers refuses a file whose hidden_size·expand is not num_heads·head_dim
(Mamba2Config.validate_architecture), and so does tfcalc. A Mamba2 model has no attention, so ``n_head`` is the
SSM's heads (read by no count) and ``max_seq_len`` bounds only what tfcalc runs (no position table).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

NO_POSITIONS_MAX = 1 << 20  # the tokens tfcalc lets a run ask for: the model itself has no position limit


def _number(value):
    """A JSON number, or transformers 5's spelling of a non-finite one ({"__float__": "Infinity"})."""
    if isinstance(value, dict) and set(value) == {"__float__"} and isinstance(value["__float__"], str):
        return float(value["__float__"]) if value["__float__"] in ("Infinity", "-Infinity", "NaN") else None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def ssm_fields(r: Reader, heads: str, head_dim: str, state: str, groups: str, kernel: str, chunk: str, bias: str,
               defaults: dict) -> None:
    """The Mamba2 mixer's keys (their names differ between mamba2 and nemotron_h; ``defaults`` by key)."""
    for key, field in ((heads, "ssm_heads"), (head_dim, "ssm_head_dim"), (state, "ssm_state_size"),
                       (groups, "ssm_groups"), (kernel, "ssm_conv_kernel"), (chunk, "ssm_chunk_size")):
        r.fields[field] = r.size(key, defaults[key])
    r.fields["ssm_bias"] = r.flag(bias, defaults[bias])
    r.fields["ssm_conv_bias"] = r.flag("use_conv_bias", True)
    act = r.get("mamba_hidden_act" if "mamba_hidden_act" in r.raw else "hidden_act", "silu")
    if act != "silu":
        raise r.fail(f"the Mamba2 mixer's activation {act!r} is not built: transformers' torch path applies SiLU")
    limit = r.get("time_step_limit", r.get("mamba_dt_limit", [0.0, float("inf")]))
    if not isinstance(limit, list) or [_number(v) for v in limit] != [0.0, float("inf")]:
        raise r.fail(f"'time_step_limit' {shown(limit)} is not built: tfcalc's scan does not clamp dt "
                     "(only [0.0, Infinity], every config's default)")
    if r.fields["ssm_heads"] % r.fields["ssm_groups"]:
        raise r.fail(f"'{heads}' ({r.fields['ssm_heads']}) must be a multiple of '{groups}' "
                     f"({r.fields['ssm_groups']})")


def mamba2(r: Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    ssm_fields(r, "num_heads", "head_dim", "state_size", "n_groups", "conv_kernel", "chunk_size", "use_bias",
               {"num_heads": 128, "head_dim": 64, "state_size": 128, "n_groups": 8, "conv_kernel": 4,
                "chunk_size": 256, "use_bias": False})
    expand = r.number("expand", 2, integer=True)
    if r.fields["d_model"] * expand != r.fields["ssm_heads"] * r.fields["ssm_head_dim"]:
        raise r.fail(f"hidden_size·expand ({r.fields['d_model']}·{expand}) must equal num_heads·head_dim "
                     f"({r.fields['ssm_heads']}·{r.fields['ssm_head_dim']}), as Mamba2Config requires")
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", False)
    r.dtype()
    n = r.fields["n_layer"]
    r.per_layer_list("its Mamba2 layers")
    r.fields.update(n_head=r.fields["ssm_heads"], max_seq_len=NO_POSITIONS_MAX, pos_encoding="none",
                    norm="rmsnorm", norm_bias=False, norm_placement="pre", final_norm=True, hybrid_pattern="M" * n)
    r.causal_or_base("Mamba2")


# ---- its checkpoint names (tfcalc.hf_config.names): modeling_mamba2.py, the model under ``backbone.`` ----

MIXER = r"\.mixer\.(in_proj\.weight|in_proj\.bias|conv1d\.weight|conv1d\.bias|dt_bias|A_log|D|out_proj\.weight|" \
        r"out_proj\.bias)"


def mamba2_mixer(layer: str) -> list[Rule]:
    """A Mamba2 mixer's tensors under ``layer`` (a regex whose first group is the layer number)."""
    return [(layer + MIXER, "blocks.{0}.attn.{1}"),
            (layer + r"\.mixer\.norm\.weight", "blocks.{0}.attn.gate_norm.weight")]


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Codestral Mamba: each layer's one norm is ``layers.<i>.norm``, its one sub-layer ``layers.<i>.mixer``, whose
    tensors are tfcalc's under the same names (tfcalc.architecture.mamba2) but its gated norm (``mixer.norm`` ->
    ``attn.gate_norm``: the block's own norm is ``attn_norm``)."""
    return [(r"backbone\.layers\.(\d+)\.norm\.weight", "blocks.{0}.attn_norm.weight")] + backbone(arch)


def backbone(arch: Architecture) -> list[Rule]:
    """The Mamba2 mixers, embedding, final norm and head of a model under ``backbone.`` (mamba2, nemotron_h)."""
    return mamba2_mixer(r"backbone\.layers\.(\d+)") + [
        (r"backbone\.embeddings?\.weight", "tok_emb.weight"),  # "embedding." in older files (Mamba2Model.load_hook)
        (r"backbone\.norm_f\.weight", "final_norm.weight"),
        (r"lm_head\.weight", tied_head(arch)),
    ]
