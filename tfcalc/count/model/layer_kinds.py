"""Parameters by kind of layer (dense and mixture-of-experts layers apart, DeepSeek-V3's first three dense
then 58 MoE) and of the multi-token prediction module shown beside the model: folds over the description
(tfcalc.architecture), for `tfcalc params`. Pure arithmetic."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.architecture import Block
from tfcalc.config import ModelConfig


@dataclass(frozen=True)
class LayerKind:
    label: str  # "dense", "MoE"
    shape: str  # "FFN 18432", "256 × 2048, top-8, +1 shared"
    layers: int
    params: int  # all the layers of this kind
    active: int  # ... of which one token runs through

    def to_json(self) -> dict[str, Any]:
        return {"label": self.label, "shape": self.shape, "layers": self.layers, "params": self.params,
                "active_params": self.active}


def _active(block: Block) -> int:
    return sum(w.numel // w.copies * (w.experts_active or w.copies) for w in block.weights())


def _label(block: Block) -> tuple[str, str]:
    if not block.is_moe:  # a layer of its mixer alone (Mamba2, Nemotron-H's M and *) has no FFN
        return ("no FFN", "mixer alone") if block.ffn.absent else ("dense", f"FFN {block.ffn.d_ff}")
    moe = block.ffn
    shared = ", +1 shared" if moe.shared is not None else ""
    shared += f", +{moe.n_zero} zero" if moe.n_zero else ""  # zero-computation experts (architecture.ffn, step 5)
    shared += f", latent {moe.latent}" if moe.latent else ""  # the experts' width (architecture.ffn, step 7)
    return "MoE", f"{moe.n_expert} × {moe.expert.d_ff}, top-{moe.top_k}{shared}"


def layer_kinds(cfg: ModelConfig) -> list[LayerKind]:
    """The output stack's layers by FFN kind, in first-seen order; [] when every layer is of one kind."""
    kinds: dict[tuple[str, str], list[int]] = {}
    for block, n in cfg.architecture.output.kinds():
        row = kinds.setdefault(_label(block), [0, 0, 0])
        row[0] += n
        row[1] += n * sum(w.numel for w in block.weights())
        row[2] += n * _active(block)
    return [] if len(kinds) < 2 else [LayerKind(*label, *row) for label, row in kinds.items()]


def mtp_summary(cfg: ModelConfig) -> Optional[dict[str, int]]:
    """DeepSeek-V3's MTP modules (tfcalc.architecture.mtp), beside the model; None without."""
    mtp = cfg.architecture.mtp
    if mtp is None:
        return None
    return {"modules": mtp.depth, "params": mtp.total, "active_params": mtp.active,
            "shared_copies": mtp.shared_copies, "stored": mtp.stored_total}
