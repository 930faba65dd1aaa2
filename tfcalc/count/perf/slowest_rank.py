"""The slowest GPU of a synchronous step (issue 31): pure arithmetic, no torch. Read by
tfcalc.count.training.plan, after the step's other terms (tfcalc.count.training.steptime).

1. GPUs of one SKU do not run at one speed. Sinha et al., "Not All GPUs Are Created Equal: Characterizing
   Variability in Large-Scale, Accelerator-Rich Systems" (SC22; arXiv 2208.11035v3, abstract): over more than
   90 % of the GPUs of five clusters (Summit, Vortex, Frontera, Longhorn: V100; Corona: AMD MI50/MI60) and
   applications from SGEMM to ResNet-50 and BERT training, "8% (max 22%) average performance variation even
   though the GPU architecture and vendor SKU are identical", which they trace to each die's power management
   (its leakage and voltage-frequency curve: at one power limit, one clock per die). Their variation is the
   whisker span of a box plot over the GPUs, (Q3 + 1.5 IQR) − (Q1 − 1.5 IQR) = 4 IQR, over the median
   (hal-uw/gpu_variability_sc22_artifact, plot_script/plot_aggregated.py, ``percent_variability``).
   ``PerfSpec.gpu_variation`` = 0.08, their average, for every device (measured on V100s and MI50/60s only;
   a device file states its own under ``perf:``, 0 to leave the term out).
2. Per-GPU speed taken as normal around the median, σ relative: a normal's IQR is 2 · 0.6745 σ, so the span
   4 IQR = 5.396 σ and σ = variation / 5.396 (8 % → 1.48 %).
3. A training step is synchronous: the data-parallel reduction, every FSDP gather, every tensor-parallel
   collective and pipeline hand-off waits for every rank, so the step runs at the slowest of its N GPUs --
   the same die every step, the spread being the dies' own. Its expected excess over the median is σ times
   the expected largest of N standard normals (order statistics):

       e_N = ∫ x · N φ(x) Φ(x)^(N−1) dx = ∫₀^∞ (1 − Φ(x)^N) dx − ∫_{−∞}^0 Φ(x)^N dx,

   e_1 = 0, e_2 = 1/√π = 0.564, e_3 = 3/(2√π) = 0.846, e_8 = 1.424, e_128 = 2.595 (the second form, by
   Simpson's rule on each side of 0; checked in tests/count/test_slowest_rank.py against the closed forms and the
   maxima of draws). What the dies' clocks set stretches by σ · e_N: the matmuls and the fused attention
   (``matmul_s``, with the pipeline's stretch); the memory-bound kernels follow the HBM's clock, not the
   SMs', and are left:

       slowest_rank_s = σ · e_N · matmul_s · (pipelined / compute).

   One GPU (N = 1) pays nothing; at 8 % 8 GPUs pay 2.1 % of their matmul time, 128 pay 3.8 %, 16,384 pay 5.9 %.
"""

from __future__ import annotations

import math
from dataclasses import replace
from functools import lru_cache

IQR_SIGMAS = 2 * 0.6744897501960817  # a normal's interquartile range in σ: 2 Φ⁻¹(3/4)
SPAN_SIGMAS = 4 * IQR_SIGMAS  # Sinha et al.'s whisker span, (Q3 + 1.5 IQR) − (Q1 − 1.5 IQR) = 4 IQR, in σ
GRID = 2000  # Simpson intervals on each side of 0: e_N to 1e-6 for N up to ten million
LOW, HIGH = -9.0, 9.0  # Φ(x)^N below LOW and 1 − Φ(x)^N above HIGH are under 1e-12 for N ≤ 1e7
MAX_GPUS = 10_000_000


def sigma(variation: float) -> float:
    """Step 2: the relative standard deviation of one GPU's speed from Sinha et al.'s variation (4 IQR / median)."""
    return max(variation, 0.0) / SPAN_SIGMAS


def _phi_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@lru_cache(maxsize=256)  # a search prices many layouts of one GPU count
def expected_max(n: int) -> float:
    """Step 3's e_N: the expected largest of ``n`` independent standard normals (0 for one)."""
    if n <= 1:
        return 0.0
    n = min(n, MAX_GPUS)

    def power(x: float) -> float:  # Φ(x)^N, through the logarithm (N up to millions)
        p = _phi_cdf(x)
        return math.exp(n * math.log(p)) if p > 0 else 0.0

    # the second form's two halves apart: its integrand jumps by 1 at 0
    return _simpson(lambda x: 1.0 - power(x), 0.0, HIGH) - _simpson(power, LOW, 0.0)


def _simpson(f, a: float, b: float) -> float:
    h = (b - a) / GRID
    return (f(a) + f(b) + sum((4 if i % 2 else 2) * f(a + i * h) for i in range(1, GRID))) * h / 3


def slowest_rank_s(matmul_s: float, stretch: float, variation: float, gpus: int) -> float:
    """Step 3: seconds the slowest of ``gpus`` GPUs adds to a step whose matmuls take ``matmul_s`` (one GPU at the
    median's speed, ``stretch`` the pipeline's pipelined / compute)."""
    return matmul_s * stretch * sigma(variation) * expected_max(gpus)


def with_slowest_rank(step, variation: float, peak_flops_per_s: float, gpus: int):
    """tfcalc.count.training.steptime's StepTime with step 3's seconds added to the physics (and to the step
    without overlap); a step stated by --mfu stays."""
    stretch = step.pipelined_s / step.compute_s if step.compute_s else 1.0
    extra = slowest_rank_s(step.matmul_s, stretch, variation, gpus)
    if not extra:
        return step
    physics = step.physics_s + extra
    overlap = step.overlap_s if step.basis == "mfu" else physics
    return replace(step, slowest_rank_s=extra, no_overlap_s=step.no_overlap_s + extra, physics_s=physics,
                   overlap_s=overlap, mfu=step.model_flops / (overlap * peak_flops_per_s * gpus))
