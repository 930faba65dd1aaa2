"""Mamba-1 config.json files: ``mamba`` (state-spaces/mamba-*-hf; modeling_mamba.py, configuration_mamba.py) and
``falcon_mamba`` (tiiuae/falcon-mamba-7b; modeling_falcon_mamba.py). Every layer a Mamba-1 mixer alone beside its
RMSNorm (MambaBlock: x + mixer(norm(x)), no FFN), no positions, a final RMSNorm (norm_f), an LM head tied to the
embeddings unless tie_word_embeddings is false (default true). The mixer (tfcalc.architecture.mamba1): the inner
width intermediate_size (else expand·hidden_size: transformers' config keeps the file's key over it), state_size,
conv_kernel, time_step_rank ("auto": ceil(hidden_size / 16)), use_bias, use_conv_bias. Falcon-Mamba adds
weightless RMSNorms on dt, B and C after x_proj (eps mixer_rms_eps; their "weights" are buffers, not
parameters). ``residual_in_fp32`` changes no count (the residual's precision in a bf16 run), and tfcalc's runtime
keeps the residual in the model's dtype. A Mamba model has no attention, so ``n_head`` (read by no count) is 1, and
``max_seq_len`` bounds only what tfcalc runs.
"""

from __future__ import annotations

import math

from tfcalc.architecture import Architecture
from tfcalc.errors import shown
from tfcalc.hf_config.mamba2 import NO_POSITIONS_MAX
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader


def mamba1_fields(r: Reader) -> None:
    """The Mamba-1 mixer's keys of a mamba or falcon_mamba file (the inner width and dt's rank from hidden_size)."""
    d = r.fields["d_model"]
    expand = r.size("expand", 2)
    # the file's intermediate_size where it gives one: transformers 5.24's config keeps it over expand·hidden_size
    # (falcon-mamba-7b's file says expand 16 and intermediate_size 8192, and its weights are 8192 wide)
    r.fields["ssm_inner"] = r.size("intermediate_size", expand * d)
    rank = r.get("time_step_rank", "auto")
    if rank == "auto":
        rank = math.ceil(d / 16)
    elif isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise r.fail(f"'time_step_rank' must be \"auto\" or a positive integer; got {shown(rank)}")
    r.fields.update(ssm_dt_rank=rank, ssm_state_size=r.size("state_size", 16), ssm_conv_kernel=r.size("conv_kernel", 4),
                    ssm_bias=r.flag("use_bias", False), ssm_conv_bias=r.flag("use_conv_bias", True),
                    ssm_state_dtype="fp32", hybrid_m_mixer="mamba_one")
    act = r.get("hidden_act", "silu")
    if act != "silu":
        raise r.fail(f"the Mamba-1 mixer's activation {shown(act)} is not built: transformers' torch path applies SiLU")


def mamba(r: Reader) -> None:
    r.required(("num_hidden_layers", "n_layer"), ("hidden_size", "d_model"), ("vocab_size", "vocab_size"))
    mamba1_fields(r)
    r.take("layer_norm_epsilon", "norm_eps", 1e-5)
    r.take("tie_word_embeddings", "tie_embeddings", True)
    r.dtype()
    n = r.fields["n_layer"]
    r.per_layer_list("its Mamba layers")
    r.fields.update(n_head=1, max_seq_len=NO_POSITIONS_MAX, pos_encoding="none", norm="rmsnorm", norm_bias=False,
                    norm_placement="pre", final_norm=True, hybrid_pattern="M" * n)
    r.causal_or_base("FalconMamba" if r.model_type == "falcon_mamba" else "Mamba")


def falcon_mamba(r: Reader) -> None:
    """Mamba's layers with weightless RMSNorms on dt, B and C (FalconMambaMixer), eps mixer_rms_eps."""
    mamba(r)
    r.fields["ssm_bcdt_norm"] = "weightless"
    eps = r.positive("mixer_rms_eps", 1e-6)
    if eps >= 1:
        raise r.fail(f"'mixer_rms_eps' must be below 1 (an RMSNorm's epsilon); got {shown(eps)}")
    r.fields["ssm_bcdt_norm_eps"] = eps


# ---- its checkpoint names (tfcalc.hf_config.names): modeling_mamba.py, the model under ``backbone.`` ----

MIXER = r"\.mixer\.(in_proj\.weight|in_proj\.bias|conv1d\.weight|conv1d\.bias|x_proj\.weight|dt_proj\.weight|" \
        r"dt_proj\.bias|A_log|D|out_proj\.weight|out_proj\.bias)"


def mamba1_mixer(layer: str, mixer: str = "mixer") -> list[Rule]:
    """A Mamba-1 mixer's tensors under ``layer`` (a regex whose first group is the layer number): tfcalc's under
    the same names (tfcalc.model.mamba1), Jamba's weighted norms dt/b/c_layernorm as dt/b/c_norm."""
    return [(layer + MIXER.replace("mixer", mixer), "blocks.{0}.attn.{1}"),
            (layer + rf"\.{mixer}\.(dt|b|c)_layernorm\.weight", "blocks.{0}.attn.{1}_norm.weight")]


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """Each layer's norm is ``layers.<i>.norm``, its one sub-layer ``layers.<i>.mixer``; ``embedding.`` in older
    files (MambaModel.load_hook)."""
    return [(r"backbone\.layers\.(\d+)\.norm\.weight", "blocks.{0}.attn_norm.weight"),
            *mamba1_mixer(r"backbone\.layers\.(\d+)"),
            (r"backbone\.embeddings?\.weight", "tok_emb.weight"),
            (r"backbone\.norm_f\.weight", "final_norm.weight"),
            (r"lm_head\.weight", tied_head(arch))]
