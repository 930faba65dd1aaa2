"""Measured memory: build the real model on a device, run it, and read the peak.

The run: build the model (tfcalc.model.build_model) in the dtype, then either one no-grad forward pass
at (batch, seq), or -- training -- one step of forward, loss (cross-entropy on the logits upcast to
fp32), backward and optimizer step in the steady state: the optimizer state exists (Adam creates it in
its first step, which here runs on zero gradients, without a forward pass: ``_prime``) and the gradients
are kept between steps (zero_grad(set_to_none=False), as DDP and Megatron keep their gradient buffers),
which is what the estimate "weights + gradients + optimizer state + activations" describes. Optimizers
run with foreach=False: the foreach kernels add a parameter-sized temporary in the step that no estimate
counts. "adam-mixed" below fp32 is Adam on fp32 master copies, stepped one tensor at a time (so the fp32
copy of a gradient exists for one tensor only). "muon" is torch.optim.Muon on the blocks' matrices and AdamW on
the rest, on fp32 masters below fp32 (tfcalc.measure.muon_step).

The peak, from the device's own counters, above a baseline taken after a warm-up run and before the
model is built (so it counts the weights, everything the run allocates, and nothing of torch itself):

- CUDA: the caching allocator's counters -- torch.cuda.reset_peak_memory_stats(), then after the run
  (synchronized) torch.cuda.max_memory_allocated() minus memory_allocated() at the start. Bytes held by
  live tensors; the allocator's cached-but-free blocks and the CUDA context are not counted.
- CPU: PyTorch keeps no counters for CPU memory, so we read the operating system's: the peak resident
  set size (VmHWM in /proc/self/status, reset through /proc/self/clear_refs) of a child process that
  does nothing else, minus its resident size at the baseline. Why a child process: the peak of the
  process is monotone, and the test runner's or the CLI's own memory must not be in it. Why this is
  close to the tensor bytes: the child runs with MALLOC_MMAP_THRESHOLD_=65536, so glibc serves every
  tensor of 64 KiB or more with its own mmap and returns it to the system when freed (without it, glibc
  raises the threshold after the first free and keeps freed tensors in its heap, so the RSS peak would
  stay high after tensors die); the warm-up run on a copy with one layer of each kind (_warmup_config) and a small
  vocabulary, before the baseline, faults in the kernels' code pages and starts the thread pool. What
  remains: small tensors and allocator bookkeeping in the heap, kernel scratch space (oneDNN/MKL), page
  rounding, and the fresh gradient of a tensor before it is added into .grad (for a tied embedding,
  V·h held through the backward pass): small beside activations, but 10-20% of the peak for a
  two-layer GPT-2, whose embedding is most of its weights. Where /proc is absent, resource.getrusage's ru_maxrss serves,
  without the reset.

Beside the peak, the training run reports the bytes autograd actually saved for the backward pass
(saved_tensors_hooks on the measured step: every floating-point tensor packed for backward, each storage
once, parameters and buffers excluded): the exact check of tfcalc.count.model.memory.activations.

Time: the child reports each step as it begins (tfcalc.measure.child), for a progress display. Where
the dtype's matmuls are slow on a CPU (a timed probe, tfcalc.measure.stand_in), the run says so and
stands in for the matmul results: the same tensors, without the slow arithmetic.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.architecture import Architecture
from tfcalc.config import ConfigError, ModelConfig, from_mapping, replace
from tfcalc.measure.device import resolve_device, torch_dtype
from tfcalc.measure.peak_meter import peak_meter
from tfcalc.workload import Workload

WARMUP_SEQ = 16


@dataclass(frozen=True)
class MeasuredPeak:
    peak_bytes: int  # above the baseline: weights and everything the run allocated
    saved_activation_bytes: Optional[int]  # training only: what autograd kept for backward
    method: str  # how the peak was read
    device: str
    stand_in: bool = False  # matmuls stood in for (a dtype slow on this CPU; tfcalc.measure.stand_in)


def forward_loss(model, idx, count_saved: bool = False, src_idx=None, memory=None):
    """(loss, bytes autograd saved for backward or None): cross-entropy of the logits, upcast to fp32.
    An encoder-decoder reads src_idx and predicts idx; a stack with cross_attention reads memory (the
    states it attends to). A model without an LM head (BertModel) has no logits: the loss is the sum of
    its outputs (hidden states, and the pooled token), upcast to fp32.

    Counting: a saved_tensors_hooks pack hook records every floating-point tensor packed for backward,
    each storage once, parameters and buffers (and 0-d tensors: the loss's weight total) left out."""
    import torch
    import torch.nn.functional as F

    exclude = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        if count_saved and t.is_floating_point() and t.dim() > 0:
            storage = t.untyped_storage()
            if storage.data_ptr() not in exclude:
                seen[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = model(idx, memory=memory) if src_idx is None else model(src_idx, idx)
        if model.lm_head is None:
            loss = sum(o.float().sum() for o in (output if isinstance(output, tuple) else (output,)))
        else:
            logits = output[0] if isinstance(output, tuple) else output
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), idx.view(-1))
    return loss, (sum(seen.values()) if count_saved else None)


