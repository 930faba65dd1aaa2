"""`tfcalc infer`'s options of issue 20's serving part: tensor-parallel serving, continuous batching and
speculative decoding (the shared options: tfcalc.cli.options)."""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from tfcalc.cli.options import bound_help, bounded_count, described, length_value

ServeTP = Annotated[int, typer.Option(
    "--tp", help="Tensor-parallel serving over T GPUs of one node: heads, FFN and vocabulary split T ways (KV heads "
    "replicated when T exceeds them), two all-reduces per layer on the node's link; figures per GPU.",
    metavar="T")]
ServeEP = Annotated[int, typer.Option(
    "--ep", help="Expert-parallel serving of a mixture over E GPUs (across nodes in whole nodes): the routed experts "
    "split E ways, attention and dense layers tensor-parallel over --tp T and data-parallel over the E / T groups "
    "(each group its own sequences and their KV cache), a DeepEP-style all-to-all dispatch and combine per MoE layer; "
    "figures per GPU, tok/s of all E (SGLang --ep with --enable-dp-attention, vLLM --enable-expert-parallel).",
    metavar="E")]
AttentionDP = Annotated[Optional[int], described(
    "--attention-dp", help="With --ep E: data-parallel attention groups D; --tp T × D must equal E [default: E / T].",
    metavar="D")]
RedundantExperts = Annotated[int, typer.Option(
    "--redundant-experts", help="With --ep E: extra copies of hot experts spread over the GPUs (DeepSeek's EPLB: 32 "
    "at EP 144); each GPU holds (experts + R) / E (E must divide it) and the tokens spread over the n + R slots.",
    metavar="R")]
EPOverlap = Annotated[Optional[str], described(
    "--overlap", help="With --ep: ep runs each step as two half batches, one's all-to-all under the other's compute "
    "(SGLang's two-batch overlap, DeepSeek's dual micro-batch, vLLM's DBO); none: the all-to-all after the compute "
    "[default: none].", metavar="ep|none")]

ExpertImbalance = Annotated[Optional[str], described(
    "--expert-imbalance", help="With --ep: the fullest GPU's routed tokens over the mean, which the experts' GEMMs "
    "and the all-to-all wait on. eplb: the spread left by DeepSeek's EPLB (TensorRT-LLM's measured 0.041 by rank), "
    "none: no EPLB (0.48), uniform: a perfectly balanced router; each plus the step's routing noise, the expected "
    "maximum over the E GPUs; or a fixed factor F (1.0 = balanced) [default: eplb].", metavar="eplb|none|uniform|F")]
EPComm = Annotated[str, described(
    "--ep-comm", help="With --ep and attention DP: the MoE layer's exchange. allgather: every rank's tokens to every "
    "GPU before the experts, their outputs reduce-scattered after (TensorRT-LLM's CUTLASS MoE on Hopper); alltoall: "
    "each token to its experts' GPUs only; auto: allgather with attention DP inside one node, else alltoall (the "
    "source's rule: alltoall needs a multi-node NVLink domain and EP above top-k) [default: auto].",
    metavar="auto|alltoall|allgather")]

ADPBalance = Annotated[Optional[str], described(
    "--adp-balance", help="With --ep, attention DP and --rate/--concurrency: on: the groups' prompts held until every "
    "group has one (TensorRT-LLM's attention_dp_config enable_balance), so they share steps; off: each group "
    "schedules its own and a step waits for the group with the most prompts' attention (its default) [default: off].",
    metavar="on|off")]


def adp_balance(value: Optional[str]) -> bool:
    """--adp-balance: 'on' or 'off' (any case), one line otherwise."""
    from tfcalc.errors import InputError, shown

    v = "off" if value is None else str(value).strip().lower()
    if v not in ("on", "off"):
        raise InputError(f"--adp-balance must be on or off; got {shown(value)}")
    return v == "on"


def ep_overlap(value: Optional[str]) -> bool:
    """--overlap: 'ep' or 'none' (any case, spaces around), one line otherwise."""
    from tfcalc.errors import InputError, shown

    text = (value or "none").strip().lower()
    if text not in ("ep", "none"):
        raise InputError(f"--overlap takes ep (the all-to-all under two half batches' compute) or none; got "
                         f"{shown(value)}")
    return text == "ep"


Draft = Annotated[Optional[str], described(
    "--draft", help="Speculative decoding: the draft model (a preset, YAML or config.json) that proposes tokens for "
    "the target to verify; same vocabulary as MODEL. Needs --accept-rate.", metavar="MODEL")]
AcceptRate = Annotated[Optional[float], described(
    "--accept-rate", help="Speculative decoding: the probability A in [0, 1) that the target accepts a draft token "
    "(a property of the two models and the text, given, not predicted).", metavar="A")]
DraftTokens = Annotated[Optional[int], described(
    "--draft-tokens", help="Speculative decoding: draft tokens k per target step, 1-64 [default: 4].", metavar="K")]
Rate = Annotated[Optional[float], described(
    "--rate", help="Continuous batching: requests per second arriving (Poisson); with --mean-input and --mean-output, "
    "the steady state: concurrency (Little's law), TTFT, inter-token latency, throughput, capacity.", metavar="R")]
Concurrency = Annotated[Optional[int], described(
    "--concurrency", help="Continuous batching under a closed loop: C users, each sending its next request the moment "
    "the previous one's last token arrives, no think time (genai-perf/AIPerf concurrency mode, vLLM benchmark_serving "
    "--max-concurrency); in place of --rate, with --mean-input and --mean-output: throughput, TTFT, inter-token "
    "latency, the mean decode batch (fixed lengths: the engine's schedule simulated, count/serving/lockstep.py; "
    "--lengths random: mean-value analysis, count/serving/closed_loop.py).", metavar="C")]
