"""Latent attention's absorbed decode step, op by op (issue 29): its eager traffic and its non-matmul work as
the count describes them (``LatentAttention.eager_ops(tokens, step=True)``, ``elementwise(..., step=True)``)
against every aten op the real step runs, recorded by a TorchDispatchMode over the latent module's forward in
a decode step of a tiny DeepSeek-shaped model (CPU; no_grad, so composite ops show their parts, as in
tests/count/test_eager_traffic.py, whose byte rules these are).

Bytes of an op: the distinct elements of each tensor it takes or returns × the item size; views move nothing;
matmuls and the attention kernel are left out (SDPA is timed apart: its ops, decomposed on a CPU, are
excluded by switching the recorder off around it). The one rule of this file: the indexed write into the
state (a scatter_, or an index_put_) reads its source and writes as many elements (the dispatcher lists the
whole buffer as its ``self``; the slots it does not touch are neither read nor written); its int64 slot
indices, a few bytes a token, are left out (stated, as tfcalc.count.perf.eager leaves out a mixture's index
work). The norms' weight vectors (c and c_q elements), read once whatever the tokens, are left out by the
count's convention (tfcalc.count.perf.eager) and added to it here by hand."""

from __future__ import annotations

import math

import pytest
import torch
from conftest import tiny
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from tfcalc.count.model.non_matmul import non_matmul_entries
from tfcalc.count.perf import eager
from tfcalc.model import build_model, latent_absorbed
from tfcalc.model.latent import LatentAttention

MATMULS = {"mm", "addmm", "bmm", "baddbmm", "linear"}
VIEWS = {"detach", "_unsafe_view", "_reshape_alias", "alias"}
LATENT = dict(pos_encoding="rope", norm="rmsnorm", norm_bias=False, gated_ffn=True, activation="silu",
              tie_embeddings=False, kv_lora_rank=12, qk_nope_head_dim=8, qk_rope_head_dim=4, v_head_dim=6, n_head=4,
              n_layer=1)
KINDS = {"v3-like": dict(LATENT, q_lora_rank=16), "v2-lite-like": dict(LATENT, rope_interleave=False),
         "longcat-like": dict(LATENT, q_lora_rank=16, mla_lora_scale=True)}  # two more products (LongCat-Flash)


def _moved(t: torch.Tensor) -> int:
    return math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride != 0) * t.element_size()


class StepTraffic(TorchDispatchMode):
    """Bytes, kernels and output elements of every non-matmul, non-attention, non-view op while ``on``."""

    def __init__(self):
        super().__init__()
        self.on, self.bytes, self.kernels, self.ops = False, 0, 0, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if not self.on or func.is_view or name in MATMULS or name in VIEWS:
            return out
        source = {"scatter_": 3, "index_put_": 2}.get(name)  # an indexed write into the state
        if source is not None:  # its source read, as many elements written (the module docstring)
            moved = 2 * _moved(args[source])
        else:
            moved = sum(_moved(t) for t in tree_flatten((args, kwargs, out))[0] if isinstance(t, torch.Tensor))
        self.bytes += moved
        self.kernels += 1
        self.ops.append(("write" if source is not None else name,
                         math.prod(out.shape) if source is None else args[source].numel()))
        return out


def _record(cfg, batch: int, dtype: torch.dtype, monkeypatch) -> StepTraffic:
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", dtype)
    mode = StepTraffic()
    for m in model.modules():
        if isinstance(m, LatentAttention):
            m.register_forward_pre_hook(lambda *_: setattr(mode, "on", True))
            m.register_forward_hook(lambda *_: setattr(mode, "on", False))
    sdpa = latent_absorbed.F.scaled_dot_product_attention

    def attention_kernel(*args, **kwargs):  # not eager traffic: the attention kernel's own
        mode.on = False
        try:
            return sdpa(*args, **kwargs)
        finally:
            mode.on = True

    monkeypatch.setattr(latent_absorbed.F, "scaled_dot_product_attention", attention_kernel)
    cache = model.new_cache(batch, 40)
    with torch.no_grad():
        model.prefill(torch.randint(0, cfg.vocab_size, (batch, 20)), cache)
        with mode:
            model.decode(torch.zeros(batch, 1, dtype=torch.long), cache)
    return mode


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("kind", list(KINDS))
def test_the_absorbed_step_moves_what_its_eager_ops_say(kind, batch, dtype, monkeypatch):
    """Every byte and kernel of the step's eager ops, exactly: bytes per token are not enough, since at one
    token the output heads need no copy (a view) and at three they do."""
    cfg = tiny(max_seq_len=40, **KINDS[kind])
    recorded = _record(cfg, batch, dtype, monkeypatch)
    spec = next(b for b, _ in cfg.architecture.output.kinds()).mixer
    a = torch.finfo(dtype).bits // 8
    terms = eager.mixer_terms(spec.eager_ops(batch, step=True), a)
    weights = a * (spec.kv_lora_rank + (spec.q_lora_rank or 0))  # the norms' weight vectors, once
    assert (recorded.bytes, recorded.kernels) == (sum(t.forward for t in terms) + weights,
                                                  sum(t.forward_kernels for t in terms))


@pytest.mark.parametrize("kind", list(KINDS))
def test_the_step_non_matmul_entries_name_the_ops_it_runs(kind, monkeypatch):
    """The fused count of the decode step (non_matmul_entries(step=True), what the decode overhead prices) over
    the latent layer, at batch 1 (where the output heads need no copy: the count, per sequence, leaves that
    copy out): its copies are the recorded cats and scatter, element for element; its RoPE the elements the
    recorded rotations write (Q's H heads and ONE key head); its norms the latents'."""
    cfg = tiny(max_seq_len=40, **KINDS[kind])
    batch = 1
    recorded = _record(cfg, batch, torch.float32, monkeypatch)
    spec = next(b for b, _ in cfg.architecture.output.kinds()).mixer
    H, hr, c, hv = spec.n_head, spec.qk_rope_head_dim, spec.kv_lora_rank, spec.v_head_dim
    entries = [e for e in non_matmul_entries(cfg, batch, 1, step=True) if e.component in ("mixer", "rope", "norms")]
    copies = sorted(e.elements * e.copies for e in entries if e.component == "mixer" and "scaled" not in e.label)
    scaled = [e.elements for e in entries if "scaled" in e.label]  # LongCat's two products: Q's and the latent's
    assert scaled == ([batch * (spec.q_width + c)] if spec.lora_scale else [])
    moved = [n for name, n in recorded.ops if name in ("cat", "write", "clone")]
    assert sorted(moved) == sorted(copies)  # the step's copies; RoPE's swap of the halves is a flip (below)
    rope = next(e for e in entries if e.component == "rope")
    # the rotation (positions.rotate) of Q's H heads and of the ONE key head: a flip and an addcmul each
    assert sorted(n for name, n in recorded.ops if name == "flip") == [batch * hr, batch * H * hr]
    assert rope.elements == batch * (H + 1) * hr == sum(n for name, n in recorded.ops if name == "addcmul")
    norms = {e.label: e.elements for e in non_matmul_entries(cfg, batch, 1, step=True) if "latent norm" in e.label}
    widths = [n // batch for name, n in recorded.ops if name == "pow"][:1 if spec.q_lora_rank is None else 2]
    assert sorted(norms.values()) == sorted(batch * w for w in widths) and c * batch in norms.values()
    assert "clone" not in {name for name, _ in recorded.ops} and batch * H * hv not in copies