class _MasterAdam:
    """Mixed-precision Adam: fp32 master weights and moments for low-precision parameters, stepped one
    tensor at a time."""

    def __init__(self, params):
        import torch

        self.pairs = [(p, p.detach().float().requires_grad_()) for p in params]
        self.opts = [torch.optim.Adam([m], foreach=False) for _, m in self.pairs]

    def step(self) -> None:
        import torch

        for (p, master), opt in zip(self.pairs, self.opts, strict=True):
            master.grad = p.grad.float()
            opt.step()
            master.grad = None
            with torch.no_grad():
                p.copy_(master)

    def zero_grad(self, set_to_none: bool = False) -> None:
        for p, _ in self.pairs:
            p.grad = None if set_to_none else p.grad.zero_()


def make_optimizer(model, optimizer: str, dtype: str):
    import torch

    params = list(model.parameters())
    if optimizer == "sgd":
        return torch.optim.SGD(params, lr=1e-3, foreach=False)
    if optimizer == "muon":  # Muon on the hidden matrices, AdamW on the rest (tfcalc.measure.muon_step)
        from tfcalc.measure.muon_step import MasterMuon

        return MasterMuon(model)
    if optimizer == "adam-mixed" and dtype in ("bf16", "fp16"):
        return _MasterAdam(params)
    return torch.optim.Adam(params, foreach=False)


def run_steps(training: bool) -> tuple[str, ...]:
    """The steps of a measured run, in order, as the child process reports them (a progress display)."""
    run = ("first step: gradients and optimizer state", "forward", "backward", "optimizer step") if training \
        else ("forward",)
    return ("import torch", "warm-up (one block of each kind, 16 tokens)", "build the model") + run


def _prime(model, opt) -> None:
    """The state a training step meets in the steady state, without a training step: every gradient
    buffer (kept between steps, as zero_grad(set_to_none=False), DDP and Megatron keep them) and the
    optimizer's state (Adam makes its moments in its first step: here, one step on zero gradients, which
    moves no weight). The measured step is then the second step of the old two-step run, whose first
    forward and backward passes were spent only on making this state."""
    import torch

    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    opt.step()
    opt.zero_grad(set_to_none=False)


