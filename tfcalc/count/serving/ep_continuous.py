"""Continuous batching under expert parallelism (``infer --ep E [--tp T] [--attention-dp D] --rate R`` or
``--concurrency C``): the layout of tfcalc.count.serving.expert_parallel serving a stream of requests, as the published
stacks run a mixture under load -- TensorRT-LLM's ``enable_attention_dp`` with ``--ep`` (docs/source/performance/
perf-overview.md, "For MoE models"), SGLang's ``--enable-dp-attention``, vLLM's data-parallel attention with
``--enable-expert-parallel``. Pure arithmetic on the serving roofline.

1. The requests split evenly over the D attention-DP groups: each group is a server of its own
   (tfcalc.count.serving.continuous, or closed_loop under --concurrency) at R/D requests/s (C/D users), with its own
   KV cache (its T GPUs' memory less their weights: the group's sequences each at serving_tp's share over T) and its
   own chunked prefill (the budget B is per group, as TensorRT-LLM's max_num_tokens and each vLLM DP engine's
   max_num_batched_tokens are per rank).
2. A step is synchronised across the groups: every MoE layer's exchange waits for all of them, so the step takes
   the slowest group's time. In the steady state every group is at the mean -- n decode sequences, and in a step
   carrying prompt chunks, a chunk in every group -- priced so; then, unless ``balance`` (``--adp-balance on``:
   TensorRT-LLM's attention_dp_config enable_balance, which holds a rank's prompts until the others have theirs),
   each prompt's t_p(n) gains tfcalc.count.serving.adp_pace's stall, t_ne(n)·(M_D(λ)/λ − 1): the groups schedule
   their prompts apart (the source's default), and a group with more prompts in a step holds the others for their
   attention and dense rows (``nonexpert_s``). Not modelled: the spread between the groups' decode batches. At
   light load a prompt's step is priced with the other groups' chunks beside it, so a lone prompt's TTFT is
   over-counted by their expert work.
3. One GPU's step at a group's n decode tokens (and a chunk of c): the attention and dense rows of the group's n (+ c)
   tokens under TP T (expert_parallel.Sharding's rule), the routed experts' share of every group's tokens, D·(n + c)
   (FLOPs h/(n + R) of the pairs, the weights of its h experts that some of those tokens hit), the per-step costs of
   tfcalc.count.perf.inference, the group's TP all-reduces, and the all-to-all of its (n + c)/T tokens per MoE layer
   (expert_parallel step 4; the decode's route for a step without a chunk, the prefill's with one), after the compute.
4. The whole server: D groups' figures -- requests/s, sequences in flight, capacity, users D times a group's; latencies
   a group's; memory per GPU.

Under --overlap ep (two half batches) the continuous figures are not modelled (refused in one line).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.count.model.memory import activation_element_bytes
from tfcalc.count.model.quant import WeightFormat
from tfcalc.count.perf.inference import step_seconds
from tfcalc.count.serving import adp_pace, chunked, continuous, expert_parallel as ep, serving_tp
from tfcalc.count.serving.roofline import Ceilings, Row, Step, decode_step, prefill_step, weight_bytes_by_component
from tfcalc.count.serving.static import step_overhead
from tfcalc.workload import decoder_source


class GroupSharding:
    """One GPU's share of a group's step (step 3): ``step(group_step)`` for a step of one attention-DP group's tokens,
    every group alike; ``state``: per-sequence state on one GPU of the group; ``weights``: one GPU's."""

    def __init__(self, cfg: ModelConfig, fmt: WeightFormat, lay: ep.ExpertLayout):
        self.cfg, self.fmt, self.lay = cfg, fmt, lay
        self.weights = ep.weights_per_gpu(cfg, fmt, lay)["total"]
        self.other = {"decode": ep.weights_per_gpu(cfg, fmt, lay, decode=True)["other"],
                      "prefill": ep.weights_per_gpu(cfg, fmt, lay)["other"]}

    def expert(self, row: Row, tokens: int, decode: bool) -> Row:
        """A routed-expert row of a group's step (its FLOPs and activations those of the group's tokens) as one GPU
        runs it when every group's ``tokens`` (all D groups' together) reach the experts."""
        d, (m, k, n) = self.lay.dp, row.shape  # m: a group's rows per expert; every group's reach the expert
        whole = replace(row, flops=row.flops * d, activation_bytes=row.activation_bytes * d, shape=(m * d, k, n))
        weights = weight_bytes_by_component(self.cfg, self.fmt, decode).get(row.component, 0)
        return ep.expert_row(whole, weights, self.cfg, self.lay, tokens)

    def step(self, group: Step, tokens: Optional[int] = None) -> Step:
        """``tokens``: every group's tokens through the experts (default D × the group's step's)."""
        cfg, decode = self.cfg, group.phase == "decode"
        tokens = self.lay.dp * group.batch * group.queries if tokens is None else tokens
        rows = []
        for r in group.rows:
            if r.component.startswith(ep.ROUTED):
                rows.append(self.expert(r, tokens, decode))
            elif r.component == "other":
                rows.append(replace(r, weight_bytes=self.other["decode" if decode else "prefill"]))
            else:
                rows.append(serving_tp.shard_row(r, cfg, self.lay.tp))
        return replace(group, rows=tuple(rows))

    def state(self, w, spare: int = 0) -> int:
        return serving_tp.state_bytes_per_gpu(self.cfg, w, self.lay.tp, spare)


