"""The token-mixer protocol is complete enough: a mixer defined only here, plugged into a Block, is counted by
the folds (parameters, FLOPs, non-matmul work, generation state, the decode roofline, TP and CP rules)
without a line of tfcalc knowing it (tfcalc.architecture.mixer).

The toy is linear attention in its recurrent form (Katharopoulos et al. 2020, "Transformers are RNNs",
sec. 3.4): per head a state S of h×h, updated by each token's kᵀ·v and read by its q·S; Q, K, V and O
projections of H·h channels without biases; the feature map elu(x) + 1 on Q and K (2 FLOPs an element, as
this mixer declares: the count has no price of its own for it). Its state is fixed in the context and kept
in fp32 whatever the cache dtype. Every expected figure below is derived by hand from those sentences.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import pytest
from conftest import tiny
from hf_tiny import T, inputs
from toy_mixer import LinearAttentionBase

from tfcalc.architecture import Architecture, Attention, LatentAttention, Stack, compress
from tfcalc.architecture.mixer import EagerOp, Mixer, Mixing, StateTensor, step_io
from tfcalc.count.model import (
    activations as count_activations,
    budget,
    flops as count_flops,
    memory as count_memory,
    op_recompute,
    params as count_params,
)
from tfcalc.count.model.quant import weight_format
from tfcalc.count.perf import eager
from tfcalc.count.perf.hardware import PerfSpec
from tfcalc.count.serving import roofline
from tfcalc.count.training import shard
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.layout_pipeline import cp_refused
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload


class LinearAttention(LinearAttentionBase):
    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """Per head: S += kᵀ·v over the queries ((h, T) @ (T, h)) and the outputs q·S ((T, h) @ (h, h)); the
        output reads the state, h·h per head, whatever the context."""
        H, h = self.n_head, self.head_dim
        flops = 2 * h * queries * h * H
        return [Mixing("update", "state update kᵀ·v", (h, queries, h), H, flops),
                Mixing("read", "read q·S", (queries, h, h), H, flops, H * h * h, "fp32")]

    def kernel(self, explicit_mask: bool) -> str:
        return "flash"  # no (T, T) tensor: the state carries the context

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, int]:
        """Per token: the feature map's inputs (Q, K), φ(Q), φ(K) and V for the two products, and the output."""
        w = self.width
        return {"feature_map": e * 2 * w, "qkv": e * 3 * w, "attn_output": e * w}

    def working_set(self, kernel: str, length: int) -> int:
        return 3 * self.width + 2 * self.width + self.width  # Q, K, V; φ(Q), φ(K); the output

    def state(self) -> list[StateTensor]:
        return [StateTensor("s", fixed=self.n_head * self.head_dim ** 2, dtype="fp32")]


# tiny(): GPT-2 shaped, d = 32, 4 heads of 8, 2 layers, FFN 128 (GELU, biased), LayerNorm with bias, a
# learned position table of 16 rows, vocabulary 61, tied LM head
D, H, HD, L, F, V, P = 32, 4, 8, 2, 128, 61, 16


def toy_config():
    cfg = tiny()
    arch = cfg.architecture
    layers = [dataclasses.replace(b, mixer=LinearAttention(D, H, HD)) for b in arch.output.layers()]
    stack = Stack(compress(layers), arch.output.embeddings, arch.output.final_norm, arch.output.name)
    out = dataclasses.replace(cfg, name="tiny (linear attention)")
    out.__dict__["architecture"] = Architecture(arch.kind, (stack,), arch.head)
    return out


@dataclass(frozen=True)
class WithoutOps(LinearAttention):
    """The toy with no eager work of its own: what the eager model adds for the toy's is the difference."""

    def eager_ops(self, tokens: int) -> list[EagerOp]:
        return []


def with_ops(cfg, ops):
    arch = cfg.architecture
    layers = [dataclasses.replace(b, mixer=WithoutOps(D, H, HD)) for b in arch.output.layers()]
    stack = Stack(compress(layers), arch.output.embeddings, arch.output.final_norm, arch.output.name)
    out = dataclasses.replace(cfg, name="tiny (linear attention, no eager ops)")
    out.__dict__["architecture"] = Architecture(arch.kind, (stack,), arch.head)
    return out


def test_the_toy_and_both_attentions_answer_the_protocol():
    assert isinstance(LinearAttention(D, H, HD), Mixer)
    assert isinstance(Attention(D, H, H, HD), Mixer)
    assert isinstance(LatentAttention(D, H, 16, 8, 4, 8), Mixer)


