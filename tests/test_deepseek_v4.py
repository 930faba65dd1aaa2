"""DeepSeek-V4's compressed attention (tfcalc.architecture.compressed_attention, tfcalc.model.compressed_attention)
against transformers 5.24's DeepseekV4Attention (modeling_deepseek_v4.py), layer by layer: parameters to the one
(tiny and at V4-Flash's size on meta), outputs (fp32), FlopCounterMode on transformers' module at two lengths, a
prompt and decode steps over tfcalc's fixed-shape state equal to the whole-sequence forward, and the state's bytes
against what transformers' cache holds after the same prompt."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.architecture.compressed_attention import CompressedAttention as Spec, entries_seen
from tfcalc.architecture.mixer import state_by_dtype
from tfcalc.errors import InputError
from tfcalc.model.compressed_attention import CompressedAttention

transformers = pytest.importorskip("transformers")
from transformers import DeepseekV4Config  # noqa: E402
from transformers.cache_utils import DynamicCache  # noqa: E402
from transformers.models.deepseek_v4 import modeling_deepseek_v4 as hf_v4  # noqa: E402

TYPES = ("sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention")
KIND = dict(zip(TYPES, ("none", "csa", "hca"), strict=True))
# 16 indexer heads: with few heads of random weights, every head's ReLU at 0 gives a score of exactly 0 for some
# entries, and the top-k among tied scores is torch.topk's choice, which differs between a prompt's span and a step's
TINY = dict(vocab_size=64, hidden_size=32, moe_intermediate_size=16, num_hidden_layers=3, num_attention_heads=4,
            head_dim=16, q_lora_rank=12, partial_rotary_factor=0.5, n_routed_experts=4, num_experts_per_tok=2,
            sliding_window=8, o_groups=2, o_lora_rank=6, index_n_heads=16, index_head_dim=8, index_topk=3,
            layer_types=list(TYPES),
            compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8})


def spec_of(cfg, i: int) -> Spec:
    """The component of layer i of a DeepseekV4Config, read by hand (the family mapper is tested apart)."""
    kind = KIND[cfg.layer_types[i]]
    ratio = 1 if kind == "none" else cfg.compress_rates[cfg.layer_types[i]]
    return Spec(cfg.hidden_size, cfg.num_attention_heads, cfg.head_dim, cfg.qk_rope_head_dim, cfg.q_lora_rank,
                cfg.o_groups, cfg.o_lora_rank, cfg.sliding_window, kind, ratio, cfg.index_n_heads, cfg.index_head_dim,
                cfg.index_topk, cfg.rope_theta, cfg.compress_rope_theta, None, cfg.rms_norm_eps)


def tiny_cfg() -> DeepseekV4Config:
    cfg = DeepseekV4Config(**TINY)
    cfg._attn_implementation = "eager"
    return cfg


def pair(cfg, i: int, seed: int = 0):
    """transformers' attention of layer i, every tensor N(0, 0.3²), and tfcalc's module loading its state dict
    strictly (the names are transformers')."""
    torch.manual_seed(seed)
    hf = hf_v4.DeepseekV4Attention(cfg, i).eval()
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn_like(p) * 0.3)
    mine = CompressedAttention(spec_of(cfg, i))
    mine.load_state_dict(hf.state_dict(), strict=True)
    return hf, mine


def hf_forward(cfg, hf, x: torch.Tensor, cache=None) -> torch.Tensor:
    """transformers' attention over a prompt x (B, T, d) at positions 0 .. T - 1, under the sliding-window mask."""
    B, T, _ = x.shape
    pos = torch.arange(T)[None].expand(B, T)
    rot = hf_v4.DeepseekV4RotaryEmbedding(cfg)
    pe = {t: rot(x, pos, t) for t in ("main", "compress")}
    q, k = torch.arange(T)[:, None], torch.arange(T)[None]
    seen = (k <= q) & (k > q - cfg.sliding_window)
    mask = torch.zeros(T, T).masked_fill(~seen, float("-inf"))[None, None].expand(B, 1, T, T)
    with torch.no_grad():
        return hf(x, pe, pos, mask, cache=cache)[0]


@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_parameters_tiny(i):
    cfg = tiny_cfg()
    hf = hf_v4.DeepseekV4Attention(cfg, i)
    assert sum(w.numel for w in spec_of(cfg, i).weights()) == sum(p.numel() for p in hf.parameters())
    assert sum(p.numel() for p in CompressedAttention(spec_of(cfg, i)).parameters()) == sum(
        p.numel() for p in hf.parameters())


