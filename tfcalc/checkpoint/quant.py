"""The stored format of a quantized checkpoint's experts, read from its tensors and checked against its
config.json's ``quantization_config`` (issue 33, cause 5): an MXFP4 checkpoint stored another way, or
MXFP4 tensors under a config that says nothing of it, would be counted wrongly -- refused in one line.

MXFP4 (the OCP Microscaling format; gpt-oss's released checkpoints, transformers' integrations/mxfp4.py):
each expert weight is ``*_blocks`` -- uint8, two 4-bit E2M1 values a byte -- and ``*_scales`` -- uint8,
one E8M0 exponent per 32 values. transformers dequantizes ``*_blocks``/``*_scales`` only under a
quantization_config of quant_method mxfp4 (modeling_utils' hf_quantizer), and loads plain ``gate_up_proj``
/ ``down_proj`` otherwise."""

from __future__ import annotations

from tfcalc.checkpoint.files import CheckpointFiles
from tfcalc.checkpoint.names import Piece, map_name, rules
from tfcalc.config import ModelConfig
from tfcalc.errors import InputError, shown

MXFP4_STORED = "U8"  # blocks and scales alike: bytes


def check_expert_format(cfg: ModelConfig, checkpoint: CheckpointFiles, kind: str) -> None:
    """InputError, one line, when the experts' stored format (the headers' names and dtypes) is not the
    config's ``expert_format`` (read from quantization_config: tfcalc.hf_config.gpt_oss)."""
    if cfg.n_expert is None:
        return
    table = rules(cfg, kind)
    quantized, plain = [], []
    for t in checkpoint.tensors:
        piece = map_name(table, t.name)
        if piece == "scales":
            quantized.append(t)
        elif isinstance(piece, Piece) and ".experts." in piece.param and piece.param.endswith(".weight"):
            (quantized if piece.transform == "mxfp4" else plain).append(t)
    where = checkpoint.folder
    for t in quantized:
        if t.dtype != MXFP4_STORED:
            raise InputError(f"{where}: {shown(t.name)} is an MXFP4 tensor, stored as {MXFP4_STORED} (4-bit values "
                             f"and 8-bit scales in bytes); got {t.dtype}")
    if quantized and cfg.expert_format != "mxfp4":
        raise InputError(f"{where}: the checkpoint stores the experts as MXFP4 ({shown(quantized[0].name)}) but "
                         "config.json has no 'quantization_config' with quant_method mxfp4")
    if plain and cfg.expert_format == "mxfp4":
        raise InputError(f"{where}: config.json's 'quantization_config' says MXFP4 experts, but the checkpoint "
                         f"stores {shown(plain[0].name)} unquantized ({plain[0].dtype})")
