"""tfcalc: exact parameter, FLOP and memory counts for real PyTorch transformers.

The public API: each function returns the report object its command prints, and ``report.to_json()``
equals the command's ``--json`` output for the same arguments. ``model`` is a preset name or alias, a
path to a YAML or Hugging Face config.json file, or a ``tfcalc.config.ModelConfig``; keyword overrides
are --set overrides (``tfcalc.params("gpt2", n_layer=6)``). Lengths and counts read "4k" as the command line
does (``seq="4k"`` is 4,096 tokens, ``batch="1k"`` 1,000 sequences), and an error names the Python argument
(``seq``), not the flag.

    >>> import tfcalc
    >>> tfcalc.flops("gpt2", seq=1024).to_json()["forward_flops"]
    291648307200

Everything is imported on first use, so ``import tfcalc`` costs little, and torch is imported only by
what runs a real module.
"""

from __future__ import annotations

import os
import warnings
from typing import TYPE_CHECKING, Any, Optional, Sequence, Union

__version__ = "0.1.0"

# torch prints a warning at import when NumPy is absent; tfcalc never uses NumPy, so it is only noise.
warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)

if TYPE_CHECKING:
    from tfcalc.report.bench import BenchReport
    from tfcalc.report.bench_dist import DistBenchReport
    from tfcalc.report.compare import CompareReport
    from tfcalc.report.decode import DecodeBenchReport
    from tfcalc.report.flops import FlopsReport
    from tfcalc.report.infer_report import InferReport
    from tfcalc.report.inspect import InspectReport
    from tfcalc.report.memory import MemoryReport
    from tfcalc.report.model_ref import ModelSpec
    from tfcalc.report.params import ParamsReport
    from tfcalc.report.plan import PlanReport
    from tfcalc.report.scan import ScanReport


from tfcalc import api_args  # noqa: E402 - the rules every public function below follows


@api_args.public
def params(model: "ModelSpec", *, measure: bool = True, **overrides: Any) -> "ParamsReport":
    """`tfcalc params`: analytic and (measure=True) empirical parameter counts."""
    from tfcalc.report.params import build_params

    return build_params(api_args.resolve_model(model, overrides), measure)


@api_args.public
def flops(model: "ModelSpec", batch: int = 1, seq: Optional[int] = None, *, src_seq: Optional[int] = None,
          measure: bool = False, device: str = "meta", training: bool = False, recompute: bool = False,
          **overrides: Any) -> "FlopsReport":
    """`tfcalc flops`: forward, training and decode FLOPs; measure=True runs FlopCounterMode on device."""
    from tfcalc.report.flops import build_flops
    from tfcalc.workload import Workload

    workload = Workload(batch=batch, seq=seq, src_seq=src_seq)
    return build_flops(api_args.resolve_model(model, overrides), workload, measure, device, training, recompute)


@api_args.public
def memory(model: "ModelSpec", batch: int = 1, seq: Optional[int] = None, *, src_seq: Optional[int] = None,
           dtype: Optional[str] = None, training: bool = False, optimizer: str = "adam-mixed",
           attention: Optional[str] = None, recompute: str = "none", budget: Union[int, str, None] = None,
           measure: bool = False, device: str = "cpu", lora_rank: Optional[int] = None,
           lora_targets: Union[str, Sequence[str], None] = None, base_dtype: Optional[str] = None,
           **overrides: Any) -> "MemoryReport":
    """`tfcalc memory`: weights, KV cache, activations, training state; measure=True reads the peak on device.
    dtype defaults as on the command line: bf16, or fp32 for a run measured on a CPU. lora_rank, lora_targets
    ('q,v' or a sequence of names), base_dtype ('nf4'): as --lora-rank, --lora-targets, --base-dtype."""
    from tfcalc.count.model import lora
    from tfcalc.report.memory import MemoryOptions, build_memory
    from tfcalc.workload import Workload, default_dtype

    options = MemoryOptions(training=training, optimizer=optimizer, attention=attention, recompute=recompute,
                            budget=budget,  # budget: bytes, read by _checked as --budget is
                            lora=lora.spec(lora_rank, lora_targets, base_dtype))
    dtype = dtype or default_dtype(device if measure else None)
    workload = Workload(batch=batch, seq=seq, src_seq=src_seq, dtype=dtype)
    return build_memory(api_args.resolve_model(model, overrides), workload, options, measure, device)


