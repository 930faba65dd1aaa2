"""A mixture's grouped GEMM when the routing is not perfectly even: the tile quantization of each expert's
own row count. Pure arithmetic.

A grouped GEMM (CUTLASS's grouped kernel, examples/24_gemm_grouped, the kernel behind Megatron-LM's
GroupedMLP and torch._grouped_mm) runs G problems (m_g, k) @ (k, n) in one launch: each problem is cut into
its own tiles, ⌈m_g/tm⌉·⌈n/tn⌉ of them, and the SMs run all the problems' tiles in waves
(tfcalc.count.perf.gemm, steps 1-2, with tiles summed over the problems). The row counts are the routing's:
R rows (token-expert pairs) over G experts, each pair to an expert with probability 1/G under a balanced
router (the auxiliary loss's aim: Switch Transformers, Fedus et al. 2022, sec. 2.2; DeepSeek-V3's bias
balancing), so m_g ~ Binomial(R, 1/G), mean μ = R/G, variance σ² = μ·(1 − 1/G). tfcalc.count.perf.gemm
at m = μ counts ⌈μ/tm⌉ tiles per expert; the expected count is

    E⌈m_g/tm⌉ = Σ_{j ≥ 0} P(m_g > j·tm),

j = 0 exactly (P(m_g > 0) = 1 − (1 − 1/G)^R: an expert no pair reached runs no tile), the rest by the
normal approximation with continuity, P(m_g > j·tm) ≈ Q((j·tm + ½ − μ)/σ). The uneven counts waste on
average about half a tile per expert once σ is a tile or more (256 rows per expert, 128-row tiles: 2.5
tiles, not 2). The tile efficiency is then R·n / (G·E⌈m_g/tm⌉·tm · ⌈n/tn⌉·tn), the waves formed over
G·E⌈m_g/tm⌉·⌈n/tn⌉ tiles (rounded), the shape and loop terms as for one GEMM; the best tile shape wins.

Worked example (tests/count/test_moe_dispatch.py): R = 32,768 pairs over G = 128 experts, μ = 256,
σ = 15.94; 128-row tiles: P(m > 0) = 1, P(m > 128) = 1, P(m > 256) = Q(0.5/15.94) = 0.4875, P(m > 384) ≈ 0:
2.4875 tiles per expert, not 2.
"""

from __future__ import annotations

import math
from functools import lru_cache

from tfcalc.count.perf import gemm

SIGMAS = 8.0  # terms beyond μ ± 8σ are 1 or 0 to double precision


def expected_tiles(rows: int, groups: int, tm: int) -> float:
    """E⌈m_g/tm⌉ for m_g ~ Binomial(rows, 1/groups) (module docstring)."""
    if groups <= 1:
        return math.ceil(rows / tm)
    mu = rows / groups
    sigma = math.sqrt(mu * (1 - 1 / groups))
    total = 1 - (1 - 1 / groups) ** rows  # j = 0, exactly
    if sigma == 0:
        return total + max(0, math.ceil(mu / tm) - 1)
    low = max(1, math.floor((mu - SIGMAS * sigma) / tm))
    high = math.ceil((mu + SIGMAS * sigma) / tm)
    total += low - 1  # 1 ≤ j < low: P = 1
    for j in range(low, high + 1):
        total += 0.5 * math.erfc((j * tm + 0.5 - mu) / (sigma * math.sqrt(2)))
    return total


@lru_cache(maxsize=65536)
def efficiency(rows: int, groups: int, n: int, k: int, sms: int, ceiling: float) -> float:
    """The fraction of the peak a grouped GEMM of ``rows`` routed rows over ``groups`` experts reaches."""
    if min(rows, groups, n, k) < 1:
        return ceiling
    best = 0.0
    for tm, tn in gemm.TILES:
        per = expected_tiles(rows, groups, tm)
        tiles = max(1, round(groups * per * math.ceil(n / tn)))
        shape = rows * n / (groups * per * tm * math.ceil(n / tn) * tn) * gemm.shape_efficiency(tm, tn)
        best = max(best, min(1.0, shape) * gemm.wave_efficiency(tiles, sms) * gemm.loop_efficiency(k))
    return ceiling * min(1.0, best / gemm.loop_efficiency(gemm.K_REF))


def seconds(rows: int, groups: int, n: int, k: int, peak: float, sms: int, ceiling: float) -> float:
    """Time of the grouped GEMM: 2·rows·n·k FLOPs at the efficiency above."""
    return 2 * rows * n * k / (peak * efficiency(rows, groups, n, k, sms, ceiling))
