"""Greedy generation with the static KV cache: one prefill, then one decode step per new token.

Greedy (argmax) because tfcalc measures speed, not text: sampling would add a softmax and a draw per
step and change nothing that the roofline counts. The chosen token stays on the device and feeds the
next step directly, so on a GPU the host never waits for a step to finish before launching the next
(no .item(), no printing inside the loop).
"""

from __future__ import annotations

import torch

from tfcalc.model.cache import StaticCache
from tfcalc.model.transformer import Transformer


def next_token(logits: torch.Tensor) -> torch.Tensor:
    """(B, 1, V) logits -> (B, 1) greedy token ids."""
    return logits[:, -1].argmax(dim=-1, keepdim=True)


@torch.inference_mode()
def generate(model: Transformer, prompt: torch.Tensor, new_tokens: int, cache: StaticCache | None = None,
             src_idx: torch.Tensor | None = None) -> torch.Tensor:
    """(B, T) prompt -> (B, new_tokens) greedy continuation: the prefill yields the first new token, each
    of the new_tokens - 1 decode steps one more. The cache needs T + new_tokens - 1 positions (the last
    token is never fed back); a cache made here has exactly that."""
    B, T = prompt.shape
    cache = cache or model.new_cache(B, T + new_tokens - 1)
    token = next_token(model.prefill(prompt, cache, src_idx))
    out = [token]
    for _ in range(new_tokens - 1):
        token = next_token(model.decode(token, cache))
        out.append(token)
    return torch.cat(out, dim=1)
