"""The rules of the stored-quantization fields (tfcalc.config, ``stored_quant`` and its kin: the block matrices
as a quantized checkpoint stores them). Each failure one ConfigError line naming the field. Imports nothing of
tfcalc but the error type; tfcalc.config_rules calls ``validate_stored_quant`` after the field types are checked.

``QUANTIZABLE`` are the tfcalc components a checkpoint may store quantized (the Linear layers of a decoder's
blocks and its LM head; transformers' quantizers replace nn.Linear modules only, so the embedding, the norms
and the routers stay in the checkpoint's dtype), each with the Hugging Face module names (after
``model.layers.N.``) that hold it in Llama- and DeepSeek-style checkpoints: the names a
``modules_to_not_convert`` or ``ignore`` list is matched against (tfcalc.hf_config.quantization).
"""

from __future__ import annotations

from tfcalc.errors import InputError as ConfigError, shown

# component -> the module names of it, under "model.layers.N." (lm_head: the whole name)
QUANTIZABLE: dict[str, tuple[str, ...]] = {
    "attn_q_weight": ("self_attn.q_proj",),
    "attn_k_weight": ("self_attn.k_proj",),
    "attn_v_weight": ("self_attn.v_proj",),
    "attn_o_weight": ("self_attn.o_proj",),
    "attn_q_a_weight": ("self_attn.q_a_proj",),
    "attn_q_b_weight": ("self_attn.q_b_proj",),
    "attn_kv_a_weight": ("self_attn.kv_a_proj_with_mqa",),
    "attn_kv_b_weight": ("self_attn.kv_b_proj",),
    # DeepSeek-V3.2's indexer (its weights_proj transformers keeps unquantized: _keep_in_fp32_modules)
    "attn_indexer_wq_b_weight": ("self_attn.indexer.wq_b",),
    "attn_indexer_wk_weight": ("self_attn.indexer.wk",),
    "ffn_gate_weight": ("mlp.gate_proj",),
    "ffn_up_weight": ("mlp.up_proj",),
    "ffn_down_weight": ("mlp.down_proj",),
    "expert_ffn_gate_weight": ("mlp.experts.0.gate_proj",),
    "expert_ffn_up_weight": ("mlp.experts.0.up_proj",),
    "expert_ffn_down_weight": ("mlp.experts.0.down_proj",),
    "shared_expert_ffn_gate_weight": ("mlp.shared_experts.gate_proj", "mlp.shared_expert.gate_proj"),
    "shared_expert_ffn_up_weight": ("mlp.shared_experts.up_proj", "mlp.shared_expert.up_proj"),
    "shared_expert_ffn_down_weight": ("mlp.shared_experts.down_proj", "mlp.shared_expert.down_proj"),
    "lm_head": ("lm_head",),
}
MAX_TILE = 2**20  # a block or group longer than any matrix dimension in use


def kept(cfg) -> frozenset[str]:
    """The components stored_quant_keep names (left in the checkpoint's dtype)."""
    return frozenset(p for p in (cfg.stored_quant_keep or "").split(",") if p)


def validate_stored_quant(cfg) -> None:
    fields = ("stored_quant_scales", "stored_quant_group", "stored_quant_block", "stored_quant_scale_dtype",
              "stored_quant_keep")
    if cfg.stored_quant is None:
        given = [f for f in fields if getattr(cfg, f) is not None] + (["stored_quant_zero_point"]
                                                                       if cfg.stored_quant_zero_point else [])
        if given:
            raise ConfigError(f"field '{given[0]}' describes quantized weights: give stored_quant too (or null "
                              "every stored_quant_* field to count the weights unquantized)")
        return
    if cfg.arch != "decoder":
        raise ConfigError("stored_quant applies to a decoder-only model (no quantized encoder checkpoint is read)")
    if cfg.expert_format is not None:
        raise ConfigError("give stored_quant or expert_format, not both")
    scales = cfg.stored_quant_scales
    if scales is None or cfg.stored_quant_scale_dtype is None:
        raise ConfigError("stored_quant needs stored_quant_scales (tensor, channel, group or block) and "
                          "stored_quant_scale_dtype")
    if (scales == "group") != (cfg.stored_quant_group is not None):
        raise ConfigError("field 'stored_quant_group' goes with stored_quant_scales group, and group with it")
    if (scales == "block") != (cfg.stored_quant_block is not None):
        raise ConfigError("field 'stored_quant_block' goes with stored_quant_scales block, and block with it")
    if cfg.stored_quant_group is not None and not 1 <= cfg.stored_quant_group <= MAX_TILE:
        raise ConfigError(f"field 'stored_quant_group' must be 1 .. {MAX_TILE:,}; got {cfg.stored_quant_group:,}")
    block = cfg.stored_quant_block
    if block is not None and (len(block) != 2 or not all(1 <= b <= MAX_TILE for b in block)):
        raise ConfigError(f"field 'stored_quant_block' must be two sizes (rows, cols), each 1 .. {MAX_TILE:,}; "
                          f"got {shown(list(block))}")
    if cfg.stored_quant_zero_point and cfg.stored_quant == "fp8":
        raise ConfigError("field 'stored_quant_zero_point': fp8 weights are symmetric (no zero points)")
    unknown = sorted(kept(cfg) - set(QUANTIZABLE))
    if unknown:
        raise ConfigError(f"field 'stored_quant_keep' names {shown(unknown[0])}, no quantizable component; "
                          f"choose from {', '.join(QUANTIZABLE)}")


def validate_stored_groups(cfg) -> None:
    """A group divides the input width of every matrix it quantizes (GPTQ's and compressed-tensors' group
    strategy store whole groups): checked on the description (ModelConfig.__post_init__, once it is built)."""
    if cfg.stored_quant_scales != "group":
        return
    keep = kept(cfg)
    for placed in cfg.architecture.weights():
        w = placed.weight
        if w.name in QUANTIZABLE and w.name not in keep and len(w.shape) == 2 and w.shape[1] % cfg.stored_quant_group:
            raise ConfigError(f"field 'stored_quant_group' ({cfg.stored_quant_group:,}) does not divide the input "
                              f"width {w.shape[1]:,} of {w.name}: a group-quantized matrix holds whole groups")
