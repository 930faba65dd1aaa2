"""torchtitan's ring attention (``--kernels compile``; tfcalc.count.training.context_parallel, step 7; issue 31):
the bytes its collectives send, its per-rank attention work and its traced order measured on PyTorch's own ring on
gloo ranks (tests/ring_ranks.py), the fused merge's traffic measured on torch's _SDPAMerger, the K/V heads and
the exposure by hand, and what --json, the step table and --overlap cp say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

import tfcalc
from tfcalc.count.training import context_parallel as cp
from tfcalc.count.training.layout import Layout
from tfcalc.errors import InputError
from tfcalc.presets import load

ROOT = Path(__file__).resolve().parents[2]
PER_RANK, HEADS, D_HEAD = 32, 4, 16  # tests/ring_ranks.py's shapes: K and V at the query heads, as torchtitan's
TINY = ["n_layer=1", "d_model=64", f"n_head={HEADS}", "n_kv_head=1", f"d_head={D_HEAD}", "d_ff=128", "vocab_size=128"]


@pytest.fixture(scope="module", params=[2, 4])
def measured(request, tmp_path_factory):
    C = request.param
    out = tmp_path_factory.mktemp(f"ring{C}") / "rank"
    subprocess.run([sys.executable, str(ROOT / "tests" / "ring_ranks.py"), str(C), str(out)], check=True,
                   timeout=300, cwd=ROOT)
    return C, [json.loads(Path(f"{out}.{r}").read_text()) for r in range(C)]


def tiny_layout(C: int, **over) -> Layout:
    return Layout(**dict(dict(dp=1, cp=C, seq=PER_RANK * C, global_batch=1, micro_batch=1, recompute="none",
                              kernels="compile"), **over))


def test_the_ring_sends_what_step_7_counts(measured):
    """Per rank and layer: the forward's all-gather hands over the rank's K/V (16-bit), which reach the C − 1
    others; the backward's all-gather the same, and C permutes of dK, dV in fp32. kv_ring's bytes for one layer
    of that shape (K/V repeated to the 4 query heads from 1 KV head) are their sum."""
    C, ranks = measured
    cfg = load("llama3-8b", TINY)
    bytes_, _ = cp.kv_ring(cfg, tiny_layout(C), 0)
    for r in ranks:
        assert set(r["forward"]) == {"_c10d_functional::all_gather_into_tensor"}
        assert set(r["backward"]) == {"_c10d_functional::all_gather_into_tensor", "_c10d_functional::all_to_all_single"}
        sent = ((C - 1) * (r["forward"]["_c10d_functional::all_gather_into_tensor"]
                           + r["backward"]["_c10d_functional::all_gather_into_tensor"])
                + r["backward"]["_c10d_functional::all_to_all_single"])
        assert sent == bytes_
        assert r["backward"]["_c10d_functional::all_to_all_single"] == C * 2 * r["kv_bytes"]  # fp32, C times


def test_each_rank_computes_its_share_of_the_causal_pairs(measured):
    """Load balancing on by default: every rank's kernels cover (s²/2) / C query-key pairs (a causal square
    counted half), forward and backward alike -- step 1's share, whatever the rank."""
    C, ranks = measured
    s = PER_RANK * C
    for r in ranks:
        assert r["load_balance"] is True
        for kernels in (r["forward_kernels"], r["backward_kernels"]):
            assert len(kernels) == C
            assert sum(q * k / (2 if causal else 1) for q, k, causal in kernels) == s * s / 2 / C


def test_traced_the_all_gather_is_waited_for_before_any_attention(measured):
    """Step 7: traced (make_fx, as torch.compile traces the block), the functional all-gather is followed at
    once by its wait, ahead of the first attention kernel: nothing runs under the transfer."""
    _, ranks = measured
    ops = ranks[0]["traced"]
    gather = ops.index("_c10d_functional.all_gather_into_tensor.default")
    assert ops[gather + 1] == "_c10d_functional.wait_tensor.default"
    assert gather < ops.index("aten._scaled_dot_product_flash_attention_for_cpu.default")


