"""Expert load imbalance under expert parallelism: the fullest GPU's routed rows over the mean, the factor that a
step's expert GEMMs and its all-to-all's receive side wait on (every GPU waits for the slowest at the next
collective: SGLang, lmsys.org/blog/2025-05-05-large-scale-ep, "Expert Parallelism Load Balancer"; TensorRT-LLM's
"Scaling Expert Parallelism", tech blog 4, "Motivation for large-scale EP"). Pure arithmetic.

G GPUs hold N = n + R expert slots (n experts, R redundant copies), N/G each; a step routes B tokens, each to k
distinct experts: T = B·k (token, expert) pairs, m = T/G a GPU on average. X_g, the pairs GPU g receives:

1. The routing's noise. Under a uniform router each token's k picks are a uniform k-subset of the N slots, so
   per token the picks on GPU g are hypergeometric (N slots, N/G of them g's, k drawn): variance
   k·(1/G)(1 − 1/G)(N − k)/(N − 1), covariance between two GPUs −k/G²·(N − k)/(N − 1). Over B independent tokens
   X_g has mean m and relative variance v = (1 − 1/G)(N − k)/((N − 1)·m), and the G loads are equicorrelated at
   ρ = −1/(G − 1) (their sum is T).
2. The placement's skew. Real routers favour some experts for a whole step (TensorRT-LLM's figures 1-11:
   DeepSeek-R1's hot experts stay hot for hundreds of steps), so each GPU's expected share differs from 1/G by a
   spread of coefficient of variation c across the GPUs (also summing to one). The two add: the loads' CV is
   σ = √(c² + v).
3. The maximum. By the central limit theorem (m pairs a GPU) the loads are jointly normal; equicorrelated normals
   at ρ = −1/(G − 1) are μ + s·√(G/(G − 1))·(Z_g − Z̄) with Z_g independent standard normals (the variance and the
   covariance check), and E[max_g (Z_g − Z̄)] = E[max_g Z_g] = e_G, so

       f = E[max_g X_g] / m = 1 + e_G · √(G/(G − 1)) · σ,   e_G = ∫ x · G·φ(x)·Φ(x)^(G−1) dx

   (e_2 = 1/√π = 0.5642, e_8 = 1.4236, e_32 = 2.0697: ``expected_max_normal`` integrates it). f ≥ 1; 1.0 is a
   perfectly balanced step. The normal maximum is the approximation: a skew made of one or two hot experts on one
   GPU has a heavier tail than a normal spread (below).

The skew c, named (``SKEW``), from TensorRT-LLM's tech blog 4 (docs/source/blogs/tech_blog/
blog4_Scaling_Expert_Parallelism_in_TensorRT-LLM.md, Table 1: DeepSeek-R1 on 32 GB200, a decode step's routed
pairs by receiving rank, averaged over layers and steps, 1,024 pairs a rank): measured CV = std/mean by rank.
- ``eplb``: with DeepSeek's EPLB (288 slots, 9 a rank, EP 32): std 52.0 of 1,024, of which the routing's noise at
  that step (N = 288, k = 8, G = 32: v = 0.000923) leaves c = √(0.0508² − 0.000923) = 0.0407. The formula then
  gives f − 1 = 2.0697·1.016·0.0508 = 0.107 for the measured (max − mean)/mean of 0.109, and at EP 36 (8 slots a
  rank, std 53.9) 0.113 for 0.115 (tests/count/perf/test_expert_imbalance.py).
- ``none``: no EPLB (256 slots, 8 a rank, EP 32): std 491.6 of 1,024, c = 0.479. The normal maximum gives
  f − 1 = 1.01 where 1.564 was measured: the hot rank is a hot expert's, a heavier tail than a normal spread --
  ``none`` is a lower bound of the unbalanced case (give ``--expert-imbalance 2.56`` for the measured factor).
- ``uniform``: c = 0, the routing's noise alone (DeepSeek's profile-data: "a perfectly balanced routing"; SGLang's
  "simulated perfect EPLB", random experts under the group-limited routing).
Defaults: serving (``infer --ep``) ``eplb``, the published large-EP deployments' (SGLang, DeepSeek, TensorRT-LLM
run EPLB); training ``uniform``: the router's balancing loss (GShard's auxiliary loss, Megatron-Core's
--moe-aux-loss-coeff, DeepSeek-V3's bias-based auxiliary-loss-free balancing, sec. 2.1.2) is optimized over the
very batches being trained, so the per-step spread left is the routing's noise.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Optional, Union

from tfcalc.errors import InputError

# (max − mean)/mean and std by rank, TensorRT-LLM tech blog 4, Table 1 (DeepSeek-R1, 1,024 pairs a rank)
MEASURED_PAIRS = 1024
MEASURED = {"eplb": (32, 288, 52.0), "none": (32, 256, 491.6)}  # (EP, slots, std by rank)
TOP_K = 8  # DeepSeek-R1's


def noise_variance(gpus: int, slots: int, top_k: int, pairs_per_gpu: float) -> float:
    """Step 1's v: the squared CV of one GPU's pairs under a uniform router, m pairs a GPU on average."""
    if gpus <= 1 or pairs_per_gpu <= 0:
        return 0.0
    finite = (slots - top_k) / (slots - 1) if slots > 1 else 0.0
    return (1 - 1 / gpus) * finite / pairs_per_gpu


def _skew_of(name: str) -> float:
    G, N, std = MEASURED[name]
    cv = std / MEASURED_PAIRS
    return math.sqrt(max(cv * cv - noise_variance(G, N, TOP_K, MEASURED_PAIRS), 0.0))


SKEW = {"uniform": 0.0, "eplb": _skew_of("eplb"), "none": _skew_of("none")}


@lru_cache(maxsize=512)
def expected_max_normal(n: int) -> float:
    """e_n = E[max of n independent standard normals] = ∫ x·n·φ(x)·Φ(x)^(n−1) dx (Simpson's rule on [−9, 9]
    with 3,600 intervals: 1e-9 of the tabulated values, e.g. Harter 1961)."""
    if n <= 1:
        return 0.0
    a, b, steps = -9.0, 9.0, 3600
    h = (b - a) / steps
    total = 0.0
    for i in range(steps + 1):
        x = a + i * h
        pdf = math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
        cdf = 0.5 * math.erfc(-x / math.sqrt(2))
        y = x * n * pdf * cdf ** (n - 1)
        total += y * (1 if i in (0, steps) else 4 if i % 2 else 2)
    return total * h / 3


def factor(gpus: int, slots: int, top_k: int, tokens: float, skew: float) -> float:
    """Step 3's f for ``tokens`` tokens routed over ``gpus`` GPUs holding ``slots`` expert slots, ``skew`` c."""
    if gpus <= 1 or tokens <= 0:
        return 1.0
    m = tokens * top_k / gpus
    sigma = math.sqrt(skew * skew + noise_variance(gpus, slots, top_k, m))
    return 1.0 + expected_max_normal(gpus) * math.sqrt(gpus / (gpus - 1)) * sigma


