"""Per-device properties of the performance model (tfcalc.count.perf), beside the datasheet figures of
tfcalc.devices. Each default names its source; a user overrides any of them with
``dataclasses.replace(perf, field=value)`` or, from the command line, --matmul-efficiency (a flat
fraction of the peak for every matmul, in place of the shape model) and --bandwidth-efficiency.

Fields and their sources:

- ``sm_count``: streaming multiprocessors (AMD: compute units), the number of tiles that run at once in
  one wave. NVIDIA architecture whitepapers: A100 108 SMs ("NVIDIA A100 Tensor Core GPU Architecture",
  2020, sec. "A100 SM"); H100 SXM5 132 and H100 PCIe 114 ("NVIDIA H100 Tensor Core GPU Architecture",
  2022, Table 2); H200 and H100 NVL the H100 SXM5 die (132); V100 80 (Volta whitepaper, 2017); T4 40
  (Turing whitepaper, 2018); RTX 4090 128, L40S 142 and L4 58 (Ada Lovelace whitepaper, 2022, Appendix
  A); MI300X 304 CUs (AMD CDNA 3 whitepaper, 2023). A10G 80 and B200 148 (2 dies) are the counts CUDA
  is commonly reported to give; not checked against a whitepaper here.
- ``matmul_ceiling``: the fraction of the datasheet peak that the best-shaped large bf16 GEMM reaches.
  Stas Bekman, "Machine Learning Engineering", compute/accelerator/README.md, "Maximum Achievable Matmul
  FLOPS comparison table" (measured with mamf-finder.py): A100 SXM 267.9 of 312 TFLOP/s (0.859), A100
  PCIe 0.822, H100 SXM 792.1 of 989 (0.801), GH200 0.830 (taken for H200), MI300X 781.9 of 1300 (0.601).
  Devices without a measurement take 0.80, the H100's, and say so.
- ``fp8_ceiling``: the same for an FP8 GEMM against the dense FP8 peak, from the same table's FP8
  (float8_e4m3fn) rows: H100 SXM 1402.6 of 1979 (0.709), H200 SXM 1453.4 (0.734), B200 3432.5 of 4500
  (0.763); other FP8 devices take the H100 SXM's 0.709 and say so (tfcalc.count.perf.fp8_time).
- ``sustained_clock``: the share of the datasheet's clock a GPU holds through hours of compute-bound
  training on every GPU of a node at its power limit. A100: 1305 of 1410 MHz (0.926), the clock NVIDIA
  uses for the A100's Rpeak in HPL runs, "the clock that can be sustained at a GPU's power limit" (Glenn
  Lockwood, "Peak FLOPS", glennklockwood.com/garden/peak-FLOPS). H100 SXM's datasheet rate is already
  counted at 1.83 GHz, below its 1.98 GHz boost (the same page: 528 tensor cores × 1,024 FLOPs × 1.83
  GHz = 989 TFLOP/s): 1.0. Applied to training steps, not to the short kernels of serving.
- ``static_power_w``: the watts of a busy GPU that do not follow its SM clock (leakage, the HBM stacks at
  their own clock, the board), which --power-limit takes off the limit before the SMs' dynamic power scales
  the clock (tfcalc.count.training.overlap_costs.power_capped_clock): the board's draw at idle, in P0 with the
  memory clocked at full rate, from captured ``nvidia-smi`` logs (thamada/nvidia-smi): H100 80GB HBM3 (SXM)
  85 W, the mean of eight idle GPUs, 75-100 W (nvsim/H100SXMx8_smi.py; on GPU 0, 69.6 of its 100.9 W are the
  HBM's, "GPU Memory Power Readings"); A100-SXM4-80GB 59 W, the mean of four, 58-60 W
  (gls/A100SXMx4_smi.py). A lower bound: leakage grows with the temperature under load. Other devices: 0
  (none captured), the cube-root law alone.
- ``gpu_variation``: how far apart GPUs of one SKU run, as Sinha et al. measure it (SC22, arXiv 2208.11035v3:
  the span of a box plot's whiskers over the GPUs of a cluster, 4 IQR, over the median): 0.08, their "8% (max
  22%) average performance variation" over V100 and MI50/MI60 clusters, for every device (none measured on
  others). A synchronous step waits for the slowest of its GPUs (tfcalc.count.perf.slowest_rank); 0 leaves it out.
- ``bandwidth_efficiency``: the fraction of the datasheet memory bandwidth a streaming kernel reaches.
  0.85 by default: a device-to-device copy of 4 GiB on an H100 NVL measures 3.568 of 3.938 TB/s (0.906)
  and read-read-write 0.914 (a public measurement quoted with mamf-finder's); kernels that stream
  matrices with a compute tail (GEMV) stay below a pure copy, hence 0.85, not 0.9.
- ``kernel_s``: the fixed cost of one kernel on the GPU (launch, ramp-up, tail, the wait between
  dependent kernels), 4 µs: the launch-latency class the CUDA C++ Best Practices Guide describes
  ("a few microseconds" per launch); CUDA graphs and torch.compile (gpt-fast, TensorRT-LLM) remove the
  CPU side but not the GPU's ramp and drain between dependent kernels. Measured on the H100 SXM (``KERNEL_S``):
  2.67 µs, from tfcalc's own runtime captured in CUDA graphs (benchmarks/results/h100-2026-11-27-report.json,
  `infer --measure`, Llama-2-7B bf16, prompt 512, 64 new tokens; RoPE, RMSNorm and SwiGLU fused, the residual
  folded into the GEMMs, one K/V write: 439 kernels a step, h100-2026-11-27-decode-profile.json): at batch 1 a
  step took 6.040 ms where the rows and the elementwise traffic are 4.837 ms, over the 450 kernels the model
  counts: (6.040 − 4.837) / 450 = 2.67 µs. Batch 16, not fitted, checks it: 6.393 ms + 450 × 2.67 µs = 7.594
  ms against 7.586 measured. 4 µs had matched the runtime before the fusions (6.6-6.9 ms a step, 535-695
  kernels: h100-2026-11-26-decode-profile.json, h100-2026-11-27-decode-profile-unfused.json).
- ``request_s``: serving only, the fixed work of one request around the GPU's kernels, paid once, in the
  time to first token: what a first-token latency measures beside the prefill's kernels. TensorRT-LLM's
  "1st Token Latency" (docs/source/performance.md, "Reproducing First Token Latency") is the wall time of
  one ``gptSessionBenchmark`` generate() call with a single output token: the input's upload, the
  engine's enqueue, the decoder's setup and the sampling of the first token from the logits (softmax,
  top-k, the random state), the output's download and the host synchronizations between them. 2 ms: the
  class of a C++ runtime's per-call host work (a dozen synchronizing copies and launches of tens to
  hundreds of µs each); the gap between the prefill's kernels and TensorRT-LLM's small-prompt latencies is
  of that size on A100, H100 and L40S alike (1-2.5 ms at 128 tokens in, benchmarks/calibration.py). The
  value was chosen with the H100 and L40S rows in view: they check its size across GPUs, they are not a
  blind test of it. Python runtimes (vLLM, transformers) pay more; override it for them.
- ``host_op_s`` and ``launch``: the host's time per kernel of an eager step, paid only when ``launch`` is
  "eager" (tfcalc.count.perf.inference, step 6). 31 µs per kernel the model counts, fitted on tfcalc's H100 run
  (benchmarks/results/h100-2026-11-26-*.json, ../shared/gpu-h100-2026-11.md; torch 2.11, Python 3, the
  node's own CPU): Llama-2-7B bf16 batch 1, a decode step 14.0-17.4 ms eager and 6.8 ms captured in a CUDA
  graph, the same 693 kernels (6.58 ms of kernel time): the eager step is the host's, 14.0 ms (the fastest)
  over the 450 kernels tfcalc counts in that step (20.2 µs per real launch: Python, the nn.Module calls, the
  dispatcher, the caching allocator, cudaLaunchKernel). A CPU's share of it is measured by
  tests/count/test_host_term.py (tfcalc's own eager step on the CPU, no launches: about 10 µs a counted
  kernel on the 2-core test machine, between a bare dispatched op's 0.9 µs and this constant). ``launch``
  "graph" (the default: tfcalc's runtime captures its decode steps on CUDA, tfcalc.model.generate; vLLM,
  SGLang and TensorRT-LLM replay CUDA graphs or run a C++ runtime) charges no host term; "eager" charges it.
- ``flash_efficiency``: the fraction of the peak fused attention reaches, forward and backward, the
  backward in tfcalc's convention (2 × the forward's FLOPs, tfcalc.count.training.micro_batch_time).
  FlashAttention-2 (Dao 2023, abstract and Fig. 5-6): 50-73 % of peak forward on A100, less backward;
  we take 0.6 forward and 0.45 backward. On Hopper, by kernel (``attention_kernel``, HOPPER_ATTENTION):
  Shah et al. 2024, "FlashAttention-3" (arXiv 2407.08608), Fig. 5 (forward, causal mask, head dim 128,
  H100 80GB SXM5, 8K tokens) and Fig. 6 (backward, head dim 128, 8K): FlashAttention-2 333 and 318 TFLOP/s,
  cuDNN 529 and 518, FlashAttention-3 602 and 559. FlashAttention's benchmark
  (benchmarks/benchmark_flash_attention.py, ``flops``) counts a backward as 2.5 × the forward's FLOPs (it
  recomputes Q·Kᵀ and the softmax: five T × T products to the forward's two); tfcalc charges 2 ×, so a
  published backward rate is taken × 2/2.5: FlashAttention-2 0.337 and 0.257 of the 989 TFLOP/s peak.
  Without the mask (Fig. 5's other panel, head dim 128, 8K) the forward runs faster -- FlashAttention-2 370,
  cuDNN 600, FlashAttention-3 646 TFLOP/s -- and context parallelism's ring runs its later steps so: each
  block after the first is a whole (unmasked) rectangle (torch's _templated_ring_attention: the first step
  causal on the rank's two chunks, the later ones on half of them, is_causal False), so a ring of C steps
  runs 1/C of its forward at the causal rate and the rest at ``flash_unmasked_forward``
  (tfcalc.count.training.micro_batch_time). FlashAttention-2 is the default on Hopper: PyTorch's SDPA runs its
  in-tree FlashAttention-2 (the cuDNN backend is opt-in since torch 2.5.1), and torch's ring attention (context
  parallelism) calls the flash or the memory-efficient kernel only. Choose another with
  ``perf: {attention_kernel: cudnn}`` (or fa3) in a device file, or state ``flash_efficiency`` itself.
- ``dequant_ops_per_weight``: CUDA-core instructions per dequantized weight in a weight-only kernel (see
  tfcalc.count.perf.elementwise): int8 2 (convert to float, multiply by the scale), int4 3 (unpack:
  one shift-and-mask LOP3, convert, one FMA applying zero point and scale); fp8 1 (a convert).
- ``comm_sms``: the SMs a NCCL collective's kernel holds while it overlaps compute, one CTA per channel:
  24, the all-gather beside a GEMM on an H100 profiled in "Compute-Communication Overlap Causes Severe
  GEMM Performance Degradation because of Tail Effect" (NVIDIA developer forums, 2025, Nsight Systems:
  the GEMM's 132 tiles no longer fit one wave, its time nearly doubled). NCCL sizes its channels by
  topology (NCCL_MIN_CTAS / NCCL_MAX_CTAS bound them); other GPUs take the same 24, assumed.
  ``ep_comm_sms``: the SMs DeepEP's dispatch and combine kernels hold while --overlap ep runs them beside
  compute: 20, DeepSeek-V3 (arXiv 2412.19437) sec. 3.2.2, "only 20 SMs are sufficient to fully utilize the
  bandwidths of IB and NVLink" (deep_ep.Buffer.num_sms = 20); an alltoall dispatcher's NCCL kernel holds
  ``comm_sms``.
- links (``link_latency_s`` per ring step and ``link_efficiency`` of the bus bandwidth), per link kind:
  NVLink 2 µs and 0.80, InfiniBand/RoCE 6 µs and 0.90, PCIe 4 µs and 0.80. Estimates of the usual
  class, not one measurement: nccl-tests all_reduce_perf on 8 NVLink GPUs reaches a bus bandwidth of
  about 80 % of the per-GPU link rate (A100: ~230-240 of 300 GB/s); InfiniBand NICs run near line rate;
  small messages take a few µs per hop (NCCL's LL protocol, Jeaugey, "NCCL 2.0", GTC 2017). The
  calibration set barely tests them (its TP groups sit in one node, its DP traffic hides).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:
    from tfcalc.devices import DeviceSpec

GENERIC = "no public measurement for this device: the H100's figure, assumed"


@dataclass(frozen=True)
class PerfSpec:
    """What the performance model reads from a device, beyond the datasheet (see the module docstring)."""

    sm_count: int = 108
    matmul_ceiling: float = 0.80
    fp8_ceiling: float = 0.709  # FP8 GEMMs against the FP8 peak (module docstring)
    sustained_clock: float = 1.0
    static_power_w: float = 0.0  # W that do not scale with the clock, for --power-limit (docstring)
    gpu_variation: float = 0.08  # same-SKU GPUs' speed spread, 4 IQR / median (docstring; count.perf.slowest_rank)
    bandwidth_efficiency: float = 0.85
    kernel_s: float = 4e-6
    flash_efficiency: tuple[float, float] = (0.6, 0.45)  # forward, backward
    dequant_ops_per_weight: dict[str, float] = field(default_factory=lambda: {"int8": 2.0, "int4": 3.0, "fp8": 1.0})
    link_latency_s: dict[str, float] = field(default_factory=lambda: {"nvlink": 2e-6, "network": 6e-6, "pcie": 4e-6})
    link_efficiency: dict[str, float] = field(default_factory=lambda: {"nvlink": 0.80, "network": 0.90,
                                                                        "pcie": 0.80})
    matmul_efficiency: Optional[float] = None  # a flat fraction of the peak for every matmul (--matmul-efficiency)
    source: str = ""
    request_s: float = 2e-3  # serving: the runtime's fixed work per request around the kernels (docstring)
    comm_sms: int = 24  # SMs an overlapped NCCL collective's kernel holds (docstring; count.training.steptime, 5)
    ep_comm_sms: int = 20  # SMs DeepEP's all-to-all kernels hold under --overlap ep (count.training.experts_parallel)
    host_op_s: float = 31e-6  # the host's time per counted kernel of an eager step (docstring; perf.inference, 6)
    launch: str = "graph"  # "graph": steps captured (no host term); "eager": every kernel launched from Python
    attention_kernel: str = "fa2"  # the fused attention kernel flash_efficiency is of (ATTENTION_KERNEL_NAMES)
    flash_unmasked_forward: Optional[float] = None  # its forward without the causal mask; None: flash_efficiency[0]
    # where each per-device constant (tfcalc.device_constants.PERF_FIELDS) came from: file, table device, default
    constants_from: tuple[tuple[str, str], ...] = ()

    def __hash__(self) -> int:  # the dict fields are read-only by convention; hash what identifies a spec
        return hash((self.sm_count, self.matmul_ceiling, self.fp8_ceiling, self.sustained_clock,
                     self.bandwidth_efficiency, self.kernel_s, self.flash_efficiency, self.matmul_efficiency,
                     self.request_s, self.comm_sms, self.host_op_s, self.launch, self.ep_comm_sms,
                     self.attention_kernel, self.flash_unmasked_forward, self.static_power_w, self.gpu_variation))


A100_SUSTAINED = 1305 / 1410  # see sustained_clock in the module docstring
H100_BF16 = 989e12
BACKWARD_COUNT = 2 / 2.5  # FlashAttention's benchmark counts a backward as 2.5 forwards, tfcalc 2 (docstring)
# attention kernel -> (forward, backward) on Hopper, Shah et al. 2024 Fig. 5 (causal, d_head 128, 8K) and Fig. 6
HOPPER_ATTENTION: dict[str, tuple[float, float]] = {
    "fa2": (333e12 / H100_BF16, 318e12 * BACKWARD_COUNT / H100_BF16),
    "cudnn": (529e12 / H100_BF16, 518e12 * BACKWARD_COUNT / H100_BF16),
    "fa3": (602e12 / H100_BF16, 559e12 * BACKWARD_COUNT / H100_BF16),
}
# ... their forward without the causal mask (Fig. 5, d_head 128, 8K): a ring's later steps (docstring)
HOPPER_UNMASKED_FORWARD = {"fa2": 370e12 / H100_BF16, "cudnn": 600e12 / H100_BF16, "fa3": 646e12 / H100_BF16}
ATTENTION_KERNEL_NAMES = {"fa2": "FlashAttention-2", "cudnn": "cuDNN", "fa3": "FlashAttention-3"}
_HOPPER_FLASH = HOPPER_ATTENTION["fa2"]  # PyTorch SDPA's flash backend on H100 (docstring)
HOPPER_KEYS = ("h100", "h200")  # the table devices whose attention kernels HOPPER_ATTENTION measures

# key -> (sm_count, matmul_ceiling, flash_efficiency, source of the ceiling)
_TABLE: dict[str, tuple[int, float, tuple[float, float], str]] = {
    "a100-80gb": (108, 0.859, (0.6, 0.45), "MAMF A100 SXM 267.9/312"),
    "a100-40gb": (108, 0.859, (0.6, 0.45), "MAMF A100 SXM 267.9/312"),
    "a100-pcie": (108, 0.822, (0.6, 0.45), "MAMF A100 PCIe 256.4/312"),
    "h100-sxm": (132, 0.801, _HOPPER_FLASH, "MAMF H100 SXM 792.1/989"),
    "h100-pcie": (114, 0.801, _HOPPER_FLASH, "MAMF H100 SXM 792.1/989 (the SXM's, assumed)"),
    "h100-nvl": (132, 0.801, _HOPPER_FLASH, "MAMF H100 SXM 792.1/989 (the SXM's, assumed)"),
    "h200": (132, 0.830, _HOPPER_FLASH, "MAMF GH200 821.0/989"),
    "b200": (148, 0.80, _HOPPER_FLASH, GENERIC),
    "mi300x": (304, 0.601, _HOPPER_FLASH, "MAMF MI300X 781.9/1300"),
    "l40s": (142, 0.80, (0.6, 0.45), GENERIC),
    "l4": (58, 0.80, (0.6, 0.45), GENERIC),
    "a10g": (80, 0.80, (0.6, 0.45), GENERIC),
    "rtx-4090": (128, 0.80, (0.6, 0.45), GENERIC),
    "v100": (80, 0.80, (0.6, 0.45), GENERIC),
    "t4": (40, 0.80, (0.6, 0.45), GENERIC),
}


# key -> FP8 ceiling where the MAMF table measured one (the module docstring's fp8_ceiling)
_FP8_CEILING = {"h100-sxm": 0.709, "h200": 0.734, "b200": 0.763}
_FP8_SOURCE = {"h100-sxm": "MAMF FP8 H100 SXM 1402.6/1979", "h200": "MAMF FP8 H200 SXM 1453.4/1979",
               "b200": "MAMF FP8 B200 3432.5/4500"}


def fp8_ceiling_note(device_key: str, perf: Optional[PerfSpec] = None) -> str:
    """The FP8 ceiling of a device and its source, for the plan's notes (``perf``: a device file's, device_perf)."""
    if perf is not None and perf.constants_from:
        where = dict(perf.constants_from)["fp8_ceiling"]
        if where == "the device file" or where.startswith("default"):
            return f"{perf.fp8_ceiling:.3f} of the FP8 peak, {where}"
        device_key = where.split(",")[0].split(" ")[0]
    if device_key in _FP8_CEILING:
        return f"{_FP8_CEILING[device_key]:.3f} of the FP8 peak, {_FP8_SOURCE[device_key]}"
    return f"{PerfSpec.fp8_ceiling:.3f} of the FP8 peak, the H100 SXM's (MAMF FP8 1402.6/1979), assumed"


# key -> static_power_w where it was measured (the module docstring); else 0
STATIC_POWER_W = {"h100-sxm": 85.0, "a100-80gb": 59.0}


# key -> kernel_s where it was measured (the module docstring's kernel_s); else PerfSpec.kernel_s, 4 µs
KERNEL_S = {"h100-sxm": 2.67e-6}


def perf_spec(device_key: str, matmul_efficiency: Optional[float] = None,
              bandwidth_efficiency: Optional[float] = None) -> PerfSpec:
    """The model's properties of a table device (a user's own device: the generic defaults, H100-like)."""
    sms, ceiling, flash, source = _TABLE.get(device_key, (108, 0.80, (0.6, 0.45), GENERIC))
    unmasked = HOPPER_UNMASKED_FORWARD["fa2"] if flash == _HOPPER_FLASH else None
    spec = PerfSpec(sm_count=sms, matmul_ceiling=ceiling, flash_efficiency=flash, source=source,
                    flash_unmasked_forward=unmasked,
                    fp8_ceiling=_FP8_CEILING.get(device_key, PerfSpec.fp8_ceiling),
                    kernel_s=KERNEL_S.get(device_key, PerfSpec.kernel_s), matmul_efficiency=matmul_efficiency,
                    sustained_clock=A100_SUSTAINED if device_key.startswith("a100") else 1.0,
                    static_power_w=STATIC_POWER_W.get(device_key, 0.0))
    if bandwidth_efficiency is not None:
        spec = PerfSpec(**{**spec.__dict__, "bandwidth_efficiency": bandwidth_efficiency})
    return spec


# What a device file that neither states nor inherits a constant gets, named as the output names it (issue 31).
DEFAULT_FROM = {"sm_count": "default, the A100's", "matmul_ceiling": "default, the H100 SXM's",
                "fp8_ceiling": "default, the H100 SXM's", "sustained_clock": "default, no clock derating",
                "flash_efficiency": "default, the A100's", "kernel_s": "default, 4 µs",
                "static_power_w": "default, none", "gpu_variation": "default, Sinha et al. 2022's 8 %"}


def device_perf(spec: DeviceSpec, matmul_efficiency: Optional[float] = None,
                bandwidth_efficiency: Optional[float] = None) -> PerfSpec:
    """The model's properties of a device: a table device's own; a user's file (tfcalc.devices.load_spec): what
    it states under ``perf:``, the rest from the device it inherits (``inherits:`` or a table ``key:``), else
    DEFAULT_FROM's; ``constants_from`` says which, field by field."""
    from tfcalc.device_constants import PERF_FIELDS
    from tfcalc.devices import perf_basis

    basis = perf_basis(spec)
    perf = perf_spec(basis or "", matmul_efficiency, bandwidth_efficiency)
    stated = dict(spec.perf)
    if "attention_kernel" in stated:  # a kernel by name: its Hopper measurement (HOPPER_ATTENTION)
        if not (basis or "").startswith(HOPPER_KEYS):
            from tfcalc.errors import InputError

            raise InputError(f"{spec.source}: perf.attention_kernel takes the kernels' H100 measurements; this file "
                             f"inherits {basis or 'no table device'}: name a Hopper device (inherits: h100-sxm) or "
                             "state flash_efficiency")
        stated["flash_efficiency"] = HOPPER_ATTENTION[stated["attention_kernel"]]
        stated["flash_unmasked_forward"] = HOPPER_UNMASKED_FORWARD[stated["attention_kernel"]]
    elif "flash_efficiency" in stated:  # a stated rate, of no kernel by name: the ring's later steps run at it too
        stated["flash_unmasked_forward"] = None
    if "matmul_ceiling" in stated:
        perf = replace(perf, source=f"matmul ceiling {stated['matmul_ceiling']:g} from {spec.source}")
    user = basis != spec.key or spec.inherits is not None or bool(stated)
    inherited = f"{basis}, inherited" if user else f"{basis} (built-in)"
    return replace(perf, **stated, constants_from=tuple(
        (n, "the device file" if n in stated else inherited if basis else DEFAULT_FROM[n]) for n in PERF_FIELDS))


