"""The pace of a step under attention DP (``infer --ep E --attention-dp D --rate R``; ``--adp-balance``): the D groups
schedule their own prompts, but every MoE layer is a collective over all of them, so a step lasts as long as its
slowest group's. Pure arithmetic.

The source. TensorRT-LLM's PyTorch executor (v1.0, tensorrt_llm/_torch/pyexecutor/py_executor.py, ``_schedule``):
each attention-DP rank runs its own scheduler over its own requests; only with ``attention_dp_config.enable_balance``
(default False: llmapi/llm_args.py, AttentionDpConfig) does ``_balance_adp_requests`` hold a rank's context requests
until every rank has one (or ``timeout_iters`` pass). The ranks then meet at every MoE layer (fused_moe_cutlass.py's
allgather / reduce-scatter over all ranks, or the all-to-all), and a rank with nothing to run is padded with a dummy
generation request to take part (``_pad_attention_dp_dummy_request``). So a rank that prefills a prompt holds the
others at each MoE layer for its prompt's attention and dense rows, which they do not share; the experts' work on
its tokens is spread over every GPU whichever rank the prompt is on.

The model (tfcalc.count.serving.ep_continuous prices a prompt at t_p(n) with the other groups' prompts beside it, the
aligned case: every group with a prompt in the same steps, which ``--adp-balance on`` enforces):
1. Prompts reach each group as a Poisson stream; a step takes the prompts that arrived during the one before, k_i in
   group i, k_i ~ Poisson(λ) independently. λ, a group's prompts per step: the steady state's N sequences in flight
   in a group, each over O − 1 decode steps (the prompt's step yields the first token), start at N / (O − 1) a
   step (Little's law over steps: R/D requests/s × the step's mean length = N / (O − 1)).
2. A step's prompt work: the non-expert rows (attention, dense, norms, the LM head) of the fullest group's prompts,
   max_i k_i · t_ne, beside the expert rows and the exchange of all groups' prompt tokens, Σ_i k_i · t_x. Aligned,
   max_i k_i is the mean λ; independent, its expectation M_D(λ) = Σ_{m ≥ 0} (1 − F_λ(m)^D), F_λ Poisson's CDF.
3. So each prompt costs t_ne·(M_D(λ)/λ − 1) beyond the aligned t_p: the stall it and the prompts beside it put on
   the groups with fewer. As λ → 0 (light load) M_D/λ → D: every prompt stalls all D − 1 other groups for its whole
   t_ne; as λ grows the prompts coincide and the factor falls towards 1 (the aligned case).
t_ne(n): the prompt's non-expert rows on its group's T GPUs beside n sequences decoding (the mixed step's rows less
the decode step's, the weights read once), its tokens' expert rows and exchange excluded.

Not modelled: the budget's cap on k_i (a group takes at most (B − n) / I whole prompts a step; M_D counts the
tail beyond it), the spread of the groups' decode batches, and the steps' varying length in λ (its mean is used).
"""

from __future__ import annotations

import math

TAIL = 1e-12  # the sum of step 2 stops where 1 − F^D is below this


def expected_max(lam: float, d: int) -> float:
    """M_D(λ): the expected maximum of d independent Poisson(λ) counts (step 2), Σ_{m ≥ 0} (1 − F(m)^d)."""
    if lam < 0 or d < 1:
        raise ValueError("expected_max: λ ≥ 0 and d ≥ 1")
    if lam == 0:
        return 0.0
    total, pmf, cdf, m = 0.0, math.exp(-lam), 0.0, 0
    while True:
        cdf += pmf
        term = 1.0 - min(cdf, 1.0) ** d
        if term < TAIL and m > lam:
            return total
        total += term
        m += 1
        pmf *= lam / m


def stall_factor(lam: float, d: int) -> float:
    """Step 3's M_D(λ)/λ − 1: the t_ne's a prompt adds beyond the aligned case; D − 1 in the limit λ → 0."""
    if d == 1:
        return 0.0
    if lam <= 1e-9:
        return float(d - 1)
    return expected_max(lam, d) / lam - 1.0


def prompts_per_step(n: float, mean_output: int) -> float:
    """Step 1's λ: a group's prompts a step at N = n in flight, n / (O − 1) (every step a prompt at O = 1)."""
    return n / (mean_output - 1) if mean_output > 1 else 1.0
