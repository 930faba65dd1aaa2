"""What overlapping a collective with compute still costs in HBM, and FSDP2's own copy kernels (issue 31):
pure arithmetic, no torch. Read by tfcalc.count.training.steptime (step 5).

1. HBM contention. A NCCL collective is a kernel that streams its data through the GPU's memory: in a
   ring, every step a peer writes a chunk into this rank's FIFO buffer, and this rank's kernel reads it
   back and writes it out (to its output, or, reduced with its own input, on to the next peer): NCCL's
   ``recvCopySend`` / ``recvReduceSend`` primitives (NVIDIA/nccl src/device/prims_simple.h). So each byte a
   rank sends crosses its HBM about ``NCCL_HBM_PASSES`` = 3 times (a write into the FIFO, a read out of it,
   a write of the result); the reduce-scatter's read of the rank's own input is the same size and left in
   that 3 (a lower bound). While that traffic overlaps the backward (or forward) pass, the kernels of the
   pass that are bound by memory bandwidth -- the non-matmul share of the compute, ``memory_share`` --
   wait for it; the GEMMs, bound by the tensor cores, do not. Charged:
       hbm_contention_s = overlapped HBM bytes / achievable bandwidth × memory_share.
   FSDP2's all-gather copy-in (``torch.ops.fsdp.all_gather_copy_in``: the rank's shards concatenated into
   the flat all-gather input, a read and a write of payload / N) runs on its own stream
   (``all_gather_copy_in_stream``, torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py,
   ``foreach_all_gather``): overlapped traffic of the same kind.
2. FSDP2's exposed copies. Two of FSDP2's copy kernels run on the compute stream, so nothing hides them
   (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py):
   - the all-gather's copy-out (``foreach_all_gather_copy_out`` → ``torch.split_with_sizes_copy``, called
     from ``FSDPParamGroup.wait_for_unshard`` on the current stream): the gathered flat buffer read and
     each unsharded parameter written, 2 × the all-gather's payload;
   - the reduce-scatter's copy-in (``foreach_reduce`` → ``foreach_reduce_scatter_copy_in`` →
     ``torch._chunk_cat``, before ``reduce_scatter_stream.wait_stream(current_stream)``): the unsharded
     gradients read in the parameter dtype and written, cast, into the reduce-scatter input in the
     reduce dtype: the payload in the gradient dtype plus the same elements in the weight dtype.
   fsdp_copy_s = those bytes / achievable bandwidth + a kernel's fixed cost per call.
Both apply to ZeRO-3 as tfcalc prices it (FSDP2's defaults, tfcalc.count.training.comm); Megatron's and
DDP's contiguous gradient buffers need no such copies, so ZeRO-0/1/2 pay only (1).
"""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.errors import InputError

NCCL_HBM_PASSES = 3  # HBM crossings per byte sent (docstring, 1): FIFO write, FIFO read, result write
RING_OPS = ("all_gather", "reduce_scatter", "all_reduce", "broadcast")
DP_GROUPS = ("dp", "edp", "dp_shard", "dp_replicate")  # the data-parallel groups (tfcalc.count.training.comm)


@dataclass(frozen=True)
class OverlapBytes:
    """HBM bytes of one step's data-parallel collectives on one rank: ``overlapped`` (NCCL's traffic and the
    all-gather copy-in, which run beside the compute) and ``exposed`` (FSDP2's copy-out and reduce-scatter
    copy-in, on the compute stream), and the exposed copies' kernel calls."""

    overlapped: int
    exposed: int
    copy_calls: int


def dp_hbm_bytes(collectives, zero: int, weight_bytes: int, grad_bytes: int) -> OverlapBytes:
    """Docstring 1 and 2 for the data-parallel collectives of one rank's step (tfcalc.count.training.comm's
    Collective list; ``weight_bytes`` and ``grad_bytes`` the element sizes of the weights and of the
    reduced gradients)."""
    overlapped = exposed = calls = 0
    for c in collectives:
        if c.group not in DP_GROUPS or c.op not in RING_OPS:
            continue
        overlapped += NCCL_HBM_PASSES * c.sent_bytes
        if zero != 3 or not c.calls:
            continue
        if c.op == "all_gather":  # copy-in beside it (payload / N, read and written); copy-out exposed
            overlapped += 2 * c.payload_bytes // c.group_size
            exposed += 2 * c.payload_bytes
            calls += c.calls
        elif c.op == "reduce_scatter":  # _chunk_cat: grads read in the weight dtype, written in the reduce dtype
            exposed += c.payload_bytes + c.payload_bytes * weight_bytes // grad_bytes
            calls += c.calls
    return OverlapBytes(overlapped, exposed, calls)


def hbm_contention_s(overlapped_bytes: float, hidden_share: float, bandwidth: float, memory_share: float) -> float:
    """Docstring 1: the memory-bound compute's wait for the overlapped collectives' HBM traffic;
    ``hidden_share`` of it overlaps (the rest is exposed and already runs alone), ``bandwidth`` the
    achievable bytes/s, ``memory_share`` the non-matmul share of the compute it overlaps."""
    if bandwidth <= 0:
        return 0.0
    return overlapped_bytes * min(max(hidden_share, 0.0), 1.0) / bandwidth * min(max(memory_share, 0.0), 1.0)


