"""`tfcalc infer MODEL --draft DRAFT --accept-rate A --measure`: speculative decoding run on the device
(tfcalc.measure.speculative) beside its prediction (tfcalc.count.serving.speculative) -- the JSON object
``speculative.measured``.

What is measured: the draft's and the verify step's times, the acceptance (accepted ÷ proposed draft
tokens) and tokens per round, the speculative and the plain decoding's seconds per token in the same
run, and whether the output is the target's greedy output (it must be). What is predicted beside it: the
steps on the roofline with the measured ceilings, and the round recomputed at the measured acceptance,
(1 − A^(K+1)) / (1 − A) tokens (K + 1 at A = 1; Leviathan et al. 2023, eq. 1). Ratios: predicted ÷
measured time, as everywhere in infer.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Optional

from tfcalc.count.serving import speculative
from tfcalc.errors import InputError

if TYPE_CHECKING:
    from tfcalc.report.infer_options import InferOptions
    from tfcalc.report.infer_report import InferReport
    from tfcalc.report.model_ref import ModelRef

WEIGHTS = ("random, each model after torch.manual_seed(0): a draft of the target's configuration is the target and "
           "accepts every proposal; another draft accepts what chance gives")


def check(o: "InferOptions") -> None:
    """--draft with --measure: one sequence, on one device."""
    if o.tp != 1:
        raise InputError("--draft with --measure --tp is not measured (--measure --tp measures tensor parallelism's "
                         "collectives alone): drop --draft or --tp")
    if o.batches != (1,):
        raise InputError("--draft --measure runs one sequence (each would accept its own prefix): give --batch 1")


def precheck(model: "ModelRef", o: "InferOptions", seq: int) -> None:
    """Every refusal of the run that needs no device: the draft resolved, both models able to run rounds."""
    from tfcalc.measure.speculative import SpeculativePlan, check_plan, require_fit
    from tfcalc.report.model_ref import resolve

    check(o)
    draft = resolve(o.draft, [])
    k = speculative.DEFAULT_DRAFT_TOKENS if o.draft_tokens is None else o.draft_tokens
    speculative.check(model.cfg, draft.cfg, o.accept_rate, k)
    plan = SpeculativePlan(target=model.cfg, draft=draft.cfg, device=o.device, dtype=o.dtype, seq=seq, gen=o.gen,
                           k=k)
    check_plan(plan)
    require_fit(plan)  # before the plain decoding is timed, not after


def tokens_at(accept_rate: float, k: int) -> float:
    """Leviathan et al. 2023, eq. 1, with its limit K + 1 at A = 1 (a draft that is the target)."""
    return k + 1.0 if accept_rate >= 1 else speculative.expected_tokens(accept_rate, k)


def _ratio(predicted: float, measured: float) -> Optional[float]:
    return predicted / measured if measured else None


def to_json(run, s: speculative.Speculative, device: str, dtype: str,
            state: tuple[int, int] = (0, 0)) -> dict[str, Any]:
    """A tfcalc.measure.speculative.SpeculativeRun beside the prediction s (one batch-1 round); ``state``: the
    target's and the draft's state bytes as counted (tfcalc.measure.speculative.state_bytes), beside what their
    caches allocated (each window's or chunk's ring with k spare slots)."""
    a = run.accept_rate
    e = tokens_at(a, s.draft_tokens)
    predicted_per_token = s.round_s / e
    d, v = run.draft_steps, run.verify_steps
    return {
        "device": device, "dtype": dtype, "batch": 1, "draft_tokens": s.draft_tokens, "weights": WEIGHTS,
        "same_weights": run.same_weights, "exact": run.exact, "tokens_checked": len(run.tokens),
        "exact_reference": "the target's greedy output through verify-shaped steps (the same kernels)",
        "agreement": run.agreement, "first_divergence": run.first_divergence,
        "plain_agreement": run.plain_agreement, "plain_first_divergence": run.plain_first_divergence,
        "rounds": run.rounds, "proposed": run.proposed, "accepted": run.accepted, "accept_rate": a,
        "tokens_per_round": run.tokens_per_round,
        "draft_step_s": d.median, "draft_step_p10_s": d.p10, "draft_step_p90_s": d.p90,
        "verify_step_s": v.median, "verify_step_p10_s": v.p10, "verify_step_p90_s": v.p90,
        "decode_s_per_token": run.decode_s_per_token, "decode_tokens_per_s": 1 / run.decode_s_per_token,
        "plain_decode_s_per_token": run.plain_s_per_token, "plain_decode_tokens_per_s": 1 / run.plain_s_per_token,
        "speedup": run.plain_s_per_token / run.decode_s_per_token,
        "kv_cache_bytes": run.state_bytes[0], "draft_kv_cache_bytes": run.state_bytes[1],
        "ring_spare_slots": s.draft_tokens,
        "predicted_at_measured": {
            "kv_cache_bytes": state[0], "draft_kv_cache_bytes": state[1],
            "accept_rate": a, "expected_tokens_per_step": e, "draft_step_s": s.draft_step_s,
            "verify_step_s": s.verify_step_s, "round_s": s.round_s, "decode_s_per_token": predicted_per_token,
            "decode_tokens_per_s": 1 / predicted_per_token, "speedup": s.target_step_s / predicted_per_token},
        "ratio": {"draft_step": _ratio(s.draft_step_s, d.median), "verify_step": _ratio(s.verify_step_s, v.median),
                  "decode": _ratio(predicted_per_token, run.decode_s_per_token)},
    }


def measure(model: "ModelRef", o: "InferOptions", report: "InferReport",
            advance: Callable[[], None] = lambda: None) -> dict[str, Any]:
    """Run the rounds on o.device at the report's prompt and generation (tfcalc.measure.speculative)."""
    from tfcalc.measure.speculative import SpeculativePlan, run_speculative, state_bytes  # imports torch

    assert report.draft is not None and report.speculative is not None
    s = report.speculative[0]
    plan = SpeculativePlan(target=model.cfg, draft=report.draft.cfg, device=o.device, dtype=o.dtype,
                           seq=report.seq, gen=o.gen, k=s.draft_tokens, warmup=min(o.warmup, 1))
    run = run_speculative(plan, advance)
    return to_json(run, s, report.device or o.device, o.dtype, state_bytes(plan))


def calls(o: "InferOptions") -> int:
    """Progress calls of the measured rounds: the plain steps, and at most one round per token."""
    return 0 if o.draft is None or not o.measure else 2 * max(0, o.gen - 1)