@api_args.public
def bench(model: "ModelSpec", batch: int = 1, seq: Union[int, Sequence[int], None] = None, *, device: str = "cpu",
          dtype: Optional[str] = None, min_time: float = 3.0, repeat: Optional[int] = None, rounds: int = 3,
          warmup: Optional[int] = None, compile: bool = False, n_layer: Optional[int] = None,
          matmul_size: Optional[int] = None, weights: Optional[str] = None, decode: Optional[int] = None,
          copy_bytes: Optional[int] = None, nproc: Optional[int] = None, tp: Optional[int] = None, zero: int = 0,
          sequence_parallel: bool = False,
          **overrides: Any) -> "Union[BenchReport, DecodeBenchReport, DistBenchReport]":
    """`tfcalc bench`: timed forward passes on device (one length, or several), min_time seconds and at
    least repeat calls per length in interleaved rounds, after a warm-up until stable (or warmup calls);
    weights: a checkpoint whose weights the timed model holds. decode=N times generation instead (`tfcalc
    bench decode --steps N`): the prefill of a seq-token prompt, then N decode steps, repeat times after warmup
    (default 3) untimed runs. nproc: forward + backward on nproc torch.distributed ranks under a layout
    (tp, zero 0 or 3, sequence_parallel), one length, returning a DistBenchReport. repeat: 3 forward passes
    (the command line's default), 5 decode runs or steps on ranks."""
    from tfcalc.report.bench import build_bench, plan_bench
    from tfcalc.workload import default_dtype

    ref = api_args.resolve_model(model, overrides)
    timed = repeat if repeat is not None else 3 if decode is None and nproc is None else 5
    if nproc is not None:
        from tfcalc.report.bench_dist import build_dist_bench, plan_dist_bench

        if not (seq is None or isinstance(seq, int)):
            from tfcalc.errors import InputError

            raise InputError("--nproc times one --seq at a time")
        layout = plan_dist_bench(ref, nproc, batch, seq, dtype or default_dtype(device), tp, zero, sequence_parallel)
        return build_dist_bench(ref, layout, 3 if warmup is None else warmup, timed, device)
    seqs = None if seq is None else [seq] if isinstance(seq, int) else list(seq)
    if decode is not None:
        from tfcalc.report.decode import build_decode_bench, plan_decode_bench

        plan = plan_decode_bench(ref, batch, seqs, decode, device, dtype or default_dtype(device),
                                 3 if warmup is None else warmup, timed, matmul_size, copy_bytes)
        return build_decode_bench(ref, plan)
    plan = plan_bench(ref, batch, seqs, device, dtype or default_dtype(device), warmup, timed, compile, n_layer,
                      matmul_size, min_time, rounds, weights)
    return build_bench(ref, plan)


def inspect(module: Any, *inputs: Any, loss: Any = None, **kwargs: Any) -> "InspectReport":
    """Any torch.nn.Module: its parameters (shared tensors once, buffers apart), FLOPs per module under
    FlopCounterMode (SDPA included) and the activation bytes a training step saves (saved-tensor hooks), module
    by module beside the tree, for forward(*inputs, **kwargs); loss(output) the step's loss (default: the sum of
    the floating-point outputs, which keeps nothing itself). No inputs: parameters and buffers only."""
    import tfcalc.notebook  # noqa: F401 - the report's tables in a notebook
    from tfcalc.report.inspect import build_inspect

    return build_inspect(module, inputs, loss=loss, kwargs=kwargs)


