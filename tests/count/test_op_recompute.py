"""--recompute op (tfcalc.count.model.op_recompute): the bytes torchtitan's op-level SAC policy keeps, checked against
what PyTorch's selective checkpointing really caches on tfcalc's module; its extra FLOPs by hand; --compute-dtype
fp8 and --offload (tfcalc.count.training.fp8, tfcalc.count.training.offload) by hand."""

import pytest
import torch
from conftest import tiny
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

from tfcalc.count.model.activations import activations
from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.workload import Workload

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8, fp8_peak_flops_per_s=1979e12, pcie_bytes_per_s=64e9)
LLAMA_LIKE = dict(n_head=4, n_kv_head=2, gated_ffn=True, activation="silu", pos_encoding="rope", norm="rmsnorm",
                  norm_bias=False, attn_bias=False, ffn_bias=False, d_ff=96, tie_embeddings=False)
MM = torch.ops.aten.mm.default
SAVE = {MM, torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
        torch.ops.aten._scaled_dot_product_flash_attention.default}


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=1, dp=1, seq=4096, global_batch=8, micro_batch=1)
    fields.update(changes)
    return Layout(**fields)


def _sac_cached_bytes(cfg, batch: int, seq: int) -> int:
    """Every block under checkpoint with torchtitan's "op" policy (mm and attention outputs saved, every second
    mm recomputed, counted per block and per pass); the bytes SAC's caching mode holds after the forward pass."""
    model = build_model(cfg, "cpu", torch.float32).train()
    modes = []

    def context():
        count = {"forward": 0, "recompute": 0}

        def policy(ctx, func, *args, **kwargs):
            key = "recompute" if ctx.is_recompute else "forward"
            count[key] += func == MM
            save = func in SAVE and not (func == MM and count[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

        caching, cached = create_selective_checkpoint_contexts(policy)
        modes.append(caching)
        return caching, cached

    for block in model.blocks:
        block.forward = (lambda x, *a, f=block.forward, **k:
                         checkpoint(f, x, *a, use_reentrant=False, context_fn=context, **k))
    out = model(torch.randint(0, cfg.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0)))
    seen: dict[int, int] = {}

    def walk(v):
        if isinstance(v, (tuple, list)):
            for x in v:
                walk(x)
        elif hasattr(v, "val"):  # SAC's _VersionWrapper
            walk(v.val)
        elif isinstance(v, torch.Tensor):
            seen[v.untyped_storage().data_ptr()] = v.untyped_storage().nbytes()

    for mode in modes:
        for by_index in mode.storage.values():
            for v in by_index.values():
                walk(v)
    out.float().sum().backward()  # the policy really runs: the recompute finds what it cached
    return sum(seen.values())


@pytest.mark.parametrize("changes", [LLAMA_LIKE, dict(LLAMA_LIKE, n_kv_head=4, gated_ffn=False, activation="gelu")],
                         ids=["gqa-swiglu", "mha-gelu"])
def test_op_policy_keeps_what_pytorchs_sac_caches(changes):
    cfg = tiny(**changes)
    batch, seq = 2, 16
    acts = activations(cfg, Workload(batch=batch, seq=seq, dtype="fp32"), "flash", "op")
    (kept,) = {id(t): t for t in acts.op_terms.values()}.values()
    assert _sac_cached_bytes(cfg, batch, seq) == cfg.n_layer * sum(kept.values())
    # by hand, per token and layer: QKV e·(q+k+v), attention output e·o and fp32 log-sum-exp 4·a, FFN up
    h, f, e, q, k = cfg.d_model, 96, 4, cfg.d_model, cfg.kv_heads * cfg.d_model // cfg.n_head
    up = (2 if cfg.gated_ffn else 1) * f
    assert sum(kept.values()) == batch * seq * (e * (q + 2 * k) + e * h + 4 * cfg.n_head + e * up)


def test_op_recompute_stores_the_inputs_and_the_kept_outputs_and_runs_o_and_down_again():
    cfg = load("llama2-7b")
    op, full = (make_plan(cfg, layout(dp=8, recompute=r), H100, None) for r in ("op", "full"))
    t, h, f, a = 4096, 4096, 11008, 32
    per_layer = t * (2 * h + 2 * 3 * h + 2 * h + 4 * a + 2 * 2 * f)  # input, QKV, attention out, lse, gate|up
    # 32 blocks keep the policy's outputs beside their inputs; the block rebuilt in the backward pass reads those
    # from the policy's cache, so it adds one block's saved outputs fewer than full recompute's rebuilt block
    assert op.memory.activations - full.memory.activations == (32 - 1) * (per_layer - 2 * t * h)
    # executed FLOPs: the O and down projections once more, 2·B·T·(h·h + f·h) per layer, B = the global batch
    assert op.step.executed_flops - op.step.model_flops == 32 * 2 * 8 * t * (h * h + f * h)
    none = make_plan(cfg, layout(dp=8), H100, None)
    assert none.step.compute_s < op.step.compute_s < full.step.compute_s


@pytest.mark.parametrize("preset, changes, message", [
    ("mixtral-8x7b", {}, "mixture of experts"),
    ("gpt2", dict(seq=1024), "biases"),
    ("llama2-7b", dict(attention="math"), "math attention kernel"),
])
def test_op_recompute_refuses_what_it_does_not_model(preset, changes, message):
    with pytest.raises(InputError, match=message):
        check_layout(load(preset), layout(recompute="op", **changes))


# ---------- --compute-dtype fp8 ----------


def test_fp8_runs_the_blocks_linears_at_the_fp8_peak_and_keeps_their_casts():
    cfg = load("llama2-7b")
    bf16 = make_plan(cfg, layout(dp=8, zero=1), H100, None)
    fp8 = make_plan(cfg, layout(dp=8, zero=1, compute_dtype="fp8"), H100, None)
    assert fp8.step.model_flops == bf16.step.model_flops
    assert fp8.step.matmul_s < bf16.step.matmul_s
    # the LM head and the score products stay in bf16: the matmul time falls by less than half
    assert fp8.step.matmul_s > bf16.step.matmul_s / 2
    # per block: QKV 3h·h, O h·h, gate|up 2f·h, down h·f in FP8 and its transpose, 1 byte each; 4 linears ×
    # 3 amax histories of 1,024 fp32
    h, f = 4096, 11008
    assert fp8.memory.fp8_cache == 32 * (2 * (4 * h * h + 3 * f * h) + 4 * 3 * 1024 * 4)
    assert fp8.memory.total == bf16.memory.total + fp8.memory.fp8_cache
    assert (fp8.memory.weights, fp8.memory.optimizer) == (bf16.memory.weights, bf16.memory.optimizer)


# ---------- --offload ----------


def test_optimizer_offload_moves_the_shard_to_the_host_and_counts_its_pcie_traffic():
    cfg = load("llama2-7b")
    L = layout(dp=8, zero=1, offload_optimizer=True)
    plan, kept = make_plan(cfg, L, H100, None), make_plan(cfg, layout(dp=8, zero=1), H100, None)
    shard = -(-6_738_415_616 // 8)
    assert plan.memory.optimizer == 0 and kept.memory.optimizer == 12 * shard
    assert plan.memory.host == 12 * shard + 4 * shard  # master and moments, and the shard's fp32 gradients
    # gradients down and weights up, bf16 each, at 0.8 × 64 GB/s, not overlapped
    pcie = 4 * shard / (64e9 * 0.8)
    assert plan.step.comm_s["pcie"] == pytest.approx(pcie)
    # and the GPU's Adam step (tfcalc.count.perf.optimizer) moves to the CPU, untimed
    assert plan.step.optimizer_s == 0 and kept.step.optimizer_s > 0
    assert plan.step.overlap_s == pytest.approx(kept.step.overlap_s - kept.step.optimizer_s + pcie)


def test_activation_offload_keeps_two_blocks_and_hides_its_copies_behind_compute_when_it_can():
    cfg = load("llama2-7b")
    base = layout(dp=8, recompute="full")
    kept, off = make_plan(cfg, base, H100, None), make_plan(cfg, layout(dp=8, recompute="full",
                                                                         offload_activations=True), H100, None)
    block = 2 * 4096 * 4096  # full recompute keeps each block's input, bf16
    assert kept.memory.activations - off.memory.activations == (32 - 2) * block == off.memory.host
    assert off.step.comm_s["pcie"] == pytest.approx(2 * 32 * block / (64e9 * 0.8))  # m = 1: out and back
    assert off.step.exposed_s["pcie"] == 0.0  # 34 ms of copies behind seconds of compute


def test_hostile_offload_and_fp8():
    with pytest.raises(InputError, match="--compute-dtype must be fp8"):
        check_layout(load("llama2-7b"), layout(compute_dtype="fp16"))
    with pytest.raises(InputError, match="True or False"):
        check_layout(load("llama2-7b"), layout(offload_optimizer=1))
    assert rm.rank_offload(load("llama2-7b"), layout(), 0, 100) == rm.NO_OFFLOAD


def test_activation_offload_under_1f1b_keeps_two_blocks_of_all_the_micro_batches_in_flight():
    cfg = load("llama2-7b")
    L = layout(pp=4, dp=2, recompute="full", global_batch=16, offload_activations=True)  # 8 blocks a stage, m = 8
    block = 2 * 4096 * 4096  # full recompute keeps each block's input, bf16
    # stage 0 holds 4 micro-batches in flight: all their blocks go to the host but the 2 the GPU works on
    assert rm.rank_offload(cfg, L, 0, 0).activations_saved == 4 * 8 * block - 2 * block
    # the last stage (the rank shown: it holds the head) 1 micro-batch in flight
    plan = make_plan(cfg, L, H100, None)
    assert plan.memory.stage == 3 and plan.memory.host == 8 * block - 2 * block
