"""A checkpoint's parameters counted from its headers, set against what its config.json explains.

Every tensor in the files is either a parameter of tfcalc's model (its elements go to the component of
tfcalc's breakdown it fills), a stored copy of a tied parameter (counted once, where it is tied), a
known buffer that is no parameter (an old causal mask, rotary table, position ids), or unexplained.
``checkpoint_total`` is every element the files hold; the parameters matched should equal the analytic
count, component by component -- a component the checkpoint lacks, or holds more of, is named.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfcalc.checkpoint.files import CheckpointFiles, TensorInfo, read_headers
from tfcalc.checkpoint.names import Piece, experts_of, map_name, rules
from tfcalc.checkpoint.quant import check_expert_format
from tfcalc.config import ModelConfig
from tfcalc.count.model import params as params_count
from tfcalc.count.model.components import components, local_path
from tfcalc.errors import InputError


@dataclass(frozen=True)
class CheckpointCount:
    files: tuple[str, ...]
    total: int  # elements of every tensor in the files: checkpoint_total
    total_bytes: int
    by_dtype: dict[str, dict[str, int]]  # dtype -> {tensors, elements, bytes}
    breakdown: dict[str, int]  # component -> elements of the parameters matched
    tied_copies: dict[str, int] = field(default_factory=dict)  # stored copies of tied parameters
    buffers: dict[str, int] = field(default_factory=dict)  # tensors that are not parameters
    unexplained: tuple[str, ...] = ()  # tensor names no rule of the model type explains
    misfits: tuple[str, ...] = ()  # tensors whose shape the config cannot split as its fused layout
    missing: dict[str, int] = field(default_factory=dict)  # component -> elements the config has and the files lack
    surplus: dict[str, int] = field(default_factory=dict)  # component -> elements beyond what the config has
    scales: dict[str, int] = field(default_factory=dict)  # quantization scales (MXFP4's, one per 32 values)
    mtp: dict[str, int] = field(default_factory=dict)  # DeepSeek-V3's MTP modules' tensors (beside the model)
    vision: int = 0  # elements of a vision-language checkpoint's vision tower and projector (not counted)

    @property
    def matched(self) -> int:
        return sum(self.breakdown.values())

    @property
    def agrees(self) -> bool:
        return not (self.unexplained or self.misfits or self.missing or self.surplus)

    def to_json(self) -> dict[str, Any]:
        return {
            "files": list(self.files), "checkpoint_total": self.total, "bytes": self.total_bytes,
            "by_dtype": self.by_dtype, "parameters_matched": self.matched, "breakdown": self.breakdown,
            "tied_copies": self.tied_copies, "buffers": self.buffers, "quantization_scales": self.scales,
            "unexplained": list(self.unexplained),
            "misfits": list(self.misfits), "missing": self.missing, "surplus": self.surplus, "agree": self.agrees,
            "mtp_module": sum(self.mtp.values()),
            "vision": self.vision,
        }


def model_type(folder: Path) -> str:
    """The model_type of the config.json beside a checkpoint (the one the config was read from)."""
    path = folder / "config.json"
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as e:
        raise InputError(f"{path}: cannot read the checkpoint's config ({str(e).splitlines()[0]})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("model_type"), str):
        raise InputError(f"{path}: no 'model_type' field")
    return raw["model_type"]


def _expert_misfit(cfg: ModelConfig, piece: Piece, tensor: TensorInfo) -> bool:
    """A piece of a grouped expert tensor that the layer's mixture of experts cannot hold: an expert index
    past its experts, or a whole grouped tensor whose first dimension is not its number of experts."""
    if not local_path(piece.param)[1].startswith("expert_ffn."):
        return False
    experts = experts_of(cfg, piece.param)  # that layer's mixture of experts (tfcalc.architecture)
    if piece.expert is not None:
        return not 0 <= piece.expert < experts
    return not experts or not tensor.shape or tensor.shape[0] != experts


def piece_counts(cfg: ModelConfig, piece: Piece, tensor: TensorInfo) -> dict[str, int] | None:
    """{component: elements} one tensor fills; None when its size cannot be split as the config's layout."""
    if _expert_misfit(cfg, piece, tensor):
        return None
    try:
        rows = components(cfg, piece.param, piece.part)
    except KeyError:
        return None
    # MXFP4 blocks (gpt-oss): two 4-bit values per stored byte, so twice the tensor's elements are parameters
    values = tensor.numel * (2 if piece.transform == "mxfp4" else 1)
    if list(rows.values()) == [-1]:
        return {c: values for c in rows}
    total_rows = sum(rows.values())
    if total_rows <= 0 or values % total_rows:
        return None
    per_row = values // total_rows
    return {c: r * per_row for c, r in rows.items()}


def count(cfg: ModelConfig, checkpoint: CheckpointFiles, kind: str) -> CheckpointCount:
    """Count checkpoint's tensors (of Hugging Face model type ``kind``) against cfg."""
    table = rules(cfg, kind)
    by_dtype: dict[str, dict[str, int]] = {}
    breakdown: dict[str, int] = {}
    tied, buffers, scales, mtp, unexplained, misfits = {}, {}, {}, {}, [], []
    vision = 0
    for t in checkpoint.tensors:
        row = by_dtype.setdefault(t.dtype, {"tensors": 0, "elements": 0, "bytes": 0})
        row["tensors"] += 1
        row["elements"] += t.numel
        row["bytes"] += t.nbytes
        piece = map_name(table, t.name)
        if piece is None:
            unexplained.append(t.name)
        elif piece == "buffer" or getattr(piece, "buffer", False):
            buffers[t.name] = t.numel
        elif piece == "scales":
            scales[t.name] = t.numel
        elif piece == "mtp":
            mtp[t.name] = t.numel
        elif piece == "vision":
            vision += t.numel
        elif piece.tied:
            tied[t.name] = t.numel
        else:
            counts = piece_counts(cfg, piece, t)
            if counts is None:
                misfits.append(f"{t.name} {list(t.shape)}")
                continue
            for c, n in counts.items():
                breakdown[c] = breakdown.get(c, 0) + n
    analytic = {c: n for c, n in params_count.breakdown(cfg).items() if n}
    missing = {c: n - breakdown.get(c, 0) for c, n in analytic.items() if breakdown.get(c, 0) < n}
    surplus = {c: n - analytic.get(c, 0) for c, n in breakdown.items() if n > analytic.get(c, 0)}
    return CheckpointCount(
        tuple(f.name for f in checkpoint.files), sum(t.numel for t in checkpoint.tensors),
        sum(t.nbytes for t in checkpoint.tensors), by_dtype, breakdown, tied, buffers, tuple(unexplained),
        tuple(misfits), missing, surplus, scales, mtp, vision,
    )


def count_checkpoint(cfg: ModelConfig, path: str | Path) -> CheckpointCount:
    """Read the headers at path (a .safetensors file or a model folder) and count them against cfg."""
    files = read_headers(path)
    kind = model_type(files.folder)
    check_expert_format(cfg, files, kind)  # quantized experts as the config says (tfcalc.checkpoint.quant)
    return count(cfg, files, kind)