Lengths = Annotated[Optional[str], described(
    "--lengths", help="--concurrency: how --mean-input and --mean-output are taken. fixed: every request exactly I "
    "prompt and O output tokens (genai-perf/AIPerf with --synthetic-input-tokens-stddev 0 and a fixed output length, "
    "NIM's benchmarking runs; vLLM bench's random dataset at --random-range-ratio 0 with --ignore-eos), priced by "
    "simulating the engine's deterministic schedule: users who finish together send their next prompts together and "
    "queue at the prefill; random: lengths that vary around the means, the users' phases random (mean-value "
    "analysis) [default: fixed].", metavar="fixed|random")]
MeanInput = Annotated[Optional[int], described(
    "--mean-input", help="Continuous batching: mean prompt tokens per request.", metavar="I")]
MeanOutput = Annotated[Optional[int], described(
    "--mean-output", help="Continuous batching: mean generated tokens per request.", metavar="O")]
PrefillChunk = Annotated[Optional[int], described(
    "--prefill-chunk", help="Continuous batching: chunked prefill's budget of tokens per engine step (vLLM's "
    "max_num_batched_tokens): each step decodes every sequence in flight and fills the rest with chunks of waiting "
    "prompts, the weights read once for both (Sarathi-Serve; vLLM V1's default); 0: each prompt prefilled whole, "
    "alone (vLLM V0's default scheduler) [default: 8192; with --measure, 0: tfcalc's runtime prefills whole].",
    metavar="N")]
ContextChunking = Annotated[Optional[str], described(
    "--context-chunking", help="Continuous batching: on: a prompt longer than the room a step's budget "
    "(--prefill-chunk) leaves is split into chunks over several steps (vLLM V1's chunked prefill); off: each prompt "
    "whole in one step, as many as fit the budget beside the decode tokens, the next waiting for a later step "
    "(TensorRT-LLM's in-flight batching without chunked context, its executor's default; its max_num_tokens, 8,192 "
    "by default, is the budget); needs --mean-input within the budget [default: on].", metavar="on|off")]
CachedPrefix = Annotated[Optional[int], described(
    "--cached-prefix", help="Prefix caching: the first N tokens of every prompt (a shared system prompt) have their "
    "KV in the cache already (vLLM's automatic prefix caching, SGLang's RadixAttention): a prefill computes the other "
    "I − N tokens, attending to all I positions; under --rate/--concurrency the KV cache holds the prefix once, not "
    "per sequence, so more sequences fit. Whole blocks of 16 hit (vLLM's block size): N rounded down to them; "
    "0 ≤ N < the prompt (--seq, or --mean-input under load) [default: none].", metavar="N",
    parser=length_value)]
MaxBatch = Annotated[Optional[str], described(
    "--max-batch", help="Continuous batching (--rate): the engine's cap on sequences in flight, a server's (an "
    "attention-DP group's under --ep): TensorRT-LLM's max_batch_size, vLLM's max_num_seqs. The steady state's batch "
    "stays within it and the KV cache's bound; where it is the tighter, the limit is 'batch'. trtllm-bench: the "
    "max_batch_size and max_num_tokens `trtllm-bench throughput` computes when its command names neither "
    "(tensorrt_llm/bench/build/tuning.py; count/serving/engine_caps.py), the tokens as --prefill-chunk with "
    "--context-chunking off unless given [default: no cap but the KV cache's].",
    metavar="B|trtllm-bench")]
Disaggregate = Annotated[Optional[str], described(
    "--disaggregate", help="Continuous batching (--rate): disaggregated prefill and decode, P prefill and D decode "
    "instances, each of the layout --tp/--ep give (DistServe, Splitwise, Mooncake, SGLang PD): prompts queue for a "
    "prefill instance, their KV cache moves to a decode instance layer by layer (NVLink when all instances fit one "
    "node, else the network), decode instances run decode steps only; TTFT, inter-token latency and capacity, limit "
    "'prefill' or 'decode' (count/serving/disaggregated.py; JSON disaggregated).", metavar="P:D")]
Requests = Annotated[Optional[int], described(
    "--requests", help="Continuous batching with --measure: requests to serve (Poisson arrivals at --rate, seeded); "
    f"{bound_help('--requests')} [default: 64].", metavar="N",
    parser=bounded_count("--requests"))]
MaxTime = Annotated[Optional[float], described(
    "--max-time", help="Continuous batching with --measure: seconds of serving at most; the run stops there and "
    f"says how many requests it served; {bound_help('--max-time')} [default: 60].", metavar="S")]
Launch = Annotated[Optional[str], described(
    "--launch", help="How the steps' kernels reach the GPU: graph (captured in CUDA graphs or torch.compile's "
    "reduce-overhead, as tfcalc's runtime decodes on CUDA and serving stacks run: no host term) or eager (every kernel "
    "launched from Python: each step takes the longer of its device time and kernels × --host-op-us of host time, "
    "prefill included) [default: graph].", metavar="graph|eager")]
HostOpUs = Annotated[Optional[float], described(
    "--host-op-us", help="With --launch eager: the host's µs per kernel of a step [default: 31, fitted on an H100 "
    "node's eager Llama-2-7B decode step].", metavar="US")]
