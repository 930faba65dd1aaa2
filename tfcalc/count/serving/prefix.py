"""Prefix caching (``infer --cached-prefix N``): the first N tokens of every prompt -- a system prompt, few-shot
examples, a document many questions share -- have their K/V in the cache already when the request arrives, so
the server computes only the rest. vLLM's automatic prefix caching (docs/design/prefix_caching.md: each full
block of KV hashed with its prefix and looked up on arrival) and SGLang's RadixAttention (Zheng et al. 2024,
"SGLang", arXiv 2312.07104, sec. 3: a radix tree over the tokens of the cached KV) both serve a shared prefix so.
Pure arithmetic.

Why a prefix length, not a hit rate: a published setup states the shared prefix (vLLM's
benchmarks/benchmark_prefix_caching.py --prefix-len, SGLang's generated-shared-prefix dataset
--gsp-system-prompt-len); the hit rate servers report (vLLM's prefix_cache_hit_rate, SGLang's cache_hit_rate) is an
outcome of that prefix, the prompt length and eviction, and says nothing of how many copies the cache holds. In
steady state a shared prefix of N tokens in prompts of I is a token hit rate of P/I (P below).

1. The hit: vLLM caches and looks up whole blocks only ("A cached block is a full block with a block hash",
   vllm/v1/core/block_pool.py, BlockHashToBlockMap; each block's hash covers its tokens and its prefix's,
   docs/design/prefix_caching.md), block_size 16 by default (CacheConfig.block_size), so P = ⌊N / 16⌋·16 tokens
   hit. (SGLang's radix tree is
   token-granular at its default page size of 1: P = N there; N a multiple of 16 means the same to both.)
2. A prompt's prefill computes its I − P uncached tokens at positions [P, I): every linear over I − P rows, and
   attention of those rows over all I positions, the P cached keys and causally among themselves:
   (I − P)·P + (I − P)(I − P + 1)/2 query-key pairs per head and layer (Q·Kᵀ and attention·V each 2·d_head FLOPs a
   pair), as a chunk of a chunked prefill starting at P (tfcalc.count.serving.roofline.prefill_step with
   ``start``: the P cached positions read once); the LM head on the last position. Its seconds follow from the
   roofline and the performance model as any prefill's; under chunked prefill the chunks cover [P, I) and the
   prompt takes I − P tokens of the steps' budget (vLLM schedules num_tokens − num_computed_tokens).
3. Memory: a sequence at context L holds the states of L positions, M(L) bytes (a layer that keeps every position:
   L of them; a window of W: min(L, W); a recurrent state: the same at any L). The prefix's positions are shared:
   s = M(L) − M(L − P) bytes, the positions of [0, P) still in a sequence's state at L (all P in a layer that keeps
   every position, max(0, P − (L − W)) in a window of W, none in a fixed state), are held once, and each sequence
   holds M(L) − s of its own. The KV cache of
   n sequences: n·(M(L) − s) + s; the capacity in sequences (memory − weights − s) / (M(L) − s) instead of
   (memory − weights) / M(L). L = I + O/2, the mean context of a sequence in flight (continuous.py).
4. A decode step is unchanged: every sequence's attention reads its whole context, the shared blocks included
   (vLLM's paged kernels read each sequence's block table; the cascade kernels that read a common prefix once for
   the batch -- FlashInfer's, vLLM's cascade attention for FlashAttention -- are left out: a decode step here is
   priced as the default kernels run it, an upper bound where they would engage).
TTFT, the prefills' share of the GPU and the capacity in requests/s then follow from the engine
(tfcalc.count.serving.continuous, chunked, lockstep, closed_loop; ep_continuous for --ep) with the prompt's new
cost and the cache's new size.
"""

from __future__ import annotations

from dataclasses import replace

from tfcalc.errors import InputError
from tfcalc.workload import Workload

BLOCK = 16  # vLLM's default KV block size (CacheConfig.block_size): the granularity of a prefix hit (step 1)


def check(cached: object, prompt: int, flag: str = "--mean-input") -> None:
    """N: a whole number of tokens, 0 ≤ N < I (the last prompt token is always computed: it yields the first
    token's logits; vLLM recomputes it even on a full hit)."""
    if isinstance(cached, bool) or not isinstance(cached, int) or cached < 0:
        raise InputError(f"--cached-prefix must be a whole number of tokens, 0 or more; got {str(cached)[:40]!r}")
    if cached >= prompt:
        raise InputError(f"--cached-prefix ({cached:,}) must be shorter than the prompt ({flag} {prompt:,}): at "
                         "least the last prompt token is computed, to yield the first token")


def hit_tokens(cached: int) -> int:
    """P: the tokens of a cached prefix of N that hit, whole blocks of BLOCK (step 1)."""
    return cached // BLOCK * BLOCK


def shared_bytes(state, w: Workload, hit: int) -> int:
    """s of step 3: the bytes of a sequence's state at ``w.seq`` positions that its first ``hit`` positions hold,
    held once for every sequence; ``state``: a Workload's state bytes (one GPU's: Sharding.state)."""
    if not hit:
        return 0
    return state(w) - state(replace(w, seq=w.seq - hit))
