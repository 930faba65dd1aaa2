"""Where each parameter of tfcalc's model goes in the breakdown: module paths -> component names, and the
rows of the fused tensors. Pure, shared by the empirical count (tfcalc.measure.params, which walks the
real module) and the checkpoint count (tfcalc.checkpoint, which walks a file's tensor names).

Fused tensors and their rows, in tfcalc.model's layout: ``attn.qkv`` [Q | K | V], ``cross_attn.kv``
[K | V], an FFN's ``up`` [gate | up] when gated (the FFN, each expert's, the shared expert's).
"""

from __future__ import annotations

import re

from tfcalc.config import ModelConfig

# module path, with "encoder." and "blocks.<i>." taken off and "ffn.experts." (a layer's grouped experts,
# tfcalc.model.experts; "ffn.experts.<i>." in a per-expert name) read as "expert_ffn.",
# -> component, for the tensors that are not fused
COMPONENTS = {
    "tok_emb.weight": "token_embedding",
    "pos_emb.weight": "position_embedding",
    "rel_bias.weight": "relative_position_bias",
    "type_emb.weight": "token_type_embedding",
    "emb_norm.weight": "embedding_norm_weight",
    "emb_norm.bias": "embedding_norm_bias",
    "attn_norm.weight": "attn_norm_weight",
    "attn_norm.bias": "attn_norm_bias",
    "attn.out.weight": "attn_o_weight",
    "attn.out.bias": "attn_o_bias",
    "attn.q_norm.weight": "attn_q_norm_weight",
    "attn.q_norm.bias": "attn_q_norm_bias",
    "attn.k_norm.weight": "attn_k_norm_weight",
    "attn.k_norm.bias": "attn_k_norm_bias",
    "attn_post_norm.weight": "attn_post_norm_weight",
    "attn_post_norm.bias": "attn_post_norm_bias",
    "cross_attn_norm.weight": "cross_attn_norm_weight",
    "cross_attn_norm.bias": "cross_attn_norm_bias",
    "cross_attn.q.weight": "cross_attn_q_weight",
    "cross_attn.q.bias": "cross_attn_q_bias",
    "cross_attn.out.weight": "cross_attn_o_weight",
    "cross_attn.out.bias": "cross_attn_o_bias",
    "cross_attn_post_norm.weight": "cross_attn_post_norm_weight",
    "cross_attn_post_norm.bias": "cross_attn_post_norm_bias",
    "ffn_norm.weight": "ffn_norm_weight",
    "ffn_norm.bias": "ffn_norm_bias",
    "ffn.down.weight": "ffn_down_weight",
    "ffn.down.bias": "ffn_down_bias",
    "ffn.act.alpha_p": "ffn_act_alpha_p",  # xIELU's learned scalars (Apertus)
    "ffn.act.alpha_n": "ffn_act_alpha_n",
    "ffn.router.weight": "router_weight",
    "ffn.router.bias": "router_bias",
    "ffn.latent_in.weight": "latent_in_weight",  # the latent MoE's projections (tfcalc.architecture.ffn, step 7)
    "ffn.latent_in.bias": "latent_in_bias",
    "ffn.latent_out.weight": "latent_out_weight",
    "ffn.latent_out.bias": "latent_out_bias",
    "attn.sinks": "attn_sinks",
    "expert_ffn.down.weight": "expert_ffn_down_weight",
    "expert_ffn.down.bias": "expert_ffn_down_bias",
    "ffn.shared.down.weight": "shared_expert_ffn_down_weight",
    "ffn.shared.down.bias": "shared_expert_ffn_down_bias",
    "ffn.shared_gate.weight": "shared_expert_gate_weight",
    "ffn_post_norm.weight": "ffn_post_norm_weight",
    "ffn_post_norm.bias": "ffn_post_norm_bias",
    "final_norm.weight": "final_norm_weight",
    "final_norm.bias": "final_norm_bias",
    "pooler.weight": "pooler_weight",
    "pooler.bias": "pooler_bias",
    "head_dense.weight": "lm_head_transform_weight",
    "head_dense.bias": "lm_head_transform_bias",
    "head_norm.weight": "lm_head_norm_weight",
    "head_norm.bias": "lm_head_norm_bias",
    "lm_head.weight": "lm_head",
    "lm_head.bias": "lm_head_bias",
    "project_in.weight": "embedding_project_in",  # OPT-350m's word_embed_proj_dim (issue 22)
    "project_out.weight": "lm_head_project_out",
    # Gemma 4's per-layer inputs (tfcalc.architecture.per_layer): at the embeddings, and in each block
    "ple_in.table.weight": "per_layer_embedding",
    "ple_in.proj.weight": "per_layer_projection",
    "ple_in.norm.weight": "per_layer_projection_norm_weight",
    "ple.gate.weight": "ple_gate_weight",
    "ple.out.weight": "ple_out_weight",
    "ple.norm.weight": "ple_post_norm_weight",
    # Gemma 4's experts beside its MLP (tfcalc.model.beside)
    "ffn.beside.router_scale": "router_scale",
    "ffn.beside.per_expert_scale": "per_expert_scale",
    "ffn.beside.mlp_post_norm.weight": "mlp_post_norm_weight",
    "ffn.beside.moe_pre_norm.weight": "moe_pre_norm_weight",
    "ffn.beside.moe_post_norm.weight": "moe_post_norm_weight",
    # Gemma 3n's AltUp and LAuReL (tfcalc.model.altup)
    "altup_io.proj_in": "altup_in",
    "altup_io.proj_out": "altup_out",
    "altup.router_norm.weight": "altup_router_norm_weight",
    "altup.router.weight": "altup_router_weight",
    "altup.prediction.weight": "altup_prediction_weight",
    "altup.correction.weight": "altup_correction_weight",
    "altup.output_scale": "altup_output_scale",
    "laurel.left.weight": "laurel_left_weight",
    "laurel.right.weight": "laurel_right_weight",
    "laurel.norm.weight": "laurel_norm_weight",
}
# DeepSeek's multi-head latent attention (tfcalc.model.latent), unfused
COMPONENTS.update({f"attn.{m}.{kind}": f"attn_{m}_{kind}" for m in ("q", "q_a", "q_b", "kv_a", "kv_b")
                   for kind in ("weight", "bias")})