def run_model(cfg: ModelConfig, workload: Workload, device: str, training: bool, optimizer: str,
              step=lambda name: None, arch: Optional[Architecture] = None) -> Optional[int]:
    """Build the model on device and run the workload (see the module docstring). Returns the bytes
    autograd saved in the measured training step, or None for a forward pass. An encoder-decoder reads
    src_seq source tokens (default: seq). step(name) is called as each of run_steps()' steps after the
    build begins. ``arch``: the description to build (a smaller copy of cfg's), default cfg's own."""
    import torch

    from tfcalc.model import build_model

    w = workload.for_model(cfg)
    batch, seq, dtype = w.batch, w.seq, w.dtype
    model = build_model(cfg, device, torch_dtype(dtype), arch=arch)
    idx = torch.randint(0, cfg.vocab_size, (batch, seq), device=device)
    src_idx = memory = None
    sources = w.src_seq
    if cfg.arch == "encoder-decoder":
        src_idx = torch.randint(0, cfg.vocab_size, (batch, sources), device=device)
    elif cfg.cross_attention:  # the states of some encoder, of the model's width
        memory = torch.randn(batch, sources, cfg.d_model, device=device, dtype=torch_dtype(dtype))
    if not training:
        step("forward")
        with torch.no_grad():  # the output dies at once, after the peak
            model(idx, memory=memory) if src_idx is None else model(src_idx, idx)
        return None
    model.train()
    step("first step: gradients and optimizer state")
    opt = make_optimizer(model, optimizer, dtype)
    _prime(model, opt)
    step("forward")
    loss, saved = forward_loss(model, idx, count_saved=True, src_idx=src_idx, memory=memory)
    step("backward")
    loss.backward()
    del loss
    step("optimizer step")
    opt.step()
    opt.zero_grad(set_to_none=False)
    return saved


def _warmup_config(cfg: ModelConfig) -> tuple[ModelConfig, Architecture]:
    """(cfg with a small vocabulary, of the same residue mod 16 so the LM head takes the same path, and a
    short position table; the description to build: its own with each kind of block once,
    Architecture.one_of_each -- DeepSeek-V3's dense and MoE layers, Llama 4's chunked and NoPE layers). It
    runs every kernel the measured run runs, in a fraction of the time (GPT-2's vocabulary is most of a
    two-block model's work). The copy is made on the description, so no depth field of the user's is ever
    refused for it."""
    small = replace(cfg, vocab_size=min(cfg.vocab_size, 64 + cfg.vocab_size % 16),
                    max_seq_len=min(cfg.max_seq_len, WARMUP_SEQ))
    return small, small.architecture.one_of_each()


def measure_in_process(request: dict[str, Any], emit=lambda kind, text: None) -> dict[str, Any]:
    """Warm up, take the baseline, run, read the peak: the body of the child process. emit("step", name)
    as each step begins; emit("note", line) for what the user should read before the run."""
    import contextlib

    import torch

    from tfcalc.measure.speedups import no_dynamo_import
    from tfcalc.measure.stand_in import MatmulStandIn, probe

    cfg = from_mapping(request["config"])
    device = resolve_device(request["device"])
    workload = Workload(**request["workload"])
    if request.get("require_bytes") is not None:  # the fit check on a GPU, read here (see measure_peak)
        from tfcalc.measure.device import free_memory
        from tfcalc.measure.fit import tightest_limit

        limit = tightest_limit(device.kind, free_memory(device), device.name)
        if limit is not None and request["require_bytes"] > limit.bytes:
            return {"refused": {"limit_bytes": limit.bytes, "limit": limit.what}}
    args = dict(device=device.name, training=request["training"], optimizer=request["optimizer"])
    speed = probe(workload.dtype, device.kind)
    if speed is not None and speed.slow:
        emit("note", speed.note())
    stand_in = MatmulStandIn() if speed is not None and speed.slow else contextlib.nullcontext()
    torch.manual_seed(0)
    with no_dynamo_import(), stand_in:  # Adam's add_param_group would import torch._dynamo (tfcalc.measure.speedups)
        emit("step", "warm-up (one block of each kind, 16 tokens)")
        warm = min(workload.seq, WARMUP_SEQ)
        source = None if workload.src_seq is None else min(workload.src_seq, WARMUP_SEQ)
        small, arch = _warmup_config(cfg)
        run_model(small, dataclasses.replace(workload, batch=1, seq=warm, src_seq=source), **args, arch=arch)
        emit("step", "build the model")
        meter = peak_meter(device)
        meter.start()
        saved = run_model(cfg, workload, **args, step=lambda name: emit("step", name))
        peak = meter.peak()
    stood_in = isinstance(stand_in, MatmulStandIn)
    method = meter.method + (f"; {workload.dtype} matmuls stood in for (slow on this CPU): values not computed, "
                             "shapes and dtypes those of the real kernels" if stood_in else "")
    return {"peak_bytes": peak, "saved_activation_bytes": saved, "method": method, "device": device.description,
            "stand_in": stood_in}


