"""Position encodings of the real model: RoPE tables (rotate-half layout, optionally on the first
channels of each head only), the sinusoid table, ALiBi slopes, T5's relative-position buckets, and the
buffers a stack registers for them."""

from __future__ import annotations

import math

import torch

from tfcalc.model.rope_scaling import scaled_tables


def rope_tables(theta: float, rope_dim: int, length: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of shape (length, rope_dim), rotate-half layout (Su et al. 2021, eq. 34), for rotary
    base ``theta``. With partial rotary (GPT-NeoX's rotary_pct) the frequencies are those of a
    rope_dim-wide head: theta^(-2i / rope_dim), as modeling_gpt_neox.py computes them."""
    half = rope_dim // 2
    inv_freq = theta ** (-torch.arange(half, device=device, dtype=torch.float32) / half)
    angles = torch.outer(torch.arange(length, device=device, dtype=torch.float32), inv_freq)
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos(), angles.sin()


def signed_sine(sin: torch.Tensor) -> torch.Tensor:
    """The sine table with rotate-half's sign folded in: (-sin₁, sin₂) over its two halves, so that
    rotate_half(x)·sin = swap(x)·signed_sine(sin), swap(x) = (x₂, x₁) (see rotate)."""
    half = sin.shape[-1] // 2
    return torch.cat([-sin[..., :half], sin[..., half:]], dim=-1)


def rotate(x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, in_place: bool = False) -> torch.Tensor:
    """RoPE in the rotate-half layout with the sign already in the sine table (signed_sine): x·cos +
    (x₂, x₁)·sin_signed, which is x·cos + rotate_half(x)·sin (Su et al. 2021, eq. 34; modeling_llama.py's
    apply_rotary_pos_emb) with the negation moved from every step's activations into the table. Three
    kernels, the halves swapped by one flip: a decode step's rotation is latency-bound, about 2.4 us a kernel
    on an H100 whatever the width, and rotate_half's neg and cat made it five (benchmarks/decode_profile.py).
    The product and the sum round once (addcmul), where x·cos + rotated·sin rounds each product: at most an
    ulp apart in bf16. ``in_place``: the result written over x (a decode step rotates Q and K where the
    projection wrote them, so that K stays next to V for the state's one write: layers.Attention); the
    products are taken before the write, so nothing is read after it is overwritten."""
    r = cos.shape[-1]
    if r < x.shape[-1]:
        if in_place:
            rotate(x[..., :r], cos, sin_signed, in_place=True)
            return x
        return torch.cat([rotate(x[..., :r], cos, sin_signed), x[..., r:]], dim=-1)
    swapped = x.unflatten(-1, (2, r // 2)).flip(-2).flatten(-2)  # (x₂, x₁): one copy, any strides
    return torch.addcmul(x * cos, swapped, sin_signed, out=x if in_place else None)


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: (B, T, nh, hs); cos, sin: (T, 1, r) with r <= hs: the first r channels rotate, the rest pass.
    Heads second to last, as the Linear lays them out: the result keeps that layout even when it is
    concatenated (partial rotary), so attention's output needs no copy to merge the heads again. The
    stack's tables keep their sine signed already (position_buffers), and its layers call rotate."""
    return rotate(x, cos, signed_sine(sin))


def sinusoid_table(length: int, d_model: int, device=None) -> torch.Tensor:
    """Vaswani et al. 2017, sec. 3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    inv_freq = 10000.0 ** (-torch.arange(0, d_model, 2, device=device, dtype=torch.float32) / d_model)
    table = torch.empty(length, d_model, device=device)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table


def alibi_slopes(n_head: int, device=None) -> torch.Tensor:
    """Press et al. 2022, sec. 3: geometric slopes 2^(-8/n), ...; for n not a power of two, the slopes
    of the next lower power of two followed by every other slope of the next higher one."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]

    lower = 2 ** math.floor(math.log2(n_head))
    slopes = power_of_two(lower) + power_of_two(2 * lower)[0::2][: n_head - lower]
    return torch.tensor(slopes, device=device, dtype=torch.float32)


def alibi_bias(slopes: torch.Tensor, T: int, causal: bool, dtype: torch.dtype) -> torch.Tensor:
    """ALiBi's additive bias (nh, T, T) from its slopes (nh,): -slope·(i - j) on the keys a decoder's query
    sees and -inf after it; in an encoder symmetric, -slope·|i - j|, as bidirectional ALiBi models use."""
    pos = torch.arange(T, device=slopes.device)
    distance = (pos[None, :] - pos[:, None]).to(torch.float32)  # j - i, <= 0 where allowed
    if not causal:
        return (slopes.float()[:, None, None] * -distance.abs()).to(dtype)
    bias = slopes.float()[:, None, None] * distance
    return bias.masked_fill(distance > 0, float("-inf")).to(dtype)


def relative_buckets(q_len: int, k_len: int, bidirectional: bool, n_buckets: int, max_distance: int,
                     device=None) -> torch.Tensor:
    """T5's bucket of each (query, key) pair, (q_len, k_len) long (Raffel et al. 2020, sec. 2.1; the code
    of modeling_t5.py, T5Attention._relative_position_bucket). Bidirectional: half the buckets for keys
    after the query. Within a direction, distances below half the buckets get one bucket each, the rest
    log-spaced up to max_distance, beyond which all share the last bucket."""
    relative = torch.arange(k_len, device=device)[None, :] - torch.arange(q_len, device=device)[:, None]
    buckets = torch.zeros_like(relative)
    if bidirectional:
        n_buckets //= 2
        buckets += (relative > 0).long() * n_buckets
        relative = relative.abs()
    else:
        relative = -torch.clamp(relative, max=0)
    exact = n_buckets // 2
    is_small = relative < exact
    large = exact + (
        torch.log(relative.float() / exact) / math.log(max_distance / exact) * (n_buckets - exact)
    ).long()
    large = torch.clamp(large, max=n_buckets - 1)
    return buckets + torch.where(is_small, relative, large)


def relative_bias(table, T: int, causal: bool, max_distance: int, dtype: torch.dtype) -> torch.Tensor:
    """T5's position bias (nh, T, T) from its (buckets, nh) table (an nn.Embedding), with -inf above the
    diagonal in a decoder (modeling_t5.py, compute_bias)."""
    device = table.weight.device
    if device.type == "meta":  # no values to bucket: a lookup of the right shape stands in
        buckets = torch.zeros(T, T, dtype=torch.long, device=device)
    else:
        buckets = relative_buckets(T, T, not causal, table.num_embeddings, max_distance, device)
    bias = table(buckets).permute(2, 0, 1)  # (T, T, nh) -> (nh, T, T)
    if causal:
        bias = bias.masked_fill(torch.ones(T, T, dtype=torch.bool, device=device).triu(1), float("-inf"))
    return bias.to(dtype)


def rope_key(theta: float, rotated: int, scaling=None) -> tuple:
    """What tells one rotary table from another: (base, rotated channels), and its scaling where the layer
    has one (tfcalc.architecture.rope; each mixer module gives its own key, tfcalc.model.mixers)."""
    return (theta, rotated) if scaling is None else (theta, rotated, scaling)


def rope_buffer_names(j: int) -> tuple[str, str]:
    """Buffer names of a stack's j-th distinct rotary table (j = 0 keeps the one-base names)."""
    return ("rope_cos", "rope_sin") if j == 0 else (f"rope_cos_{j}", f"rope_sin_{j}")


def position_buffers(positions: str, length: int, d_model: int, n_head: int,
                     ropes: list[tuple[float, int]], device) -> dict[str, torch.Tensor]:
    """The tables a stack reads, by buffer name: one RoPE cos and signed sine (signed_sine) pair per
    distinct (base, rotated channels, scaling) of its layers (Gemma 3's local base and its global base,
    scaled), the sinusoid table, or ALiBi's slopes (``n_head``). ``length``: the positions the tables
    cover (max_seq_len). On meta, only their shapes: torch.arange on meta goes through torch._refs and
    imports torch._dynamo (seconds), for tables that init_weights() computes anyway once the model has storage."""
    meta = torch.device(device).type == "meta"
    out: dict[str, torch.Tensor] = {}
    for j, (theta, rope_dim, *scaling) in enumerate(ropes):
        names = rope_buffer_names(j)
        if meta:
            tables = [torch.empty(length, rope_dim, device=device)] * 2
        elif scaling and scaling[0] is not None:  # YaRN, linear, llama3 (tfcalc.model.rope_scaling)
            tables = scaled_tables(theta, rope_dim, length, scaling[0], device)
        else:
            tables = rope_tables(theta, rope_dim, length, device)
        if not meta:  # the sine signed once here, not in every layer's step (rotate)
            tables = (tables[0], signed_sine(tables[1]))
        out.update(zip(names, tables, strict=True))
    if positions == "sinusoidal":
        out["pos_table"] = torch.empty(length, d_model, device=device) if meta else sinusoid_table(length, d_model,
                                                                                                   device)
    if positions == "alibi":
        out["alibi"] = torch.empty(n_head, device=device) if meta else alibi_slopes(n_head, device)
    return out