def from_table(perf: PerfSpec) -> bool:
    """Whether every per-device constant is a table device's own (no device file in play)."""
    return all(w.endswith("(built-in)") for _, w in perf.constants_from)


def constants_line(perf: PerfSpec) -> str:
    """One line naming each per-device constant, its value and where it came from."""
    values = {"sm_count": str(perf.sm_count), "matmul_ceiling": f"{perf.matmul_ceiling:.3g}",
              "fp8_ceiling": f"{perf.fp8_ceiling:.3g}", "sustained_clock": f"{perf.sustained_clock:.3g}",
              "flash_efficiency": "/".join(f"{v:.3g}" for v in perf.flash_efficiency)
              + f" {ATTENTION_KERNEL_NAMES.get(perf.attention_kernel, perf.attention_kernel)}",
              "kernel_s": f"{perf.kernel_s * 1e6:.3g} µs", "static_power_w": f"{perf.static_power_w:g} W",
              "gpu_variation": f"{perf.gpu_variation:.3g}"}
    line = "Device constants: " + "; ".join(f"{n} {values[n]} ({w})" for n, w in perf.constants_from)
    if any(w.startswith("default") for _, w in perf.constants_from):
        line += " (state them under perf: in the device file, or name a table device with inherits:)"
    return line


def device_constants(perf: Optional[PerfSpec]) -> Optional[dict]:
    """The JSON form: per-device constant -> {value, from}; None without a performance model."""
    if perf is None or not perf.constants_from:
        return None
    return {n: {"value": list(v) if isinstance(v := getattr(perf, n), tuple) else v, "from": w}
            for n, w in perf.constants_from}


