"""Expert-parallel serving's two-batch overlap, stage by stage (``infer --ep --overlap ep``,
tfcalc.count.serving.expert_parallel, step 6). Pure arithmetic.

The batch runs as two halves A and B, each a program of stages per MoE layer; a stage ends at a yield, and the GPU's
compute stream runs the halves' stages alternately, B ``delta`` stages behind A (SGLang's
execute_overlapped_operations: A's first ``delta`` stages, then one of A's and one of B's in turn). The all-to-all's
dispatch and combine run on their own stream, one after another, each sent once the compute before it in its half
is done; a half's stage that needs its tokens (the experts after the dispatch, the next layer after the combine)
waits for them. The strategies are SGLang's for DeepSeek (python/sglang/srt/batch_overlap/operations_strategy.py),
DeepSeek's own (profile-data; "Day 6" note: the decode's attention split in two, a five-stage pipeline):

- prefill (``_compute_moe_deepseek_blog_prefill``, delta 0): [attention, router; send the dispatch] | [wait for it;
  routed experts; send the combine] | [shared expert; wait for the combine];
- decode (``_compute_moe_deepseek_blog_decode``, delta 2): [attention's projections] | [attention's core, router] |
  [send the dispatch; shared expert] | [wait for it; routed experts; send the combine] | [wait for it].

Each stage's seconds are its rows' share (tfcalc.count.serving.roofline's rows by component) of the half's step,
over the L MoE layers (a dense layer's compute counted with the attention, spread over them); the dispatch's and the
combine's seconds the all-to-all's, split by their bytes. Without an all-to-all the step is the halves' compute;
without compute, the all-to-all's seconds; in between, what the stages expose: a dispatch longer than the
attention beside it shows even where the whole compute outlasts the whole all-to-all.
"""

from __future__ import annotations

from tfcalc.count.serving.roofline import Ceilings, Step

PREP = ("attn_q", "attn_kv")  # MLA's and MHA's projections (attn_q_a, attn_q_b, attn_kv_a, attn_kv_b, attn_qkv)
SHARED = ("shared_expert",)
ROUTED = ("expert_ffn",)


def shares(step: Step, c: Ceilings) -> dict[str, float]:
    """{'prep', 'core', 'shared', 'routed'}: the row seconds' shares (the rest of the rows -- attention's core, the
    router, dense FFNs, the LM head -- are 'core')."""
    total = step.time_s(c)
    out = {"prep": 0.0, "shared": 0.0, "routed": 0.0}
    for r in step.rows:
        for key, names in (("prep", PREP), ("shared", SHARED), ("routed", ROUTED)):
            if r.component.startswith(names):
                out[key] += r.time_s(c) / total if total else 0.0
    out["core"] = max(1.0 - sum(out.values()), 0.0)
    return out


def _program(decode: bool, t: dict[str, float], d: float, c: float) -> list[list[tuple]]:
    """One half's stages for one MoE layer: ('C', s) compute, ('S', kind, s) send, ('W', kind) wait."""
    if decode:
        return [[("C", t["prep"])], [("C", t["core"])], [("S", "dispatch", d), ("C", t["shared"])],
                [("W", "dispatch"), ("C", t["routed"]), ("S", "combine", c)], [("W", "combine")]]
    return [[("C", t["prep"] + t["core"]), ("S", "dispatch", d)],
            [("W", "dispatch"), ("C", t["routed"]), ("S", "combine", c)],
            [("C", t["shared"]), ("W", "combine")]]


def step_seconds(halves_s: float, part: dict[str, float], a2a_s: float, layers: int, dispatch_share: float,
                 decode: bool) -> float:
    """The overlapped step: both halves' programs over ``layers`` MoE layers on one compute and one communication
    stream (module docstring). ``halves_s`` the two halves' compute together, ``part`` their shares (``shares``),
    ``a2a_s`` the whole batch's all-to-all (each half's is half of it)."""
    if layers <= 0:
        return max(halves_s, a2a_s)
    per = {k: v * halves_s / 2 / layers for k, v in part.items()}
    d, c = a2a_s / 2 * dispatch_share / layers, a2a_s / 2 * (1 - dispatch_share) / layers
    stages = [s for _ in range(layers) for s in _program(decode, per, d, c)]
    delta = 2 if decode else 0
    order = [("A", s) for s in stages[:delta]]
    for i in range(len(stages) - delta):
        order += [("A", stages[delta + i]), ("B", stages[i])]
    order += [("B", s) for s in stages[len(stages) - delta:]]
    compute = comm = 0.0
    done: dict[tuple[str, str], float] = {}
    for half, stage in order:
        for op in stage:
            if op[0] == "C":
                compute += op[1]
            elif op[0] == "S":  # its data ready once the compute before it is done; one all-to-all at a time
                comm = max(compute, comm) + op[2]
                done[half, op[1]] = comm
            else:
                compute = max(compute, done[half, op[1]])
    return max(compute, comm)