def _child_main() -> None:
    """Entry point of the child process: imports torch at once (while the parent still checks the
    request, see start_child), then a JSON request on stdin; JSON lines on stdout: {"step": ...} and
    {"note": ...} as the run goes, the answer last."""
    from tfcalc.measure.lifeline import die_with_parent

    die_with_parent()  # first: the parent may already be gone
    import torch  # noqa: F401  (the slow part of starting, done before the request arrives)

    from tfcalc.measure.child import emitter

    emit = emitter(sys.stdout)
    request = json.loads(sys.stdin.read())
    try:
        answer = measure_in_process(request, emit)
    except ConfigError as e:
        answer = {"error": str(e)}
    except (MemoryError, RuntimeError) as e:  # torch's out-of-memory errors are RuntimeErrors
        answer = {"error": f"the measurement failed: {' '.join(str(e).split())[:300]}"}
    emit("answer", answer)  # written and flushed: the parent has all it needs
    os._exit(0)  # no interpreter teardown (long after importing torch; see tfcalc.cli.app._exit)


def start_child():
    """Start the measuring process now, so that its slowest part (importing torch) overlaps the parent's
    checks; measure_peak(..., child=) then hands it the request."""
    from tfcalc.measure.child import spawn

    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONWARNINGS="ignore",
               TFCALC_PARENT_PID=str(os.getpid()))
    return spawn("from tfcalc.measure.memory import _child_main; _child_main()", env)


def measure_peak(cfg: ModelConfig, workload: Workload, device: str = "cpu", training: bool = False,
                 optimizer: str = "adam-mixed", timeout: float = 3600, child=None, on_step=lambda name: None,
                 on_note=lambda line: None, require_bytes: Optional[int] = None, on_refused=None) -> MeasuredPeak:
    """Run the model in a fresh child process (or child, from start_child) and return its measured peak
    (see the module docstring). on_step(name) as each of run_steps(training) begins; on_note(line) for
    a line the user should read (a slow dtype, what the run does about it).

    require_bytes: the child refuses, before building anything, a run needing more than the tightest limit
    it reads on the device (tfcalc.measure.fit.tightest_limit), and on_refused(Limit) raises the refusal
    here. On CUDA the parent asks the child rather than the driver: reading the GPU's free memory starts a
    CUDA context (hundreds of MB of the GPU) in the process that asks, and the parent must hold none while
    the child measures."""
    from tfcalc.measure.child import converse

    w = workload.for_model(cfg)
    request = dict(config=dataclasses.asdict(cfg), workload=dataclasses.asdict(w), device=device,
                   training=training, optimizer=optimizer, require_bytes=require_bytes)
    answer = converse(child or start_child(), request, {"step": on_step, "note": on_note}, timeout)
    if "error" in answer:
        raise ConfigError(answer["error"])
    if "refused" in answer:
        from tfcalc.measure.fit import Limit

        limit = Limit(answer["refused"]["limit_bytes"], answer["refused"]["limit"])
        if on_refused is not None:
            on_refused(limit)
        raise ConfigError(f"not running: the {limit.what} is {limit.bytes:,} bytes")
    return MeasuredPeak(answer["peak_bytes"], answer["saved_activation_bytes"], answer["method"], answer["device"],
                        answer.get("stand_in", False))