def load_model(path: str, device: str = "cpu", dtype: str = "fp32"):
    """tfcalc's own model (a torch.nn.Module) holding a checkpoint's weights: a model folder, a
    .safetensors file beside its config.json, or a Hugging Face id in the local cache. ``forward(input_ids)``
    returns logits (batch, seq, vocab); an encoder-decoder takes ``forward(src_ids, tgt_ids)``."""
    from tfcalc.errors import InputError, shown
    from tfcalc.measure.device import resolve_device, torch_dtype
    from tfcalc.model.load import load_model as load

    if not isinstance(path, (str, os.PathLike)):
        raise InputError(f"load_model: expected a path or a Hugging Face id; got {shown(path)}")
    if not isinstance(device, str):  # a torch.device: written as the command line takes it
        device = str(device) if type(device).__name__ == "device" else device
    if not isinstance(device, str):
        raise InputError(f"unknown device {shown(device)}; use cpu, cuda, cuda:N or mps")
    if not isinstance(dtype, str):
        raise InputError(f"unknown dtype {shown(dtype)}; give its name, e.g. 'fp32' or 'bf16'")
    where = resolve_device(device)  # the command line's check: 'tpu', or cuda without CUDA, in one line
    return load(path, where.name, torch_dtype(dtype))


@api_args.public
def infer(model: "ModelSpec", batch: Union[int, Sequence[int]] = 1, seq: Optional[int] = None, gen: int = 256, *,
          dtype: Optional[str] = None, kv_dtype: Optional[str] = None, group_size: Optional[int] = None,
          src_seq: Optional[int] = None, device_spec: Optional[str] = None, measure: bool = False,
          device: str = "cpu", warmup: int = 3, repeat: int = 10, copy_bytes: Optional[int] = None,
          matmul_efficiency: Optional[float] = None, bandwidth_efficiency: Optional[float] = None, tp: int = 1,
          draft: Optional[str] = None, accept_rate: Optional[float] = None, draft_tokens: Optional[int] = None,
          rate: Optional[float] = None, concurrency: Optional[int] = None, mean_input: Optional[int] = None,
          mean_output: Optional[int] = None, lengths: Optional[str] = None,
          requests: Optional[int] = None, max_time: Optional[float] = None, launch: Optional[str] = None,
          host_op_s: Optional[float] = None, prefill_chunk: Optional[int] = None,
          context_chunking: Optional[str] = None, max_batch: Union[int, str, None] = None, ep: int = 1,
          attention_dp: Optional[int] = None, redundant_experts: int = 0, ep_overlap: bool = False,
          expert_imbalance: Any = None, cached_prefix: Optional[int] = None, disaggregate: Optional[str] = None,
          ep_comm: str = "auto", adp_balance: bool = False, **overrides: Any) -> "InferReport":
    """`tfcalc infer`: serving estimates on a device's roofline (device_spec: a table key or a YAML file), or
    measure=True: ceilings measured and the model timed, the prediction beside. tp=T, ep=E (attention_dp=,
    redundant_experts=, ep_overlap=, expert_imbalance=, ep_comm='auto'|'alltoall'|'allgather', adp_balance=):
    tensor- and expert-parallel serving (per GPU); draft=,
    accept_rate=, draft_tokens: speculative decoding; rate= (or concurrency=: a closed loop of C users),
    mean_input=, mean_output=: continuous batching (lengths='fixed'|'random': how concurrency='s users send them),
    prefill_chunk= its chunk (0: prompts whole; None: 8192, 0 with measure=True; requests=, max_time=: the measured
    run's), context_chunking='on'|'off' (off: whole prompts in the step's budget, TensorRT-LLM's default),
    max_batch= the engine's cap on sequences in flight (per attention-DP group), or 'trtllm-bench' (its heuristic);
    launch="eager" (host_op_s=); cached_prefix=N: N tokens of every prompt cached already (count/serving/prefix.py);
    disaggregate="P:D": P prefill and D decode instances under rate= (count/serving/disaggregated.py)."""
    from tfcalc.report.infer import build_infer
    from tfcalc.report.infer_options import InferOptions
    from tfcalc.workload import default_dtype

    # one size, or several; anything else goes on as it is, for the one check of the CLI (report.infer)
    batches = (batch,) if isinstance(batch, int) else tuple(batch) if isinstance(batch, (list, tuple)) else batch
    options = InferOptions(batches=batches, seq=seq, gen=gen, dtype=dtype or default_dtype(device if measure else None),
                           group_size=group_size, kv_dtype=kv_dtype, src_seq=src_seq, device_spec=device_spec,
                           measure=measure, device=device, warmup=warmup, repeat=repeat, copy_bytes=copy_bytes,
                           matmul_efficiency=matmul_efficiency, bandwidth_efficiency=bandwidth_efficiency, tp=tp,
                           draft=draft, accept_rate=accept_rate, draft_tokens=draft_tokens, rate=rate,
                           concurrency=concurrency, mean_input=mean_input, mean_output=mean_output, requests=requests,
                           lengths=lengths, max_time=max_time,
                           launch=launch, host_op_s=host_op_s, prefill_chunk=prefill_chunk,
                           context_chunking=context_chunking, max_batch=max_batch, ep=ep,
                           attention_dp=attention_dp, redundant_experts=redundant_experts, ep_overlap=ep_overlap,
                           expert_imbalance=expert_imbalance, cached_prefix=cached_prefix,
                           disaggregate=disaggregate, ep_comm=ep_comm, adp_balance=adp_balance)
    return build_infer(api_args.resolve_model(model, overrides), options)