@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_parameters_v4_flash_size(i):
    """DeepseekV4Config's defaults (V4-Flash's sizes: hidden 4096, 64 heads of 512, q_lora_rank 1024, 8 groups of
    1024, 64 indexer heads of 128), transformers' module on meta."""
    cfg = DeepseekV4Config(num_hidden_layers=3, layer_types=list(TYPES))
    with torch.device("meta"):
        hf = hf_v4.DeepseekV4Attention(cfg, i)
    assert sum(w.numel for w in spec_of(cfg, i).weights()) == sum(p.numel() for p in hf.parameters())


@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_outputs_equal_transformers(i):
    cfg = tiny_cfg()
    hf, mine = pair(cfg, i)
    x = torch.randn(2, 37, cfg.hidden_size)  # 9 CSA windows and one open, 4 HCA windows and one open
    want = hf_forward(cfg, hf, x)
    with torch.no_grad():
        got = mine(x)
    assert (want - got).abs().max() <= 1e-5 * want.abs().max()


def counted(spec: Spec, T: int) -> int:
    linears = sum(2 * T * m.n_in * m.n_out * m.count for m in spec.linears())
    return linears + sum(m.flops for m in spec.mixing(T, T))


@pytest.mark.parametrize("T", [20, 37])
@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_flops_equal_flopcountermode(i, T):
    """Projections and the full-square attention and indexer scores, against FlopCounterMode on transformers'
    eager module (which counts the matmuls only: the pooling, the head sum and the softmax are not matmuls)."""
    cfg = tiny_cfg()
    hf, mine = pair(cfg, i)
    x = torch.randn(1, T, cfg.hidden_size)
    with FlopCounterMode(display=False) as c:
        hf_forward(cfg, hf, x)
    assert counted(spec_of(cfg, i), T) == c.get_total_flops()
    with FlopCounterMode(display=False) as c, torch.no_grad():
        mine(x)
    assert counted(spec_of(cfg, i), T) == c.get_total_flops()


@pytest.mark.parametrize("i", range(3), ids=TYPES)
@pytest.mark.parametrize("prompt", [3, 20, 23])
def test_prompt_and_steps_equal_the_forward(i, prompt):
    """A prompt into the state, then one token a step to 37: each step's output equals the whole-sequence forward's
    at that position (windows closing inside the steps, the ring wrapping, CSA's overlap carried)."""
    cfg = tiny_cfg()
    _, mine = pair(cfg, i)
    x = torch.randn(2, 37, cfg.hidden_size)
    state = mine.new_state(2, 40, "cpu", torch.float32)
    with torch.no_grad():
        full = mine(x)
        outs = [mine(x[:, :prompt], store=state.prefill({}))]
        outs += [mine(x[:, t:t + 1], store=state.step({}, 40)) for t in range(prompt, 37)]
    assert (torch.cat(outs, dim=1) - full).abs().max() <= 1e-5 * full.abs().max()


def hf_layer_bytes(layer) -> int:
    """Bytes of one transformers DeepSeek-V4 cache layer: K (= V, one storage), and the compressor's dicts."""
    tensors = [layer.keys]
    for name in ("compressed_kv", "buffer_kv", "buffer_gate", "overlap_kv", "overlap_gate"):
        tensors += [t for t in getattr(layer, name, {}).values() if t is not None]
    return sum(t.numel() * t.element_size() for t in tensors)


@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_state_bytes_against_transformers_cache(i):
    """After a prompt of 32 tokens (whole windows: transformers' open-window buffers empty), tfcalc's state is
    transformers' cache plus what it names: one ring slot more (W against W - 1) and the open window's raw C and Z
    (m slots each, c·h wide; the indexer's 2·D_i); and the count (``state``) is the bytes allocated."""
    cfg = tiny_cfg()
    hf, mine = pair(cfg, i)
    T, spec = 32, spec_of(cfg, i)
    cache = DynamicCache(config=cfg)
    hf_forward(cfg, hf, torch.randn(1, T, cfg.hidden_size), cache=cache)
    state = mine.new_state(1, T, "cpu", torch.float32)
    h, m = spec.head_dim, spec.ratio
    named = h + (2 * m * spec.series * h if spec.compressed else 0) + (2 * m * 2 * spec.index_head_dim
                                                                        if spec.sparse else 0)
    assert state.nbytes == hf_layer_bytes(cache.layers[i]) + 4 * named
    assert state.nbytes == 4 * sum(state_by_dtype(spec, T).values())