Imbalance = Union[str, float, None]


def parse(value: Imbalance, flag: str = "--expert-imbalance") -> Imbalance:
    """A name of ``SKEW`` (the factor computed per step), or a fixed factor ≥ 1; None keeps the default."""
    if value is None:
        return None
    if isinstance(value, str):
        v = value.strip().lower()
        if v in SKEW:
            return v
        try:
            value = float(v)
        except ValueError:
            raise InputError(f"{flag} must be one of {', '.join(SKEW)} or a factor ≥ 1 (1.0 = balanced); "
                             f"got {value!r}") from None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 1:
        raise InputError(f"{flag} must be one of {', '.join(SKEW)} or a factor ≥ 1 (1.0 = balanced); got {value!r}")
    return float(value)


def resolve(value: Imbalance, default: str, gpus: int, slots: int, top_k: int, tokens: float) -> float:
    """The factor a step uses: a fixed one as given, else step 3's under the named skew (``default`` if None)."""
    if isinstance(value, float):
        return value if gpus > 1 else 1.0
    return factor(gpus, slots, top_k, tokens, SKEW[value or default])


def describe(value: Imbalance, default: str) -> dict[str, Optional[Union[str, float]]]:
    """The JSON's record of what was used: {'skew': name or None, 'skew_cv': c or None, 'fixed': f or None}."""
    if isinstance(value, float):
        return {"skew": None, "skew_cv": None, "fixed": value}
    name = value or default
    return {"skew": name, "skew_cv": SKEW[name], "fixed": None}