@api_args.public
def plan(model: "ModelSpec", gpus: Union[int, str, None] = None, *, tp: Optional[int] = None,
         pp: Optional[int] = None, dp: Optional[int] = None, zero: Optional[int] = None,
         recompute: Optional[str] = None, attention: str = "flash", sequence_parallel: bool = False,
         micro_batch: Optional[int] = None, dropout: bool = False, zero_engine: str = "flat",
         global_batch: Optional[int] = None, seq: Optional[int] = None, dtype: str = "bf16",
         device_spec: str = "h100-sxm", mfu: Optional[float] = None, tokens: Union[int, str, None] = None,
         top: int = 10, measure: bool = False, nproc: int = 2, matmul_efficiency: Optional[float] = None,
         bandwidth_efficiency: Optional[float] = None,
         # issue 20, sharding and precision: --ep, --compute-dtype, --no-reshard-after-forward, --hsdp,
         # --grad-dtype, --offload ("optimizer", "activations", both as a tuple or "optimizer,activations")
         ep: Optional[int] = None, ep_dispatch: str = "auto", expert_imbalance: Any = None,
         compute_dtype: Optional[str] = None,
         fp8_recipe: str = "delayed", fp8_all_gather: bool = False,
         etp: Optional[int] = None,  # --etp: count.training.experts_folded
         reshard_after_forward: bool = True,
         hsdp: Optional[int] = None, grad_dtype: Optional[str] = None, offload: Union[str, Sequence[str]] = (),
         # issue 20, pipeline and context: --schedule, --virtual-stages, --overlap, --cp
         schedule: Optional[str] = None, virtual_stages: Optional[int] = None, overlap: Sequence[str] = (),
         cp: Optional[int] = None, pp_split_counts: Union[None, str, Sequence[str]] = None,
         pp_layers: Union[None, str, Sequence[int]] = None,  # each stage's blocks: (3, 2) or "3,2"
         kernels: Optional[str] = None, power_limit: Optional[float] = None, rope: str = "complex",
         optimizer: str = "adam",  # --optimizer adam|muon (count.training.muon_plan)
         # --lora-rank, --lora-targets ('q,v' or a sequence), --base-dtype nf4 (count.training.lora_plan)
         lora_rank: Optional[int] = None, lora_targets: Union[str, Sequence[str], None] = None,
         base_dtype: Optional[str] = None,
         **overrides: Any) -> "PlanReport":
    """`tfcalc plan`: a parallel layout's memory per rank, collectives, step and training time (no tp, pp
    or dp: a search over gpus, or the fewest that fit); measure=True checks it on nproc local ranks.
    micro_batch, schedule ('1f1b', 'interleaved' with virtual_stages V, 'zero-bubble', 'dualpipe', 'dualpipev') and
    cp: None is 1, 1f1b and 1 for a layout, and left to a search; overlap: any of 'tp', 'pp' and offload: 'optimizer',
    'activations', each a sequence or a comma-separated text (tfcalc.name_lists: the flags' rule);
    pp_split_counts: any of 'embedding', 'head' counted as a block each when the blocks are divided over the
    pp × V chunks (None: none for a layout, a search's choice); kernels: 'eager' (PyTorch op by op; None: it,
    or fused for a Mamba, gated DeltaNet or lightning model), 'fused' (Megatron/Transformer Engine kernels) or
    'compile' (torch.compile per block, torchtitan's: the embedding, final norm and loss eager); rope: 'complex'
    (torchtitan's RoPE, which compile leaves to aten kernels and casts) or 'real' (rotate-half, fused);
    power_limit: watts each GPU is capped at (count.training.overlap_costs.power_capped_clock); dropout,
    zero_engine: as --dropout, --zero-engine; expert_imbalance: as --expert-imbalance (count.perf.expert_imbalance)."""
    from tfcalc.count.model import lora
    from tfcalc.count.perf.pipeline import OVERLAPS
    from tfcalc.count.training.shard import SPLIT_COUNTS
    from tfcalc.count.training.sharding import OFFLOAD
    from tfcalc.count.training.steptime import parse_count
    from tfcalc.name_lists import name_list
    from tfcalc.report.plan import PlanRequest, build_plan
    from tfcalc.report.plan_schedule import stage_counts

    request = PlanRequest(gpus=gpus, tp=tp, pp=pp, dp=dp, zero=zero, recompute=recompute, attention=attention,
                          sequence_parallel=sequence_parallel, micro_batch=micro_batch, global_batch=global_batch,
                          seq=seq, dtype=dtype, mfu=mfu, top=top, matmul_efficiency=matmul_efficiency,
                          bandwidth_efficiency=bandwidth_efficiency, dropout=dropout, zero_engine=zero_engine,
                          tokens=parse_count(tokens) if isinstance(tokens, str) else tokens,
                          ep=ep, etp=etp, ep_dispatch=ep_dispatch, expert_imbalance=expert_imbalance,
                          compute_dtype=compute_dtype, fp8_recipe=fp8_recipe,
                          fp8_all_gather=fp8_all_gather, reshard_after_forward=reshard_after_forward, hsdp=hsdp,
                          grad_dtype=grad_dtype,
                          offload=name_list("--offload", offload, OFFLOAD) if isinstance(offload, str)
                          else tuple(offload) if isinstance(offload, (list, tuple)) else offload,
                          schedule=schedule, virtual_stages=virtual_stages,
                          overlap=name_list("--overlap", overlap, OVERLAPS) if isinstance(overlap, str)
                          else tuple(overlap) if isinstance(overlap, (list, tuple)) else overlap, cp=cp,
                          pp_split_counts=name_list("--pp-split-counts", pp_split_counts, SPLIT_COUNTS)
                          if isinstance(pp_split_counts, str) else tuple(pp_split_counts)
                          if isinstance(pp_split_counts, (list, tuple)) else pp_split_counts,
                          kernels=kernels, power_limit=power_limit, pp_layers=stage_counts(pp_layers),
                          rope=rope, optimizer=optimizer, lora=lora.spec(lora_rank, lora_targets, base_dtype))
    return build_plan(api_args.resolve_model(model, overrides), request, device_spec, measure, nproc)