def fsdp_copy_s(exposed_bytes: float, calls: int, bandwidth: float, kernel_s: float) -> float:
    """Docstring 2: FSDP2's copies on the compute stream."""
    if bandwidth <= 0:
        return 0.0
    return exposed_bytes / bandwidth + calls * kernel_s


# rated board power (W), the default power limit, of the table devices a training plan runs on: NVIDIA's
# datasheets (H100 SXM 700, H100 NVL 350-400, H100 PCIe 350, H200 SXM 700, B200 HGX 1000, A100 SXM 400, A100 PCIe
# 300, V100 SXM2 300)
RATED_POWER_W = {"h100-sxm": 700, "h100-nvl": 400, "h100-pcie": 350, "h200": 700, "b200": 1000, "a100-40gb": 400,
                 "a100-80gb": 400, "a100-pcie": 300, "v100": 300}
MAX_POWER_W = 10_000  # ten times a B200's rated power: a larger figure is a typo


def capped_clock(power_limit_w: object, device_key: str, rated_w: object = None, static_w: float = 0.0) -> float:
    """--power-limit W on a device: power_capped_clock against its rated power (``rated_w``, else the table's),
    ``static_w`` of it not scaling with the clock (the device's ``static_power_w``, tfcalc.count.perf.hardware);
    InputError, one line, for a limit that is not a positive number of watts or a device without a rating."""
    if isinstance(power_limit_w, bool) or not isinstance(power_limit_w, (int, float)) \
            or not 0 < power_limit_w <= MAX_POWER_W:
        raise InputError(f"--power-limit must be watts in (0, {MAX_POWER_W:,}]; got {str(power_limit_w)[:40]!r}")
    rated = rated_w or RATED_POWER_W.get(device_key)
    if rated is None:
        known = ", ".join(RATED_POWER_W)
        raise InputError(f"--power-limit: no rated power is known for {device_key!r} (known: {known}); state "
                         "its clock as perf: {sustained_clock: X} in a device file")
    return power_capped_clock(float(power_limit_w), float(rated), float(static_w))


def power_capped_clock(power_limit_w: float, tdp_w: float, static_w: float = 0.0) -> float:
    """The share of its rated clock a GPU holds when every SM runs GEMMs under a power limit below its rated
    power (``sustained_clock``, tfcalc.count.perf.hardware). The board's power is a part that does not follow
    the SM clock -- leakage, the HBM stacks (refreshed and clocked at their own rate), the board's regulators:
    ``static_w`` -- and the SMs' dynamic power, α·C·V²·f, where under DVFS the voltage scales about linearly
    with the frequency, so it goes as f³ (Weste & Harris, "CMOS VLSI Design", 4th ed., sec. 5.1, dynamic
    power; the voltage-frequency pairing of DVFS, sec. 5.2). At the rated power P_r the clock is the rated
    one (s = 1); at a limit P the dynamic part has P − P_s of the P_r − P_s it had:

        P = P_s + (P_r − P_s) · s³   →   s = ((P − P_s) / (P_r − P_s))^(1/3),   1 at or above P_r.

    torchtitan's H100s ran at 500 W of 700 (pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md,
    "Hardware"); with the H100's 85 W (``static_power_w``, an idle H100's draw): (415/615)^(1/3) = 0.877; with
    none, 0.894. Checked (tests/count/test_power_capped_clock.py) against one die's bf16 GEMM (8192³, one
    harness, torch 2.8) at two power limits, an A100 80GB PCIe at 300 W and an A100-SXM4-80GB at 500 W: 236.3
    and 289.3 TFLOP/s, 0.817 (tusharhqq/napkin-math-gpu results/a100-80gb-pcie.json and a100-80gb-sxm4.json,
    ``power_limit_w``); with the A100's 59 W idle draw the law gives (241/441)^(1/3) = 0.818, with none 0.843.
    torchtitan's footnote 2 bounds the 500 W H100's peak between the H100 NVL's datasheet rate and the SXM's
    (835/989 = 0.845 to 1). Not modelled: the voltage floor. Below the clock where the voltage reaches its
    minimum the dynamic power falls only linearly with the clock, so a deep cap costs more than the law says:
    a GB300 capped at 500 W of its 1,400 measured a cuBLAS GEMM at ~617 TFLOP/s against ~1,600-2,174 at 1,400
    W (facebookexperimental/triton PR 2023), 0.28-0.39, where the law gives 0.71 (0.66 with the 137 W an idle
    B200 draws, ROCm/legacy-rocm-build issue 5219).
    A limit at or below P_s leaves no dynamic power: InputError."""
    if power_limit_w <= 0 or tdp_w <= 0:
        raise InputError(f"a power limit and a rated power must be positive watts; got {power_limit_w:g} and {tdp_w:g}")
    if power_limit_w >= tdp_w:
        return 1.0
    if not 0 <= static_w < power_limit_w:
        raise InputError(f"a {power_limit_w:g} W power limit leaves no dynamic power above the device's "
                         f"{static_w:g} W that does not scale with the clock (perf.static_power_w)")
    return ((power_limit_w - static_w) / (tdp_w - static_w)) ** (1 / 3)