LAUNCH_MODES = ("graph", "eager")  # how a step's kernels reach the GPU (PerfSpec.launch)


def with_launch(perf: PerfSpec, launch: Optional[str] = None, host_op_s: Optional[float] = None) -> PerfSpec:
    """``perf`` under a launch mode and a host cost per kernel (--launch, --host-op-us); one line if bad."""
    from tfcalc.errors import InputError

    if launch is not None and launch not in LAUNCH_MODES:
        raise InputError(f"--launch must be one of {', '.join(LAUNCH_MODES)}; got {str(launch)[:40]!r}")
    if host_op_s is not None and (isinstance(host_op_s, bool) or not isinstance(host_op_s, (int, float))
                                  or not 0 <= host_op_s <= 1e-2):
        shown = f"{host_op_s * 1e6:g} µs" if isinstance(host_op_s, float) else repr(str(host_op_s)[:40])
        raise InputError(f"--host-op-us must be a number of µs in [0, 10000]; got {shown}")
    return replace(perf, launch=launch or perf.launch,
                   host_op_s=perf.host_op_s if host_op_s is None else float(host_op_s))


def check_fraction(name: str, value: object) -> float:
    """A fraction in (0, 1] for --matmul-efficiency and the like; InputError, one line, otherwise."""
    from tfcalc.errors import InputError

    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 1e-4 <= value <= 1:
        raise InputError(f"{name} must be a number in [0.0001, 1]; got {str(value)[:40]!r}")
    return float(value)


def perf_json(perf: PerfSpec) -> dict:
    """The performance model's device properties (tfcalc.count.perf.hardware), as used."""
    return {"sm_count": perf.sm_count, "matmul_ceiling": perf.matmul_ceiling, "sustained_clock": perf.sustained_clock,
            "static_power_w": perf.static_power_w, "gpu_variation": perf.gpu_variation,
            "bandwidth_efficiency": perf.bandwidth_efficiency, "kernel_s": perf.kernel_s,
            "flash_efficiency": list(perf.flash_efficiency), "matmul_efficiency": perf.matmul_efficiency,
            "link_latency_s": dict(perf.link_latency_s), "link_efficiency": dict(perf.link_efficiency),
            "fp8_ceiling": perf.fp8_ceiling, "comm_sms": perf.comm_sms, "ep_comm_sms": perf.ep_comm_sms,
            "source": perf.source,
            "host_op_s": perf.host_op_s, "launch": perf.launch, "attention_kernel": perf.attention_kernel,
            "flash_unmasked_forward": perf.flash_unmasked_forward,
            "constants_from": dict(perf.constants_from)}