@api_args.public
def compare(*models: "ModelSpec", seq: Optional[int] = None, dtype: str = "bf16", **overrides: Any) -> "CompareReport":
    """`tfcalc compare`: the models side by side at one length (seq, or the shortest context among them);
    models given one by one or as a list (``compare(["gpt2", "llama2-7b"])``)."""
    from tfcalc.report.compare import build_compare

    listed = [m for given in models for m in (given if isinstance(given, (list, tuple)) else [given])]
    return build_compare([api_args.resolve_model(m, overrides) for m in listed], seq, dtype)


@api_args.public
def scan(model: "ModelSpec", seq: Union[int, Sequence[int], None] = None, batch: int = 1, *, dtype: str = "bf16",
         **overrides: Any) -> "ScanReport":
    """`tfcalc scan`: forward FLOPs and memory against sequence length (seq: the lengths; default 128, 256,
    ..., 131072, as the command), the crossovers where attention overtakes the FFN."""
    from tfcalc.report.scan import build_scan

    seqs = [128 * 2**i for i in range(11)] if seq is None else [seq] if isinstance(seq, int) else list(seq)
    return build_scan(api_args.resolve_model(model, overrides), seqs, batch, dtype)


__all__ = ["__version__", "bench", "compare", "flops", "infer", "inspect", "load_model", "memory", "params", "plan",
           "scan"]