def test_parameters_from_the_mixers_weights():
    cfg = toy_config()
    mixer = 4 * D * H * HD  # Q, K, V: d -> H·h; O: H·h -> d; no biases
    norms = 2 * 2 * D  # two LayerNorms (weight and bias) per block
    ffn = D * F + F + F * D + D
    expected = V * D + P * D + L * (mixer + norms + ffn) + 2 * D  # token and position tables, final norm
    assert count_params.total(cfg) == expected == 27_680
    groups = count_params.group_totals(cfg, count_params.breakdown(cfg))
    assert groups["attention"] == L * mixer


@pytest.mark.parametrize("batch,seq", [(1, 1), (2, 12), (3, 16)])
def test_forward_flops_from_the_mixers_matmuls(batch, seq):
    cfg = toy_config()
    w = Workload(batch=batch, seq=seq)
    rows = batch * seq
    proj = 2 * rows * 4 * D * H * HD
    ffn = 2 * rows * 2 * D * F
    mixing = batch * 2 * (2 * HD * seq * HD * H)  # update and read: 2·h·T·h per head, no mask to discount
    head = 2 * rows * D * V
    expected = L * (proj + ffn + mixing) + head
    assert count_flops.forward_flops(cfg, w) == expected
    assert count_flops.forward_flops_causal(cfg, w) == expected  # nothing masked: the causal count is the same
    nm = count_flops.breakdown(cfg, w).non_matmul
    feature_map = [e for e in nm if e.label == "elu + 1 on Q and K"]
    assert [(e.per_element, e.elements, e.copies) for e in feature_map] == [(2, rows * 2 * H * HD, L)]
    assert not [e for e in nm if e.component == "softmax"]  # no scores, no softmax


def test_a_decode_step_costs_the_same_at_every_context():
    cfg = toy_config()
    per_step = L * (2 * 4 * D * H * HD + 2 * 2 * D * F + 2 * (2 * HD * HD * H)) + 2 * D * V
    for context in (1, 15, 10_000):
        assert count_flops.decode_flops(cfg, Workload(batch=1, seq=context)) == per_step


