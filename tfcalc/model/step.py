"""The one runtime step over a static cache (tfcalc.model.cache): a prompt (prefill), and the fixed-shape
step every later call takes -- a decode step (one token per sequence), a speculative verify step (several,
tfcalc.measure.speculative) and a step of continuous-batching rows at their own positions
(tfcalc.model.slots).

A step's positions are a device tensor, its mask is built on the device from them and from the
position each slot holds, and its new K and V are scattered into the state at device indices: a step of
T tokens over a span of S slots runs the same ops on the same shapes whatever its positions, and reads
nothing back to the host (tests/model/test_state_static.py records every op of every step). A prompt
runs as the uncached forward does (its layer masks built on the host, once) and writes what the state
keeps of it.
"""

from __future__ import annotations

import torch


def step_mask(key_pos: torch.Tensor, query_pos: torch.Tensor, layout: tuple, dtype: torch.dtype,
              slopes: torch.Tensor | None = None) -> torch.Tensor:
    """The additive mask of a step: key_pos (B, S) the position each slot holds (-1 empty), query_pos
    (B, T) -> (B, 1, T, S), or (B, nh, T, S) with ALiBi slopes (nh,): -slope·(i - j) on the keys seen
    (Press et al. 2022, sec. 3), -inf on the others: an empty slot, a key after its query, one W or more
    positions before it (a window of W), or of another chunk (i // C != j // C, modeling_llama4.py)."""
    kind, span, _ = layout
    key, query = key_pos[:, None, :], query_pos[:, :, None]  # (B, 1, S), (B, T, 1)
    rel = key - query  # (B, T, S): j - i, <= 0 where seen
    hidden = (key < 0) | (rel > 0)
    if kind == "window":
        hidden = hidden | (rel <= -span)
    elif kind == "chunk":
        hidden = hidden | (torch.div(key, span, rounding_mode="floor") != torch.div(query, span, rounding_mode="floor"))
    hidden = hidden[:, None]  # (B, 1, T, S)
    if slopes is None:
        return torch.zeros(hidden.shape, dtype=dtype, device=key_pos.device).masked_fill_(hidden, float("-inf"))
    bias = slopes.float()[None, :, None, None] * rel[:, None].to(torch.float32)  # (B, nh, T, S)
    return bias.masked_fill_(hidden, float("-inf")).to(dtype)


def prefill(stack, idx: torch.Tensor, cache, token_type_ids=None, memory=None) -> torch.Tensor:
    """The prompt (B, T) from position 0 through the stack, each layer writing what its state keeps (its
    last min(T, slots) positions) -> (B, T, d) output of the last block."""
    T = idx.shape[1]
    cache.check_room(T)
    x = stack.embed(idx, token_type_ids, 0)  # (B, T, d)
    ropes = stack.rope_tables(0, T, x.dtype)
    positions = torch.arange(T, device=idx.device).expand(idx.shape[0], T)  # (B, T)
    slots = cache.place(positions, keep=T)
    masks, carry = stack.layer_masks(T, x.dtype), []  # carry: shortcut MoE outputs (tfcalc.model.block)
    more = {"emb": x} if getattr(stack, "reads_embeddings", False) else {}  # Zamba2's shared block reads them
    for i, (block, rope, mask) in enumerate(zip(stack.blocks, ropes, masks, strict=True)):
        store = cache.states[i].prefill(slots)  # the state's own store (tfcalc.model.cache, the state protocol)
        cross_kv = None if cache.cross is None else cache.cross[i]
        # the decoding arguments by keyword: a tensor-parallel plan lays out the positional ones
        x = block(x, rope, mask, memory, store=store, cross_kv=cross_kv, carry=carry, **more)
    cache.next_pos.fill_(T)
    cache.length = T
    return x


def run_step(stack, idx: torch.Tensor, cache, span: int) -> torch.Tensor:
    """T tokens per sequence (B, T) at positions next_pos .. next_pos + T - 1 (each row its own) through
    the stack over the first ``span`` slots of every state -> (B, T, d) output of the last block. The
    device work only: the caller keeps the host's count (cache.length) and chose span."""
    T = idx.shape[1]
    start = cache.next_pos  # (B,)
    x = stack.embed(idx, None, start)  # (B, T, d): positions per row
    ropes = stack.rope_tables(start, T, x.dtype)  # per layer (B, T, r)
    query = start[:, None] + torch.arange(T, device=idx.device)  # (B, T)
    slots = cache.place(query)
    slopes = stack.alibi if stack.positions == "alibi" else None
    masks = {key: step_mask(held[:, :min(span, key[2])], query, key, x.dtype, slopes)
             for key, held in cache.slot_pos.items()}
    rows = {} if cache.active is None else {"rows": cache.active}  # continuous batching's rows in flight (B,)
    if getattr(stack, "reads_embeddings", False):  # Zamba2's shared block reads the token embeddings
        rows["emb"] = x
    carry: list = []  # shortcut MoE outputs on their way to the next block (tfcalc.model.block)
    for i, (block, rope) in enumerate(zip(stack.blocks, ropes, strict=True)):
        state = cache.states[i]
        store = state.step(slots, span)
        cross_kv = None if cache.cross is None else cache.cross[i]
        # a state without positions (layout None: a recurrent state) reads no mask
        # fold: the stream is the step's own (made by its embedding, handed from block to block), so each
        # sub-layer's last GEMM adds into it in place (layers.add_projection); never under autograd
        x = block(x, rope, masks.get(state.layout), None, store=store, cross_kv=cross_kv,
                  fold=not torch.is_grad_enabled(), carry=carry, **rows)
    cache.next_pos.add_(T)
    return x
