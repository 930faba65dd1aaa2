"""Achievable throughput of one GEMM, C (m × n) = A (m × k) · B (k × n), from its shape. Pure arithmetic.

Source: NVIDIA, "Matrix Multiplication Background User's Guide" (Deep Learning Performance
documentation), sections "Tile Quantization" and "Wave Quantization". A GEMM kernel splits C into tiles
of tm × tn, one thread block each, every tile running the whole k loop; the SMs run the tiles in waves.

1. Tile quantization: the tiles cover ⌈m/tm⌉·tm × ⌈n/tn⌉·tn elements of which m·n are useful:
   tile_eff = m·n / (⌈m/tm⌉·tm · ⌈n/tn⌉·tn).
2. Wave quantization: T = ⌈m/tm⌉·⌈n/tn⌉ tiles on S SMs run in ⌈T/S⌉ waves, the last one partly idle:
   wave_eff = (T/S) / ⌈T/S⌉. The guide's worked example: 256 × 128 tiles of a GEMM with 108 tiles on an
   A100 (108 SMs) fill one wave (1.0); 109 tiles need two (0.505).
3. Tile shape: a tile's arithmetic intensity is tm·tn / (tm + tn) FLOPs per element loaded (per k step,
   2·tm·tn FLOPs for 2·(tm + tn) elements): larger tiles reuse more, smaller ones make more tiles. The
   shape's own efficiency relative to the largest, I/(I + I₀) normalized to 256 × 128, with I₀ = 16
   (the intensity at which a tile spends as long loading as multiplying, on the shared-memory path):
   128 × 128 0.95, 128 × 64 0.86, 64 × 64 0.79. cuBLAS picks the tile shape per GEMM; we take the best.
4. Main loop fill: each tile's k loop has a prologue and an epilogue (loading the first stages, writing
   C) worth about K0 = 64 iterations' elements: loop_eff = k / (k + K0).
5. The ceiling: the best-shaped large GEMM reaches ``matmul_ceiling`` of the datasheet peak
   (tfcalc.count.perf.hardware, measured with mamf-finder). Such a GEMM has tile and wave efficiency
   near 1 and k of a few thousand, so the ceiling is divided by loop_eff at k = 2048 to make the product
   equal it there -- and no more: the ceiling is the maximum over mamf-finder's search of shapes (k up to
   5,376 on A100s and 20,480 on H100s), so a GEMM of larger k does not pass it (min(1, ...)).

6. Split-K: when a GEMM has fewer tiles than SMs (skinny GEMMs: decode, small TP shards), CUTLASS's
   and cuBLAS's split-K kernels cut k into s slices of at least MIN_SPLIT_K, s times the tiles, each
   with loop_eff(k/s) (the partial sums' reduction is small beside the loop and left out).
   Skinny tiles (16 × n, the tensor core's m16n8k16 instruction) serve m of a few rows.

efficiency(m, n, k) = ceiling · min(1, max over tile shapes of (tile_eff · wave_eff · shape_eff) · loop_eff /
loop_eff(2048)).
A batched GEMM (``count`` independent matmuls: attention's per-head products) multiplies the tiles by
the count before the waves are formed.

Worked example (tests/count/perf/test_gemm.py): m = n = 4096, k = 4096 on an A100 (108 SMs): 256 × 128
tiles: 16 × 32 = 512 tiles, 4.74 waves -> 5, wave_eff 0.948; 128 × 128: 1024 tiles, 9.48 -> 10, 0.948 ·
0.95 = 0.901; best 0.948, loop_eff 4096/4160 = 0.985 over 2048/2112 = 0.970: 0.948 · 1.0154 · 0.859 =
0.827 of the peak, 258 TFLOP/s.
"""

from __future__ import annotations

import math
from functools import lru_cache

TILES = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64), (16, 128), (16, 64))
SPLITS = (1, 2, 4, 8, 16)  # split-K factors (step 6)
MIN_SPLIT_K = 256  # a split keeps at least this much of k
I0 = 16.0  # elements: see step 3
K0 = 64  # k iterations' worth of prologue and epilogue: see step 4
K_REF = 2048  # the k of the shapes that set the ceiling (mamf-finder's best shapes: k 1536-2816)


def shape_efficiency(tm: int, tn: int) -> float:
    """Step 3: a tile shape's efficiency relative to 256 × 128."""
    def f(a: int, b: int) -> float:
        i = a * b / (a + b)
        return i / (i + I0)

    return f(tm, tn) / f(256, 128)


def tile_efficiency(m: int, n: int, tm: int, tn: int) -> float:
    """Step 1."""
    return m * n / (math.ceil(m / tm) * tm * math.ceil(n / tn) * tn)


def wave_efficiency(tiles: int, sms: int) -> float:
    """Step 2."""
    waves = tiles / sms
    return waves / math.ceil(waves)


def loop_efficiency(k: int) -> float:
    """Step 4."""
    return k / (k + K0)


@lru_cache(maxsize=65536)
def efficiency(m: int, n: int, k: int, sms: int, ceiling: float, count: int = 1) -> float:
    """The fraction of the datasheet peak one GEMM (or ``count`` alike, batched) reaches: the formula of
    the module docstring."""
    if min(m, n, k, count) < 1:
        return ceiling
    best = 0.0
    for tm, tn in TILES:
        tiles = math.ceil(m / tm) * math.ceil(n / tn) * count
        shape = tile_efficiency(m, n, tm, tn) * shape_efficiency(tm, tn)
        for s in SPLITS:
            if s > 1 and (tiles * s > 2 * sms or k // s < MIN_SPLIT_K):
                break
            best = max(best, shape * wave_efficiency(tiles * s, sms) * loop_efficiency(k // s))
    return ceiling * min(1.0, best / loop_efficiency(K_REF))  # step 5: the measured maximum bounds every shape


def seconds(m: int, n: int, k: int, peak: float, sms: int, ceiling: float, count: int = 1) -> float:
    """Time of ``count`` GEMMs (m, k) @ (k, n): 2·m·n·k·count FLOPs at the efficiency above."""
    return 2 * m * n * k * count / (peak * efficiency(m, n, k, sms, ceiling, count))