@pytest.mark.parametrize("kv_dtype", ["bf16", "int8", "fp32"])
def test_the_state_is_fixed_in_the_context_and_kept_in_fp32(kv_dtype):
    cfg = toy_config()
    batch, state = 3, L * H * HD * HD * 4  # per sequence: h×h per head and layer, 4 bytes each
    for seq, gen in ((1, 0), (10, 6), (16, 1000)):
        w = Workload(batch=batch, seq=seq, gen=gen, kv_dtype=kv_dtype)
        assert count_memory.kv_cache_bytes(cfg, w) == batch * state
    # a decode step reads the state once, in fp32, and writes it once (tfcalc.architecture.mixer.step_io)
    for context in (5, 5_000):
        step = roofline.decode_step(cfg, batch, context, weight_format("bf16"), kv_dtype)
        assert step.kv_bytes == 2 * batch * state  # read by the mixing row, written back by the row "state_write"
        assert [r.kv_bytes for r in step.rows if r.component == "state_write"] == [batch * state]
    assert step_io(LinearAttention(D, H, HD), 7) == (H * HD * HD, H * HD * HD)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_the_mixing_rows_are_priced_as_mixing_and_split_by_heads(tp):
    """A decode step (one query) of batch B over L layers: the toy's rows "attn_update" and "attn_read" (named
    unlike attention's "qk"/"av") come from its mixing(), so the roofline prices them as position mixing: no
    weights, 2·h·1·h FLOPs per head (nothing masked), the read's fp32 state h·h per head, and -- the toy
    declaring no ``io`` -- a plain GEMM's activations, (m·k + m·n) per head in bf16: the update (h, 1, h) reads
    h and writes h·h, the read (1, h, h) reads h and writes h. Under tensor parallelism over T GPUs each GPU
    holds H / T of the heads (the toy's tp_state_heads is H): FLOPs, state and activations / T, B·H / T
    products."""
    from tfcalc.count.serving import serving_tp

    cfg, batch, a = toy_config(), 3, 2
    step = roofline.decode_step(cfg, batch, 9, weight_format("bf16"), "int8")
    rows = {r.component: serving_tp.shard_row(r, cfg, tp) for r in step.rows if r.mixing}
    # the fixed state written back (fp32, whole heads per GPU as it is read), beside the mixer's own rows
    write = rows.pop("state_write")
    assert (write.flops, write.weight_bytes, write.kv_bytes) == (0, 0, batch * L * H * HD * HD * 4 // tp)
    assert set(rows) == {"attn_update", "attn_read"}
    n = batch * L * H // tp  # products over the layers on one GPU
    flops = 2 * HD * 1 * HD * n
    assert [(r.flops, r.weight_bytes, r.kv_bytes, r.activation_bytes, r.count) for r in rows.values()] == [
        (flops, 0, 0, a * n * (HD + HD * HD), batch * H // tp),
        (flops, 0, n * HD * HD * 4, a * n * (HD + HD), batch * H // tp)]
    # under a performance model they run at fused attention's share of the peak (flash_efficiency, forward),
    # and FP8 weights leave them at the 16-bit peak: they are no weight GEMMs
    perf = PerfSpec(flash_efficiency=(0.37, 0.2))
    c = roofline.Ceilings(1e15, 1e12, "test", perf=perf, high_flops_per_s=5e14)
    assert [(c.efficiency(r), c.fp8(r), c.peak(r)) for r in rows.values()] == [(0.37, False, 5e14)] * 2


def test_a_budget_holds_any_context_and_a_batch_of_whole_states():
    """memory --budget: weights (27,680 bf16 parameters) and, per sequence, the fixed fp32 state; the context
    never fills the budget (the search stops at its cap: a lower bound, said so)."""
    cfg, state = toy_config(), L * H * HD * HD * 4
    weights = 27_680 * 2
    fit = budget.fit_inference(cfg, Workload(batch=1, seq=16, dtype="bf16"), weights + 10 * state + state // 2)
    assert (fit.fixed_bytes, fit.max_batch, fit.seq_capped) == (weights, 10, True)


def test_attention_state_still_grows_beside_it():
    """The reference the toy is set against: tiny()'s attention caches K and V of every position."""
    cfg = tiny()
    w = Workload(batch=3, seq=10, gen=6, kv_dtype="bf16")
    assert count_memory.kv_cache_bytes(cfg, w) == 2 * 3 * 16 * L * H * HD * 2


@pytest.mark.parametrize("dtype,e", [("fp32", 4), ("bf16", 2)])
def test_activations_from_what_the_mixer_says_it_keeps(dtype, e):
    cfg = toy_config()
    batch, seq, w = 2, 12, H * HD
    tokens = batch * seq
    acts = count_activations.activations(cfg, Workload(batch=batch, seq=seq, dtype=dtype))
    for i in range(L):
        terms = acts.layer_terms(i)
        assert (terms["feature_map"], terms["qkv"], terms["attn_output"]) == (
            tokens * e * 2 * w, tokens * e * 3 * w, tokens * e * w)
        assert terms["qkv_input"] == tokens * e * D  # the block's, as for any mixer
    # a no-grad forward: the larger of the mixer's stage (x, norm and projection outputs, 6·H·h of its own)
    # and the FFN's (x, norm output, the activation's input and output), or the head's (x, norm, logits)
    stages = (3 * D + 6 * w, 2 * D + 2 * F, 2 * D + V)
    assert count_memory.forward_working_set(cfg, Workload(batch=batch, seq=seq, dtype=dtype)) == (
        e * tokens * max(stages))


def test_eager_traffic_includes_the_mixers_declared_ops():
    cfg, toy = toy_config(), LinearAttention(D, H, HD)
    tokens, a = 2 * 12, 2
    terms = eager.terms(cfg, 2, 12, a)
    plain = eager.terms(with_ops(cfg, []), 2, 12, a)
    (op,) = toy.eager_ops(tokens)
    extra = [t for t in terms if t not in plain]
    assert [(t.forward, t.backward, t.forward_kernels, t.backward_kernels) for t in extra] == [
        (a * op.elements * L, a * op.backward * L, 2 * L, 2 * L)]


def test_op_recompute_refuses_a_mixer_it_does_not_model():
    assert "does not model" in op_recompute.unsupported(toy_config().architecture.output.layer(0))


@pytest.mark.parametrize("d_ff", [F, 64])
def test_a_mixer_that_grows_like_t_never_overtakes_a_wider_ffn(d_ff):
    """Per layer and token: the toy's mixing s = 2·(2·h·h·H) = 1,024 FLOPs at every length, its projections
    p = 2·4·d·H·h = 8,192, the FFN c = 2·2·d·f (16,384 at f = 128; 8,192 at f = 64). No T² term: the scores
    never reach c; the whole sub-layer s + p = 9,216 does at once where c <= 9,216. Causal: the same."""
    from tfcalc.report.flops import build_flops
    from tfcalc.report.model_ref import ModelRef
    from tfcalc.report.scan import build_scan

    cfg = toy_config()
    arch = cfg.architecture
    layers = [dataclasses.replace(b, ffn=dataclasses.replace(b.ffn, d_ff=d_ff)) for b in arch.output.layers()]
    stack = Stack(compress(layers), arch.output.embeddings, arch.output.final_norm, arch.output.name)
    cfg.__dict__["architecture"] = Architecture(arch.kind, (stack,), arch.head)
    s, p, c = 2 * (2 * HD * HD * H), 2 * 4 * D * H * HD, 2 * 2 * D * d_ff
    expected = (1 if s >= c else None, 1 if s + p >= c else None)
    assert expected == (None, None if d_ff == F else 1)
    for causal in (False, True):
        x = count_flops.crossover_seq(cfg, causal=causal)
        assert (x.scores_vs_ffn, x.attention_vs_ffn) == expected
    sentence = build_flops(ModelRef(cfg), Workload(batch=1, seq=8)).crossover_sentence()
    assert "grows like T, not T²" in sentence
    scan = build_scan(ModelRef(cfg), [1, 4, 16])  # where the cost stops growing: the state, at every length
    assert [(r["kv_cache_bytes"], r["attention_scores"]) for r in scan.rows] == [
        (L * H * HD * HD * 4, L * s * t) for t in (1, 4, 16)]
    assert scan.headline().endswith("scores reach the FFN never")


def test_declared_tp_and_cp_rules():
    cfg = toy_config()
    assert ("n_head", H) in shard.tp_split_widths(cfg)
    plan = Layout(tp=2, pp=1, dp=1, seq=16, global_batch=2, micro_batch=1)
    check_layout(cfg, plan)
    with pytest.raises(InputError, match=r"n_head \(4\)"):  # 8 ranks cannot hold whole heads of 4
        check_layout(cfg, dataclasses.replace(plan, tp=8))
    assert "without context parallelism" in cp_refused(cfg)  # the mixer declares none
    # a training step's matmuls on one of 2 TP ranks: the toy's mixing products split by heads, H / 2 of B·H
    # each (batch 1, 16 tokens: the update (h, T, h), the read (T, h, h)), like attention's score products
    from tfcalc.count.training.micro_batch_time import tp_shape

    mixing = [tp_shape(e, 2) for e in count_flops.matmul_entries(cfg, 1, 16) if e.mixing]
    assert mixing == [(HD, 16, HD, H // 2), (16, HD, HD, H // 2)]


def test_the_attention_alias_and_keyword_still_work():
    block = toy_config().architecture.output.layer(0)
    assert block.attention is block.mixer
    other = dataclasses.replace(block, attention=Attention(D, H, H, HD))
    assert isinstance(other.mixer, Attention) and other.ffn == block.ffn
    with pytest.raises(AttributeError):
        block.attention = other.mixer


@pytest.mark.parametrize("name", ["llama", "mistral", "qwen3", "gemma2", "phi3", "deepseek_v3", "deepseek_v2"])
def test_each_layers_state_is_what_transformers_caches(saved, name):
    """After T tokens into transformers' StaticCache of T positions, each layer holds, per sequence, the
    positions and the (heads, width) of its keys and values that the layer's mixer says its state keeps:
    every position, or a ring of W slots in a window layer (StaticSlidingWindowLayer, cache_utils.py: the
    fixed-shape state tfcalc.model allocates too); a latent attention's latent and rotary key, one head each
    (modeling_deepseek_v3.py caches them compressed)."""
    import torch
    import transformers

    model, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    with torch.no_grad():
        cache = transformers.StaticCache(config=model.config, max_cache_len=T)
        model(**inputs(name), past_key_values=cache, use_cache=True)
    for i, layer in enumerate(cache.layers):
        state = cfg.architecture.output.layer(i).mixer.state()
        held = [(t.shape[2], (t.shape[1], t.shape[3])) for t in (layer.keys, layer.values)]
        assert held == [(s.positions(T), s.shape) for s in state]
        assert all(math.prod(s.shape) == s.per_token and s.fixed == 0 for s in state)
