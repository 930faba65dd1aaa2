"""The report of `tfcalc scan`: forward FLOPs and memory against sequence length, crossovers marked."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tfcalc.count.model import (
    flops as count_flops,
    memory as count_memory,
    parts,
    quant,
    state_growth,
    training_memory as training,
)
from tfcalc.report.display import Displayed
from tfcalc.report.flops import crossover_json, reached_at
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import Workload, check_size


def scan_row(model: ModelRef, batch: int, seq: int, dtype: str) -> dict[str, Any]:
    cfg, w = model.cfg, Workload(batch=batch, seq=seq, dtype=dtype)
    totals = count_flops.breakdown(cfg, w).totals()
    forward = sum(totals.values())
    # an encoder-decoder's cross-attention counts as attention, BERT's pooler with the head
    scores = totals["attention_scores"] + totals["cross_attention_scores"]
    split = count_memory.state_split(cfg, w)
    growing, fixed = state_growth.mixing_split(cfg, w)
    hybrid = bool(split.fixed or fixed or split.growing_layers < split.layers)
    return {
        "seq": seq,
        "attention_scores": scores,
        "attention_proj": totals["attention_proj"] + totals["cross_attention_proj"],
        "ffn": totals["ffn"],
        "lm_head": totals["lm_head"] + totals["pooler"],
        "forward_flops": forward,
        "scores_share": scores / forward,
        "kv_cache_bytes": count_memory.kv_cache_bytes(cfg, w),
        # a hybrid's state and mixing split (tfcalc.count.model.state_growth): K/V grows with T in the layers that
        # keep it, the fixed state does not; the mixing FLOPs of those layers grow like T², of the others like T
        # (None for a model whose every layer caches K and V: kv_cache_bytes is then the whole answer)
        "kv_growing_bytes": split.growing if hybrid else None, "fixed_state_bytes": split.fixed if hybrid else None,
        "fixed_state_share": split.fixed / (split.growing + split.fixed) if hybrid and split.fixed else (
            0.0 if hybrid else None),
        "scores_growing_layers": growing if hybrid else None, "scores_fixed_layers": fixed if hybrid else None,
        # the kernel `memory --training` and `plan` assume: flash, as training stacks run
        "activation_bytes": count_memory.activations(cfg, w, count_memory.TRAINING_ATTENTION).total,
        # an inference format (int8, fp8, ...) has no training state to count
        "training_bytes": (training.training_bytes(cfg, w, attention=count_memory.TRAINING_ATTENTION)
                           if dtype in count_memory.TRAINING_DTYPES else None),
    }


@dataclass(frozen=True, repr=False)
class ScanReport(Displayed):
    model: ModelRef
    batch: int
    dtype: str
    rows: tuple[dict[str, Any], ...]
    plot: str | None = None  # where the plot was written, if one was

    def headline(self) -> str:
        x = self.to_json()["crossover_seq"]
        return (f"{self.model.label}: {len(self.rows)} lengths, {self.rows[0]['seq']:,} to {self.rows[-1]['seq']:,}; "
                f"scores reach the FFN {reached_at(x['scores_vs_ffn'])}")

    @property
    def crossover(self) -> dict[str, int]:
        return crossover_json(count_flops.crossover_seq(self.model.cfg))

    @property
    def weights_bytes(self) -> int:
        """In the stored format, as `memory` and `infer` count them: quantized formats with their scales, and
        experts stored as MXFP4 (gpt-oss) as stored (tfcalc.count.model.quant)."""
        return quant.weights_bytes(self.model.cfg, quant.weight_format(self.dtype))

    @property
    def hybrid(self) -> bool:
        """Some decoder layers keep a fixed state (their cost stops growing with T)."""
        return any(r["fixed_state_bytes"] is not None for r in self.rows)

    @property
    def layers(self) -> tuple[int, int]:
        """(decoder layers whose state grows with the tokens, all decoder layers)."""
        split = count_memory.state_split(self.model.cfg, Workload(batch=1, seq=1, dtype=self.dtype))
        return split.growing_layers, split.layers

    @property
    def beyond_context(self) -> bool:
        return any(r["seq"] > self.model.cfg.max_seq_len for r in self.rows)

    def to_json(self) -> dict[str, Any]:
        cfg = self.model.cfg
        return {
            "preset": cfg.name,
            "label": self.model.label,
            "batch": self.batch,
            "dtype": self.dtype,
            "max_seq_len": cfg.max_seq_len,
            "weights_bytes": self.weights_bytes,
            "crossover_seq": self.crossover,
            # decoder layers whose state grows with the tokens (K/V), of all (the rest keep a fixed state)
            "kv_layers": self.layers[0] if self.hybrid else None, "layers": self.layers[1] if self.hybrid else None,
            "rows": [dict(r) for r in self.rows],
            "plot": self.plot,
            # a hybrid's other mixers by their roles: its rows' attention_* are the whole token-mixer sub-layer
            **parts.roles_json(cfg),
        }


def build_scan(model: ModelRef, seqs: list[int], batch: int = 1, dtype: str = "bf16") -> ScanReport:
    count_memory.check_dtype(dtype)
    check_size("--batch", batch)
    for s in seqs:
        check_size("--seq", s)
    lengths = sorted(set(seqs))
    return ScanReport(model, batch, dtype, tuple(scan_row(model, batch, s, dtype) for s in lengths))