class Distinct(TorchDispatchMode):
    """The tensors an op sequence reads that it did not make: what one fused kernel must read."""

    def __init__(self):
        super().__init__()
        self.made, self.read = set(), {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for x in list(args) + list((kwargs or {}).values()):
            for t in (x if isinstance(x, (list, tuple)) else [x]):
                if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in self.made:
                    self.read[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        for t in (out if isinstance(out, (list, tuple)) else [out]):
            if isinstance(t, torch.Tensor):
                self.made.add(t.untyped_storage().data_ptr())
        return out


def test_a_fused_merge_step_reads_and_writes_10_bytes_an_element():
    """Step 7's fused merge: torch's _SDPAMerger.step reads the running fp32 output and the block's 16-bit one
    (and two log-sum-exp rows) and leaves an fp32 output: one pass over those is 10 bytes an element, the
    log-sum-exp's under half a byte at d_head 128."""
    from torch.distributed.tensor.experimental._context_parallel._attention import _SDPAMerger

    B, H, S, D = 1, 4, 512, 128  # (B, nh, T, hs)
    m = _SDPAMerger(True, seq_dim=2)
    m.step(torch.randn(B, H, S, D, dtype=torch.bfloat16), torch.randn(B, H, S), False)
    out, lse = torch.randn(B, H, S, D, dtype=torch.bfloat16), torch.randn(B, H, S)
    with Distinct() as d:
        m.step(out, lse, False)
    one_pass = sum(d.read.values()) + m._out.untyped_storage().nbytes() + m._lse.untyped_storage().nbytes()
    n = B * H * S * D
    assert 0 <= one_pass - cp.FUSED_MERGE_BYTES * n <= 3 * 4 * B * H * S


def test_ring_width_repeats_kv_to_the_query_heads_only_under_torchtitans_ring():
    cfg = load("llama3-8b", ["n_layer=2"])
    ((_, block, _),) = cfg.architecture.kinds()
    assert cp.ring_width(block, tiny_layout(2)) == 2 * 32 * 128  # Llama 3 8B: 32 query heads of 128
    assert cp.ring_width(block, tiny_layout(2, kernels="fused")) == cp.kv_width(block) == 2 * 8 * 128


def test_kv_ring_by_hand():
    """Llama 3 8B, 2 layers, seq 8,192 over C = 4, full recompute, one micro-batch: 2,048 positions a rank.
    Megatron's ring (no compile): K/V of 8 heads, 16-bit, (1 + 1 + 2)(C − 1) passes. torchtitan's: 32 heads,
    (1 + 1 + 1)(C − 1) passes in 16 bits and C gradient passes in fp32."""
    cfg = load("llama3-8b", ["n_layer=2"])
    L = tiny_layout(4, seq=8192, recompute="full")
    gqa = 2 * 2048 * 2 * 8 * 128  # elements: layers × positions × (K + V) × heads × d_head
    assert cp.kv_ring(cfg, Layout(**{**L.__dict__, "kernels": "fused"}), 0) == (gqa * 2 * 4 * 3, 2 * 4 * 3)
    assert cp.kv_ring(cfg, L, 0) == (4 * gqa * (2 * 3 * 3 + 4 * 4), 2 * (3 * 3 + 4))


def _plan(**over):
    args = dict(dp=1, cp=8, zero=3, global_batch=1, micro_batch=1, seq=262144, recompute="full", max_seq_len=262144,
                device_spec="h100-sxm", kernels="compile")
    return tfcalc.plan("llama3-8b", **{**args, **over}).to_dict()["step"]


def test_the_traced_rings_transfers_are_exposed_in_the_json():
    traced = _plan()
    assert traced["exposed_comm_s"]["cp"] == pytest.approx(traced["comm_s"]["cp"]) and traced["comm_s"]["cp"] > 0
    assert _plan(overlap=("cp",))["exposed_comm_s"]["cp"] == 0.0  # behind attention, which outlasts them
    assert _plan(kernels="fused")["exposed_comm_s"]["cp"] == 0.0
    assert traced["overlap_s"] > _plan(overlap=("cp",))["overlap_s"]


def test_the_step_table_says_the_ring_is_not_hidden(cli):
    base = ["plan", "llama3-8b", "--dp", "1", "--cp", "2", "--zero", "3", "--global-batch", "1", "--seq", "8192",
            "--kernels", "compile"]
    r = cli(*base)
    assert r.code == 0, r.err
    assert "CP ring (traced by torch.compile) not" in " ".join(r.out.split())
    assert "CP ring behind attention" in " ".join(cli(*base, "--overlap", "cp").out.split())


def test_overlap_cp_without_cp_is_one_line():
    with pytest.raises(InputError, match="overlap cp hides the context-parallel ring's transfers: it needs cp > 1"):
        tfcalc.plan("llama3-8b", dp=8, zero=3, global_batch=8, seq=4096, overlap=("cp",), device_spec="h100-sxm")


def test_overlap_cp_without_cp_is_one_line_on_the_cli(cli):
    r = cli("plan", "llama3-8b", "--dp", "8", "--zero", "3", "--global-batch", "8", "--overlap", "cp")
    assert r.code != 0 and "--overlap cp" in r.err and "--cp > 1" in r.err and "Traceback" not in r.err