def test_entries_seen_by_hand():
    for T, keys, m, k in [(1, 1, 4, 3), (7, 30, 4, 3), (30, 30, 4, 1), (3, 100, 8, None), (64, 64, 4, 5)]:
        want = sum(min(k or keys, (p + 1) // m) for p in range(keys - T, keys))
        assert entries_seen(T, keys, m, k) == want


@pytest.mark.parametrize("change, words", [
    (dict(o_groups=3), "o_groups"), (dict(ratio=0), "ratio"), (dict(compression="xyz"), "compression"),
    (dict(rope_dim=7), "qk_rope_head_dim"), (dict(window=True), "window"), (dict(index_head_dim=4), "index_head_dim"),
])
def test_hostile_component(change, words):
    args = dict(d_model=32, n_head=4, head_dim=16, rope_dim=8, q_lora_rank=12, o_groups=2, o_lora_rank=6, window=8,
                compression="csa", ratio=4, index_n_heads=4, index_head_dim=8, index_topk=3)
    with pytest.raises(InputError, match=words):
        Spec(**{**args, **change})


@pytest.mark.parametrize("T", [3, 16, 37])
@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_saved_activations_against_autograd(i, T):
    """``saved`` (bytes per token, its per-sequence compressor term rounded up to a whole byte a token) against
    what autograd packs for tfcalc's module in fp32 (hf_pairs.saved_bytes): exact but for that rounding."""
    from hf_pairs import saved_bytes

    cfg = tiny_cfg()
    _, mine = pair(cfg, i)
    got = saved_bytes(mine, torch.randn(1, T, cfg.hidden_size, requires_grad=True))
    counted = T * sum(spec_of(cfg, i).saved(1, T, 4, "math", False).values())
    assert 0 <= counted - got < T


@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_state_at_4096_tokens_at_v4_flash_size_against_transformers_cache(i):
    """DeepseekV4Config's V4-Flash sizes, bf16, transformers' attention on meta over 4,096 tokens with its
    DynamicCache: tfcalc's counted state (``state``, each tensor in its dtype) = transformers' cache + the named
    differences: one ring slot more (W against W - 1), the open window's raw C and Z (m slots of c·h each, the
    indexer's m of 2·D_i; transformers' buffers are empty at a multiple of m), and CSA's previous-window gate kept
    raw in bf16 where transformers keeps it in fp32 with the position bias added (m·h and m·D_i elements, 2 bytes
    fewer each)."""
    cfg = DeepseekV4Config(num_hidden_layers=3, layer_types=list(TYPES))
    cfg._attn_implementation = "eager"
    T, spec = 4096, spec_of(cfg, i)
    with torch.device("meta"):
        hf = hf_v4.DeepseekV4Attention(cfg, i).to(torch.bfloat16)
        for name, p in hf.named_parameters():  # transformers keeps these in fp32 (_keep_in_fp32_modules_strict)
            if any(k in name for k in ("position_bias", "norm", "sinks")):
                p.data = p.data.float()
        x = torch.empty(1, T, cfg.hidden_size, dtype=torch.bfloat16)
        pos = torch.arange(T)[None]
        rot = hf_v4.DeepseekV4RotaryEmbedding(cfg)
        cache = DynamicCache(config=cfg)
        hf(x, {t: rot(x, pos, t) for t in ("main", "compress")}, pos,
           torch.empty(1, 1, T, T, dtype=torch.bfloat16), cache=cache)
    counted = sum(n * (2 if dtype in (None, "model") else 4) for dtype, n in state_by_dtype(spec, T).items())
    h, m, c, Di = spec.head_dim, spec.ratio, spec.series, spec.index_head_dim
    named = h + (2 * m * c * h if spec.compressed else 0)
    if spec.sparse:
        named += 2 * m * 2 * Di - (m * h + m * Di)  # the indexer's open window; the fp32 gates' extra 2 bytes
    assert counted == hf_layer_bytes(cache.layers[i]) + 2 * named


@pytest.mark.parametrize("T", [2048, 4096])
@pytest.mark.parametrize("i", range(3), ids=TYPES)
def test_flops_at_v4_flash_size_equal_flopcountermode_on_meta(i, T):
    """V4-Flash's sizes (DeepseekV4Config's defaults: 64 heads of 512, 64 indexer heads of 128, top-512), transformers'
    eager attention on meta: the projections and the full-square scores counted = FlopCounterMode's."""
    cfg = DeepseekV4Config(num_hidden_layers=3, layer_types=list(TYPES))
    cfg._attn_implementation = "eager"
    with torch.device("meta"):
        hf = hf_v4.DeepseekV4Attention(cfg, i)
        x = torch.empty(1, T, cfg.hidden_size)
        pos = torch.arange(T)[None]
        rot = hf_v4.DeepseekV4RotaryEmbedding(cfg)
        with FlopCounterMode(display=False) as c:
            hf(x, {t: rot(x, pos, t) for t in ("main", "compress")}, pos, torch.empty(1, 1, T, T))
    assert counted(spec_of(cfg, i), T) == c.get_total_flops()