COMPONENTS.update({"attn.q_a_norm.weight": "attn_q_a_norm_weight", "attn.kv_a_norm.weight": "attn_kv_a_norm_weight"})
# DeepSeek-V4's hyper-connections (tfcalc.model.hyper): each sub-layer's and the head's
COMPONENTS.update({f"{sub}_hc.{t}": f"{sub}_hc_{t}" for sub in ("attn", "ffn") for t in ("fn", "base", "scale")})
COMPONENTS.update({f"hc_head.hc_{t}": f"hc_head_{t}" for t in ("fn", "base", "scale")})
# Zamba2's shared block (tfcalc.model.zamba2.SharedBlock), held in the hybrid layer's mixer slot
COMPONENTS.update({"attn.shared.attn.out.weight": "attn_shared_o_weight"})
# fused module path -> the component prefix its parts are named with
FUSED = {"attn.qkv": "attn", "cross_attn.kv": "cross_attn", "ffn.up": "ffn", "expert_ffn.up": "expert_ffn",
         "ffn.shared.up": "shared_expert_ffn", "attn.shared.attn.qkv": "attn_shared",
         "attn.shared.ffn.up": "attn_shared_ffn"}


def local_path(name: str) -> tuple[str, str]:
    """'encoder.blocks.3.ffn.experts.up.weight' -> ('encoder_', 'expert_ffn.up.weight')."""
    prefix = "encoder_" if name.startswith("encoder.") else ""
    path = re.sub(r"^(encoder\.)?(blocks\.\d+\.)?", "", name)
    return prefix, re.sub(r"^ffn\.experts\.(\d+\.)?", "expert_ffn.", path)


def component(path: str) -> str:
    """The breakdown component of an unfused parameter's local path (``local_path``): the table's, or for a
    mixer's tensor the table does not name, ``attn.<name>.<kind>`` -> its component's Weight ``attn_<name>_<kind>``
    (tfcalc.architecture.mixer: a new mixer's torch parameters are named as its weights(), so it needs no row
    here). KeyError for any other path."""
    if path in COMPONENTS:
        return COMPONENTS[path]
    head, _, rest = path.partition(".")
    if head in ("attn", "cross_attn") and rest:
        return f"{head}_{rest.replace('.', '_')}"
    raise KeyError(path)


def block_of(cfg: ModelConfig, param: str):
    """The block (tfcalc.architecture) of the layer a full parameter path (``[encoder.]blocks.<i>...``)
    sits in; None outside the blocks or past its stack's depth."""
    arch = cfg.architecture
    m = re.match(r"(encoder\.)?blocks\.(\d+)\.", param)
    if m is None:
        return None
    stack = arch.encoder if m.group(1) else arch.output
    if stack is None or int(m.group(2)) >= stack.n_layer:
        return None
    return stack.layer(int(m.group(2)))


def fused_rows(cfg: ModelConfig, module: str, param: str | None = None) -> dict[str, tuple[int, int]]:
    """{part: (first row, end row)} of a fused module path (as local_path gives it), from the description
    (tfcalc.architecture): the widths of the layer the full path ``param`` sits in (layers may differ),
    or without one, of the first layer that holds the module."""
    parts = {"attn.qkv": ("attn_", ("q", "k", "v")), "cross_attn.kv": ("cross_attn_", ("k", "v")),
             "attn.shared.attn.qkv": ("attn_shared_", ("q", "k", "v"))}
    prefix, names = parts[module] if module in parts else (_FFN_PREFIX[module], ("gate", "up"))
    layer = block_of(cfg, param) if param is not None else None
    for block in [layer] if layer is not None else [b for _, b, _ in cfg.architecture.kinds()]:
        shapes = {w.name: w.shape[0] for w in block.weights()}
        # a part may be absent (Gemma 4's global layers read V from K: no V rows), but not the last of them all
        if f"{prefix}{names[-1]}_weight" in shapes or (param is not None and f"{prefix}{names[0]}_weight" in shapes):
            rows, start = {}, 0
            for p in names:
                if f"{prefix}{p}_weight" in shapes:
                    rows[p] = (start, start + shapes[f"{prefix}{p}_weight"])
                    start = rows[p][1]
            return rows
    raise KeyError(module)


_FFN_PREFIX = {"ffn.up": "ffn_", "expert_ffn.up": "expert_ffn_", "ffn.shared.up": "shared_expert_ffn_",
               "attn.shared.ffn.up": "attn_shared_ffn_"}


def components(cfg: ModelConfig, param: str, part: str | None = None) -> dict[str, int]:
    """{component: rows} that a parameter of tfcalc's model (its full path), or one named block of its
    rows, belongs to. Raises KeyError for a path that is no parameter of any tfcalc model."""
    prefix, path = local_path(param)
    module, _, kind = path.rpartition(".")
    if module in FUSED:
        rows = fused_rows(cfg, module, param)
        parts = rows if part is None else {part: rows[part]}
        return {f"{prefix}{FUSED[module]}_{p}_{kind}": stop - start for p, (start, stop) in parts.items()}
    return {prefix + component(path): -1}  # -1: every row
