"""`tfcalc infer --rate R --mean-input I --mean-output O`: continuous batching in steady state
(tfcalc.count.serving.continuous) beside the static estimate at its mean decode batch; --concurrency C in place of
--rate: C users in a closed loop (tfcalc.count.serving.closed_loop). The JSON's ``continuous``
object; None without --rate. With --measure the loop runs on the device: tfcalc.report.continuous_measured."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Optional

from tfcalc.count.serving import chunked, closed_loop, continuous, engine_caps, lockstep, prefix
from tfcalc.errors import InputError

SCHEDULER = ("iteration-level (Orca, Yu et al. 2022), prefills first and whole (vLLM's default without chunked "
             "prefill, Kwon et al. 2023), paged KV cache; Poisson arrivals")
CHUNKED = ("iteration-level (Orca, Yu et al. 2022), chunked prefill: every step decodes the sequences in flight and "
           "fills the rest of its token budget with prompt chunks, the weights read once (Sarathi-Serve, Agrawal et "
           "al. 2024; vLLM V1's default), paged KV cache; Poisson arrivals")
WHOLE = ("iteration-level (Orca, Yu et al. 2022), in-flight batching without chunked context: every step decodes the "
         "sequences in flight and takes the waiting prompts whole, first come, first served, while they fit the rest "
         "of its token budget, the weights read once (TensorRT-LLM's micro-batch scheduler, enable_chunked_context "
         "false), paged KV cache; Poisson arrivals")
CONTEXT_CHUNKING = ("on", "off")


def prefill_chunk(o) -> Optional[int]:
    """The steady state's chunked-prefill budget: --prefill-chunk N, 0 off; by default vLLM V1's 8,192
    (tfcalc.count.serving.chunked), or off with --measure (tfcalc's runtime prefills each prompt whole)."""
    if o.prefill_chunk is None:
        return None if o.measure else chunked.DEFAULT_BUDGET
    return o.prefill_chunk or None


def split(o) -> bool:
    """--context-chunking: on (the default) splits a prompt over the steps' budget; off runs it whole in one step."""
    return o.context_chunking != "off"


def loaded(o) -> bool:
    """Whether the options ask for a server under load: --rate R (Poisson) or --concurrency C (closed loop)."""
    return o.rate is not None or o.concurrency is not None


def flag(o) -> str:
    return "--rate" if o.rate is not None else "--concurrency"


def check(o) -> None:
    """--rate or --concurrency needs --mean-input and --mean-output, and takes the place of --batch, --seq and --gen."""
    if o.cached_prefix is not None and o.measure:
        raise InputError("--cached-prefix and --measure: tfcalc's own runtime prefills every prompt whole; the cached "
                         "prefix is a prediction only")
    given = {"--mean-input": o.mean_input, "--mean-output": o.mean_output, "--prefill-chunk": o.prefill_chunk,
             "--context-chunking": o.context_chunking, "--max-batch": o.max_batch}
    if o.lengths is not None and o.concurrency is None:
        raise InputError("--lengths says how --concurrency's users send their requests (fixed or random lengths); "
                         "give --concurrency C")
    if not loaded(o):
        for name, value in given.items():
            if value is not None and name == "--max-batch":  # --concurrency refuses it (check_max_batch)
                raise InputError("--max-batch belongs to continuous batching under a Poisson stream: give --rate R "
                                 "(requests per second) too")
            if value is not None:
                raise InputError(f"{name} belongs to continuous batching: give --rate R (requests per second) or "
                                 "--concurrency C (users) too")
        return
    if o.rate is not None and o.concurrency is not None:
        raise InputError("--rate and --concurrency: give one (--rate: Poisson arrivals at R requests/s; --concurrency: "
                         "C users, each sending its next request when the last one ends)")
    for name, value in list(given.items())[:2]:
        if value is None:
            raise InputError(f"{flag(o)} needs --mean-input I and --mean-output O (tokens per request); {name} is "
                             "missing")
    if o.draft is not None:
        raise InputError(f"{flag(o)} and --draft: continuous batching with speculative decoding is not modelled; give "
                         "one")
    if o.concurrency is not None:
        closed_loop.check_users(o.concurrency)
        if o.lengths is not None:
            lockstep.check_lengths(o.lengths)
        if o.lengths == "fixed" and o.ep > 1:
            raise InputError("--lengths fixed with --ep: the attention-DP groups under a closed loop are priced by the "
                             "mean-value analysis of random phases only; give --lengths random or leave it out")
        continuous.check(continuous.Traffic(1.0, o.mean_input, o.mean_output, o.cached_prefix or 0))
    else:
        continuous.check(continuous.Traffic(o.rate, o.mean_input, o.mean_output, o.cached_prefix or 0))
    if o.context_chunking is not None:
        check_chunking(o)
    if o.max_batch is not None:
        check_max_batch(o)
    if o.prefill_chunk is not None and o.prefill_chunk != 0:
        chunked.check_budget(o.prefill_chunk)
        if o.measure:
            raise InputError("--prefill-chunk and --measure: tfcalc's own runtime prefills each prompt whole "
                             "(tfcalc.model.slots); give --prefill-chunk 0 or leave it out")


TRTLLM_BENCH = "trtllm-bench"  # --max-batch trtllm-bench: the caps trtllm-bench throughput picks (engine_options)


def parse_max_batch(value: Any) -> Any:
    """--max-batch's text: a whole number in ASCII digits, or 'trtllm-bench'; anything else ('١٢' too, which
    str.isdigit and int take) goes on to check_max_batch's error."""
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return int(value.strip())
    return value


def check_max_batch(o) -> None:
    """--max-batch B caps the Poisson steady state's sequences in flight (count/serving/engine_caps.py); 'trtllm-bench'
    takes the cap trtllm-bench throughput computes (engine_options)."""
    if o.max_batch != TRTLLM_BENCH:
        engine_caps.check_max_batch(o.max_batch)
    if o.concurrency is not None or o.measure:
        raise InputError("--max-batch caps --rate's steady state; --concurrency's users and --measure's runtime hold "
                         "their own sequences: give --rate, or leave --max-batch out")


def check_chunking(o) -> None:
    if o.context_chunking not in CONTEXT_CHUNKING:
        raise InputError("--context-chunking must be on (a prompt split over the steps' budget) or off (each prompt "
                         f"whole in one step); got {str(o.context_chunking)[:40]!r}")
    if o.context_chunking == "off" and (o.prefill_chunk == 0 or o.measure):
        raise InputError("--context-chunking off puts whole prompts in the steps' token budget; --prefill-chunk 0 and "
                         "--measure prefill each prompt alone, in a step of its own: give one")
    budget = prefill_chunk(o)
    if o.context_chunking == "off" and budget is not None:  # the tokens a step computes: a cached prefix's P are not
        hit = prefix.hit_tokens(o.cached_prefix or 0)  # (the engine packs I − P a prompt, count/serving/prefix.py)
        what = "--mean-input less the cached prefix" if hit else "--mean-input"
        chunked.check_whole(o.mean_input - hit, budget, what)


def cached_tokens(model, o, seq: int) -> int:
    """--cached-prefix N, checked: N < the prompt (--seq, or --mean-input under load), a decoder-only model, no
    --measure (tfcalc's runtime prefills every prompt whole); the P = ⌊N/16⌋·16 tokens that hit
    (tfcalc.count.serving.prefix, step 1), 0 without it."""
    if o.cached_prefix is None:
        return 0
    prefix.check(o.cached_prefix, seq, "--mean-input" if loaded(o) else "--seq")
    if not chunked.applies(model.cfg):
        raise InputError(f"--cached-prefix: {model.cfg.name} attends across to a source (an encoder-decoder or cross-"
                         "attention): prefix caching is priced for decoder-only models")
    if o.ep > 1 and not loaded(o):  # the single-request estimate under EP (count/serving/expert_parallel.py) reshards
        raise InputError("--cached-prefix with --ep: the attention-DP groups take it under --rate or --concurrency; "
                         "the single-request estimate under --ep prefills whole prompts")
    return prefix.hit_tokens(o.cached_prefix)


def engine_options(o, cfg, spec, fmt, kv: str):
    """--max-batch trtllm-bench: the settings `trtllm-bench throughput` runs with when its command names no
    --max_batch_size and --max_num_tokens (count/serving/engine_caps.py): its heuristic over TRT-LLM's tp_size GPUs
    (--tp T, or the E GPUs of --ep E: attention DP does not enter it) at the GPU's memory as the driver reports it,
    the weights' and cache's element bytes, --mean-input and --mean-output; max_batch_size a server's (an
    attention-DP group's), and, unless given, --prefill-chunk its max_num_tokens with --context-chunking off
    (trtllm-bench's default, chunked prefill off). Returns the options with them set, the caps in engine_settings."""
    if o.max_batch != TRTLLM_BENCH:
        return o
    if spec is None:
        raise InputError("--max-batch trtllm-bench reads the GPU's memory from the device table: give --device-spec")
    from tfcalc import devices
    from tfcalc.count.model.params import total

    if not cfg.n_kv_head:  # tuning.py's step 1 prices 2 · layers · KV heads · head size a token: no heads, no cache
        raise InputError(f"--max-batch trtllm-bench: {cfg.name} has no attention KV heads, and trtllm-bench's "
                         "heuristic sizes the batch by the KV cache per token; give --max-batch B")
    gpus = o.ep if o.ep > 1 else o.tp
    chunked_on = o.context_chunking == "on"
    caps = engine_caps.trtllm_bench(total(cfg), cfg.n_layer, cfg.n_kv_head, cfg.head_dim, gpus, 1, o.mean_input,
                                    o.mean_output, devices.driver_bytes(spec), fmt.dtype, kv, chunked=chunked_on)
    o = replace(o, max_batch=caps.max_batch_size,
                prefill_chunk=o.prefill_chunk if o.prefill_chunk is not None else caps.max_num_tokens,
                context_chunking=o.context_chunking or "off")
    return replace(o, engine_settings={"engine": TRTLLM_BENCH, "source": caps.source, "tp_size": gpus,
               "kv_cache_free_gpu_mem_fraction": engine_caps.KV_FRACTION, "kv_requests": caps.kv_requests,
               "max_batch_size": caps.max_batch_size, "max_num_tokens": caps.max_num_tokens})


def static_options(o):
    """The static estimate beside: seq = I, gen = O (the batch follows from the steady state)."""
    if not loaded(o):
        return o
    return replace(o, seq=o.mean_input, gen=o.mean_output, batches=(1,))


def steady_state(o, cfg, fmt, kv, ceilings, memory, tp) -> continuous.SteadyState:
    """The steady state the options ask for: Poisson arrivals at --rate, or a closed loop of --concurrency users."""
    if o.concurrency is not None:
        return closed_loop.closed_loop(cfg, fmt, kv, ceilings, o.concurrency, o.mean_input, o.mean_output, memory, tp,
                                       prefill_chunk(o), o.lengths or "fixed", split(o), o.cached_prefix or 0)
    state = continuous.steady_state(cfg, fmt, kv, ceilings, continuous.Traffic(o.rate, o.mean_input, o.mean_output,
                                                                               o.cached_prefix or 0),
                                    memory, tp, prefill_chunk(o), split=split(o), max_batch=o.max_batch)
    return replace(state, engine=o.engine_settings)


def batch_of(state: continuous.SteadyState, fitting: Optional[int]) -> int:
    """The static estimate's batch: the mean decode batch rounded up; over capacity, the largest batch whose
    KV cache of I + O positions fits (``fitting``; 1 without a memory size)."""
    if state.concurrency is not None:
        return max(1, math.ceil(state.concurrency))
    return max(1, fitting or 1)


def scheduler(state: continuous.SteadyState) -> str:
    return SCHEDULER if state.prefill_chunk is None else WHOLE if state.whole else CHUNKED


def to_json(state: Optional[continuous.SteadyState],
            measured: Optional[dict[str, Any]] = None) -> Optional[dict[str, Any]]:
    """The steady state; ``measured``: the run of --measure beside it (tfcalc.report.continuous_measured)."""
    if state is None:
        return None
    t = state.traffic
    arrivals = "Poisson arrivals" if state.users is None else f"closed loop of {state.users:,} users, no think time"
    return {"rate_per_s": t.rate, "users": state.users, "arrivals": arrivals, "mean_input": t.mean_input,
            "mean_output": t.mean_output,
            "scheduler": scheduler(state).replace("Poisson arrivals", arrivals),
            "prefill_chunk": state.prefill_chunk,
            "context_chunking": None if state.prefill_chunk is None else "off" if state.whole else "on",
            "prefill_steps": state.prefill_steps, "prefill_s": state.prefill_s,
            "prefill_share": state.prefill_share, "concurrency": state.concurrency,
            "decode_batch": state.concurrency, "decode_step_s": state.decode_step_s, "ttft_s": state.ttft_s,
            "itl_s": state.itl_s if t.mean_output > 1 else None, "e2e_s": state.e2e_s, "request_s": state.request_s,
            "output_tokens_per_s": None if state.over_capacity else t.rate * t.mean_output,
            "input_tokens_per_s": None if state.over_capacity else t.rate * t.mean_input,
            "kv_cache_bytes": state.kv_cache_bytes, "max_concurrency": state.max_concurrency,
            "lengths": state.lengths, "method": state.method, "ttft_p50_s": state.ttft_p50_s,
            "ttft_p99_s": state.ttft_p99_s, "max_rate_per_s": state.max_rate, "over_capacity": state.over_capacity,
            "limit": state.limit, "cached_prefix": state.cached_prefix, "cached_tokens": state.cached_tokens,
            "prefix_kv_bytes": state.prefix_kv_bytes, "max_batch": state.max_batch, "engine_settings": state.engine,
            "attention_dp_pace": state.pace,
            "measured": measured}
