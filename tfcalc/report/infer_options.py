"""What `tfcalc infer` is asked (tfcalc.report.infer builds the report from it): the batches, the prompt and
the generation, the weights' and the cache's formats, the device, and the serving modes -- tensor parallelism
(--tp), expert parallelism (--ep), speculative decoding (--draft), continuous batching (--rate) -- each field the
flag of that name."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True, kw_only=True)
class InferOptions:
    batches: tuple[int, ...]
    seq: Optional[int]  # None: the context length less gen (positions reach seq + gen), the whole context if unbounded
    gen: int
    dtype: str = "bf16"  # the weights' format: fp32, bf16, fp16, or fp8, int8, int4 (quantized)
    group_size: Optional[int] = None  # quantized formats: weights per scale (int4 default 128)
    kv_dtype: Optional[str] = None  # None: the weights' dtype when plain, else bf16
    src_seq: Optional[int] = None  # encoder-decoders: source length (default: seq)
    device_spec: Optional[str] = None  # a table key or a YAML path; None: infer.DEFAULT_SPEC (or the measured device)
    measure: bool = False
    device: str = "cpu"  # where --measure runs
    warmup: int = 3
    repeat: int = 10
    matmul_size: Optional[int] = None
    copy_bytes: Optional[int] = None
    matmul_efficiency: Optional[float] = None  # every matmul at this share of the peak, not the shape model
    bandwidth_efficiency: Optional[float] = None  # share of the datasheet bandwidth; None: the device's
    # issue 20, serving (helper I): tensor-parallel serving over tp GPUs of one node (tfcalc.count.serving.serving_tp)
    tp: int = 1
    # issue 31: expert-parallel serving of a mixture (tfcalc.count.serving.expert_parallel): the experts over ep GPUs,
    # attention TP tp × data-parallel attention_dp (None: ep / tp), redundant expert copies
    ep: int = 1
    attention_dp: Optional[int] = None
    redundant_experts: int = 0
    ep_overlap: bool = False  # --overlap ep: two micro-batches, the all-to-all under the compute
    expert_imbalance: object = None  # --expert-imbalance: a skew's name or a fixed factor (count.perf.expert_imbalance)
    adp_balance: bool = False  # --adp-balance on: the groups' prompts aligned (count.serving.adp_pace)
    ep_comm: str = "auto"  # --ep-comm: the MoE's exchange under attention DP (count.serving.ep_all_to_all.comm_method)
    draft: Optional[str] = None  # speculative decoding's draft model (tfcalc.count.serving.speculative)
    accept_rate: Optional[float] = None
    draft_tokens: Optional[int] = None  # None: speculative.DEFAULT_DRAFT_TOKENS
    rate: Optional[float] = None  # continuous batching: requests per second (tfcalc.count.serving.continuous)
    concurrency: Optional[int] = None  # continuous batching, closed loop: C users (tfcalc.count.serving.closed_loop)
    lengths: Optional[str] = None  # --concurrency: 'fixed' (None: the default) or 'random' (count/serving/lockstep)
    mean_input: Optional[int] = None
    mean_output: Optional[int] = None
    prefill_chunk: Optional[int] = None  # --rate: chunked prefill's tokens per step (0: off; None: the default)
    context_chunking: Optional[str] = None  # 'on' (None: the default) or 'off': whole prompts in the step's budget
    cached_prefix: Optional[int] = None  # N tokens of each prompt already in the KV cache (count/serving/prefix.py)
    disaggregate: Optional[str] = None  # --disaggregate P:D (count/serving/disaggregated.py)
    max_batch: object = None  # --rate: the engine's cap on sequences in flight a group, or 'trtllm-bench' (engine_caps)
    engine_settings: Optional[dict] = None  # --max-batch trtllm-bench: the caps it computed (report.continuous)
    requests: Optional[int] = None  # --rate --measure: requests served (None: continuous_measured's default)
    max_time: Optional[float] = None  # --rate --measure: seconds of serving at most
    launch: Optional[str] = None  # the prediction's launch mode: graph | eager (PerfSpec.launch; None: the device's)
    host_op_s: Optional[float] = None  # --host-op-us, in seconds: the host's time per kernel of an eager step
    eager: bool = False  # --measure --eager: the decode steps uncaptured (tfcalc.model.generate)