class Engine(continuous.Engine):
    """continuous.Engine for one attention-DP group (steps 1-3): its steps are one GPU's, priced with every group's
    tokens at the experts and the all-to-all added after the compute."""

    def __init__(self, cfg: ModelConfig, fmt: WeightFormat, kv_dtype: str, c: Ceilings, t: continuous.Traffic,
                 memory: Optional[int], lay: ep.ExpertLayout, budget: Optional[int] = None, split: bool = True,
                 balance: bool = False):
        from functools import lru_cache

        self.cfg, self.fmt, self.kv, self.c, self.memory, self.lay = cfg, fmt, kv_dtype, c, memory, lay
        self.balance, self.inp, self.out = balance, t.mean_input, t.mean_output
        self.nonexpert_s = lru_cache(maxsize=None)(self._nonexpert_s)
        self.tp = lay.attention()
        self.shard = GroupSharding(cfg, fmt, lay)
        self.act = activation_element_bytes(fmt.compute_dtype)
        self.context = t.mean_input + max(1, t.mean_output // 2)
        self.src = decoder_source(cfg, t.mean_input, None)
        pre = self.shard.step(self.prompt_step(t))  # a cached prefix's P tokens not computed (serving.prefix)
        self.prefill_s = step_seconds(pre.time_s(c), self.with_a2a(self.overhead(pre), pre.queries, False))
        self.decode_parts = lru_cache(maxsize=None)(self._decode_parts)
        self.step_s = lru_cache(maxsize=None)(self._step_s)
        self.budget = budget if budget is not None and chunked.applies(cfg) else None
        self.chunked = None if self.budget is None else ChunkedPrefill(self, t.mean_input - self.cached, self.budget,
                                                                       split, start=self.cached)

    def prompts_s(self, k: int) -> float:
        """k prompts in one prefill step of every group (k = 1: t_p), the all-to-all of the group's k·(I − P) tokens."""
        pre = self.shard.step(prefill_step(self.cfg, k, self.prompt_tokens, self.fmt, self.kv, src_seq=self.src,
                                           start=self.cached))
        return step_seconds(pre.time_s(self.c), self.with_a2a(self.overhead(pre), k * pre.queries, False))

    def a2a_s(self, group_tokens: int, decode: bool) -> float:
        """Step 3's all-to-all: the group's tokens dispatched a T-th by each of its GPUs, combined back; the fullest
        GPU receives f times the mean's (expert_parallel, step 7: every group's tokens routed at once)."""
        a2a = ep.all_to_all(self.cfg, self.lay, group_tokens / self.lay.tp, self.act, self.fmt.compute_dtype == "fp8",
                            decode)
        return ep.fullest_all_to_all(a2a, self.cfg, self.lay, group_tokens * self.lay.dp).seconds

    def with_a2a(self, over, group_tokens: int, decode: bool, comm_s: Optional[float] = None):
        """The per-step costs with the all-to-all in comm_s (after the compute, exposed), beside the TP all-reduces."""
        if over is None:
            return None
        base = over.comm_s if comm_s is None else comm_s
        return replace(over, comm_s=base + self.a2a_s(group_tokens, decode))

    def _decode_parts(self, n: int):
        step = self.shard.step(decode_step(self.cfg, n, self.context, self.fmt, self.kv, src_seq=self.src))
        return step, self.with_a2a(self.overhead(step), n, True)

    def _nonexpert_s(self, n: int) -> float:
        """adp_pace's t_ne(n): a whole prompt's attention, dense and other rows on the group's GPUs beside n sequences
        decoding -- the mixed step's rows less the decode step's (the weights read once), its expert rows left out."""
        def rest(s: Step) -> float:
            return sum(r.time_s(self.c) for r in s.rows if not r.component.startswith(ep.ROUTED))

        size = self.inp - self.cached  # the prompt's uncached tokens, I − P
        prompt = self.shard.step(chunked.chunk_step(self.cfg, self.cached, size, self.fmt, self.kv))
        if n == 0:
            return rest(prompt)
        decode, _ = self.decode_parts(n)
        return max(0.0, rest(chunked.mixed_step(self.cfg, decode, prompt)) - rest(decode))

    def stall_s(self, n: float) -> float:
        """adp_pace step 3: the seconds a prompt adds, beyond the aligned t_p(n), where the groups schedule apart."""
        if self.balance or self.lay.dp == 1:
            return 0.0
        lam = adp_pace.prompts_per_step(n, self.out)
        return self.nonexpert_s(round(n)) * adp_pace.stall_factor(lam, self.lay.dp)

    def own_prompt_s(self, n: float) -> float:
        """A prompt's own steps for its TTFT: the aligned t_p(n), without the stall it puts on the other groups
        (which the group's share ρ counts through prompt_s)."""
        return self.prefill_s if self.chunked is None else self.chunked.aligned(n)

    def pace(self, n: Optional[float]) -> dict:
        """The stall's terms at the steady state's n (JSON)."""
        n = 1.0 if n is None else n
        lam = adp_pace.prompts_per_step(n, self.out)
        return {"balance": "on" if self.balance else "off", "groups": self.lay.dp, "prompts_per_step": lam,
                "expected_max_prompts": adp_pace.expected_max(lam, self.lay.dp),
                "nonexpert_prompt_s": self.nonexpert_s(round(n)), "stall_s_per_prompt": self.stall_s(n),
                "source": "TensorRT-LLM v1.0 py_executor._schedule: each attention-DP rank schedules its own "
                          "prompts (attention_dp_config.enable_balance off by default); every MoE layer waits for "
                          "the rank with the most (count.serving.adp_pace)"}

    def overhead(self, step: Step):
        copy = ep.route(self.lay, step.phase == "decode") != "low_latency"  # DeepEP LL: no copy (moe_serving, 1)
        return step_overhead(self.cfg, step, self.fmt, self.c, self.tp, self.src, permute=copy)


class ChunkedPrefill(chunked.ChunkedPrefill):
    """chunked.ChunkedPrefill for a group (step 3): a chunk in every group; the mixed step's experts priced at every
    group's n + c tokens, its all-to-all over the group's n + c."""

    def _chunk_parts(self, start: int, size: int):
        e = self.e
        step = e.shard.step(chunked.chunk_step(e.cfg, start, size, e.fmt, e.kv))
        return step, e.with_a2a(e.overhead(step), size, False)

    def aligned(self, n: float) -> float:
        """t_p(n) with a prompt in every group's step (chunked.ChunkedPrefill.seconds)."""
        return super().seconds(n)

    def seconds(self, n: float) -> float:
        """t_p(n) aligned and the groups' stall (adp_pace, Engine.stall_s)."""
        return self.aligned(n) + self.e.stall_s(n)

    def step_s(self, n: int, start: int, size: int) -> float:
        chunk, over = self._chunk(start, size)
        e = self.e
        if n == 0:
            return step_seconds(chunk.time_s(e.c), over)
        decode, d_over = e.decode_parts(n)
        mixed = chunked.mixed_step(e.cfg, decode, chunk)
        tokens = e.lay.dp * (n + size)
        rows = tuple(replace(r, weight_bytes=round(weight_bytes_by_component(e.cfg, e.fmt, True).get(r.component, 0)
                                                    * ep.hit_per_gpu(e.cfg, e.lay, tokens) / ep.moe_of(e.cfg).n_expert))
                     if r.component.startswith(ep.ROUTED) else r for r in mixed.rows)
        tp_comm = 0.0 if e.tp is None else chunked.mixed_comm_seconds(e.cfg, e.tp, n, size, self.act)
        merged = chunked.merge_overhead(d_over, over, tp_comm + e.a2a_s(n + size, False))
        return step_seconds(replace(mixed, rows=rows).time_s(e.c), merged)


def whole(state: continuous.SteadyState, dp: int) -> continuous.SteadyState:
    """Step 4: a group's steady state as the whole server's."""
    def times(v):
        return None if v is None else v * dp

    t = state.traffic
    return replace(state, traffic=continuous.Traffic(t.rate * dp, t.mean_input, t.mean_output),
                   concurrency=times(state.concurrency), max_concurrency=times(state.max_concurrency),
                   max_rate=state.max_rate * dp, users=None if state.users is None else round(state.users * dp))
