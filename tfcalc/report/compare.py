"""The report of `tfcalc compare`: models side by side at one sequence length."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.count.model import flops as count_flops, memory as count_memory, params as count_params, parts
from tfcalc.errors import InputError
from tfcalc.report.display import Displayed
from tfcalc.report.flops import attention_share
from tfcalc.report.model_ref import ModelRef
from tfcalc.workload import Workload, check_size


def compare_row(model: ModelRef, seq: int, dtype: str) -> dict[str, Any]:
    """One model's shapes and per-token figures at seq."""
    cfg = model.cfg
    params = count_params.total(cfg)
    groups = count_params.group_totals(cfg, count_params.breakdown(cfg))
    flops = count_flops.breakdown(cfg, Workload(seq=seq))
    totals = flops.totals()
    forward = flops.forward
    one = count_memory.state_split(cfg, Workload(seq=1, dtype=dtype))
    return {
        "preset": cfg.name,
        "label": model.label,
        "n_layer": cfg.n_layer,
        "d_model": cfg.d_model,
        "n_head": cfg.n_head,
        "n_kv_head": cfg.kv_heads,
        "d_head": cfg.head_dim,
        "d_ff": cfg.ffn_dim,
        "vocab_size": cfg.vocab_size,
        "max_seq_len": cfg.max_seq_len,
        "pos_encoding": cfg.architecture.positions,
        "norm": f"{cfg.norm_placement}-{cfg.norm}",
        "ffn": f"{'gated ' if cfg.gated_ffn else ''}{cfg.activation}",
        "tie_embeddings": cfg.tie_embeddings,
        "params": params,
        "seq": seq,
        # every forward term carries a factor T (tokens, or query rows of the score square): exact, but for
        # BERT's pooler and an encoder-decoder's source side (rounded, see FlopBreakdown.per_token)
        "forward_flops_per_token": flops.per_token(forward),
        "training_flops_per_token": flops.per_token(3 * forward),
        # K/V per token, in the layers that cache positions (a hybrid's fixed state is not per token: apart, once
        # per sequence; tfcalc.count.model.memory.state_split); the whole state of one sequence at seq beside them
        "kv_cache_bytes_per_token": count_memory.kv_cache_bytes(cfg, Workload(seq=1, dtype=dtype)) - one.fixed,
        "fixed_state_bytes_per_sequence": one.fixed,
        "kv_layers": one.growing_layers,
        "state_bytes_at_seq": count_memory.kv_cache_bytes(cfg, Workload(seq=seq, dtype=dtype)),
        "kv_dtype": dtype,
        "weights_bytes": count_memory.weights_bytes(cfg, dtype),
        "attention_param_share": (groups["attention"] + groups["cross_attention"]) / params,
        "ffn_param_share": groups["ffn"] / params,
        "attention_flop_share": attention_share(totals),
        "ffn_flop_share": totals["ffn"] / forward,
        # a hybrid's other mixers (Mamba2, DeltaNet, a short convolution) by their roles: the attention shares above
        # are then the whole token-mixer sub-layer's (tfcalc.count.model.parts)
        **parts.roles_json(cfg),
    }


@dataclass(frozen=True, repr=False)
class CompareReport(Displayed):
    seq: int
    dtype: str
    rows: tuple[dict[str, Any], ...]

    def headline(self) -> str:
        return f"{', '.join(r['label'] for r in self.rows)} at T = {self.seq:,}"

    def to_json(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows]


def build_compare(models: list[ModelRef], seq: Optional[int] = None, dtype: str = "bf16") -> CompareReport:
    """All models at one length: seq, or by default the shortest context among them (every model can
    run it, and per-token figures compare like with like)."""
    if len(models) < 2:
        raise InputError("compare needs at least two models")
    count_memory.check_dtype(dtype)
    seq = check_size("--seq", seq) if seq is not None else min(m.cfg.max_seq_len for m in models)
    return CompareReport(seq, dtype, tuple(compare_row(m, seq, dtype) for m in models))
