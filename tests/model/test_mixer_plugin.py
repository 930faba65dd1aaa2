"""A new token mixer is its component, its torch module (with its state) and its tests: the worked example of
docs/contributing.md ("Where a change goes"), made true. The mixer below is defined in this file only and no
tfcalc file knows it; tfcalc builds it (the component names its module, tfcalc.model.mixers), runs its forward,
counts its parameters on meta and its FLOPs as FlopCounterMode sees them, and decodes with its fixed state
through tfcalc.model.generate, the slots of continuous batching and the static cache's state protocol
(tfcalc.model.cache).

The toy is linear attention (Katharopoulos et al. 2020, "Transformers are RNNs", sec. 3.2 and 3.4), without
the normalizer: per head, φ(x) = elu(x) + 1 on Q and K; over a whole sequence the parallel form
y_i = Σ_{j <= i} (φ(q_i)·φ(k_j)) v_j, two (T, h) x (h, T) and (T, T) x (T, h) matmuls per head with the
future masked to zero; in a decode step the recurrent form: a state S (h × h per head) += φ(k)ᵀ·v, then
y = φ(q)·S -- two matmuls of h·h per head whatever the context. S is kept in fp32 whatever the cache dtype.
Q, K, V and O are bias-free projections of H·h channels. Every expected figure is derived from these lines.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from conftest import tiny
from hf_pairs import assert_rows_decode_alone, greedy_uncached, step_flops
from torch.utils.flop_counter import FlopCounterMode
from toy_mixer import LinearAttentionBase

from tfcalc.architecture import Architecture, Stack, compress
from tfcalc.architecture.mixer import Mixing, StateTensor
from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.measure.params import measured_breakdown
from tfcalc.model import build_model, generate
from tfcalc.model.layers import Linear as TorchLinear
from tfcalc.model.mixers import MixerModule
from tfcalc.workload import Workload


# ---------- 1. the component: the mixer protocol (tfcalc.architecture.mixer), pure Python ----------
class ToyLinearAttention(LinearAttentionBase):
    module = f"{__name__}:ToyLinearAttentionModule"  # the torch module below, resolved by tfcalc.model.mixers

    def mixing(self, queries: int, keys: int, step: bool = False) -> list[Mixing]:
        """A decode step: S += φ(k)ᵀ·v ((h, 1) @ (1, h)) and φ(q)·S ((1, h) @ (h, h)) per head, reading S. A
        sequence: the parallel form's φ(Q)·φ(K)ᵀ and scores·V, full square, the causal pairs counted apart."""
        H, h = self.n_head, self.head_dim
        if step:
            return [Mixing("update", "state update φ(k)ᵀ·v", (h, queries, h), H, 2 * h * queries * h * H),
                    Mixing("read", "read φ(q)·S", (queries, h, h), H, 2 * queries * h * h * H, H * h * h, "fp32")]
        pairs = queries * (keys - queries) + queries * (queries + 1) // 2  # query i sees keys .. its own
        return [Mixing("qk", "φ(Q)·φ(K)ᵀ", (queries, h, keys), H, 2 * pairs * h * H),
                Mixing("av", "scores·V", (queries, keys, h), H, 2 * pairs * h * H)]

    def kernel(self, explicit_mask: bool) -> str:
        return "math"  # the (T, T) scores are written out

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool) -> dict[str, int]:
        w, H = self.width, self.n_head
        return {"feature_map": e * 2 * w, "qkv": e * 3 * w, "attn_scores": e * H * seq, "attn_output": e * w}

    def working_set(self, kernel: str, length: int) -> int:
        return 6 * self.width + self.n_head * length  # Q, K, V, φ(Q), φ(K), the output; a row of scores

    def state(self) -> list[StateTensor]:
        H, h = self.n_head, self.head_dim
        return [StateTensor("s", fixed=H * h * h, dtype="fp32", shape=(H, h, h))]


# ---------- 2. its torch module and its state (tfcalc.model.mixers, tfcalc.model.cache's state protocol) ----------
DTYPES = {"fp32": torch.float32}


class ToyState:
    """S (B, H, h, h), allocated once as the component's state says; no positions (layout None)."""

    layout = None
    rewindable = False

    def __init__(self, spec: ToyLinearAttention, batch: int, device):
        (t,) = spec.state()
        self.s = torch.zeros(batch, *t.shape, device=device, dtype=DTYPES[t.dtype])  # (B, H, h, h)

    @property
    def tensors(self) -> list[torch.Tensor]:
        return [self.s]

    @property
    def carried(self) -> tuple[torch.Tensor, ...]:
        return (self.s,)  # a step rewrites S whole

    @property
    def nbytes(self) -> int:
        return self.s.numel() * self.s.element_size()

    def _write(self, fk: torch.Tensor, v: torch.Tensor) -> None:  # the prompt's S = φ(K)ᵀ·V
        self.s.copy_(fk.float().mT @ v.float())

    def _add(self, fk: torch.Tensor, v: torch.Tensor) -> torch.Tensor:  # a step: S += φ(k)ᵀ·v, then read
        self.s.add_(fk.float().mT @ v.float())
        return self.s

    def prefill(self, slots: dict):
        return self._write  # returns None: the prompt runs the parallel form

    def step(self, slots: dict, span: int):
        return self._add

    def rows(self, rows: slice) -> ToyState:
        view = object.__new__(ToyState)
        view.s = self.s[rows]
        return view


class ToyLinearAttentionModule(MixerModule):
    def __init__(self, spec: ToyLinearAttention):
        super().__init__()
        self.spec, self.n_head = spec, spec.n_head
        d, w = spec.d_model, spec.width
        self.q, self.k, self.v = (TorchLinear(d, w, bias=False) for _ in "qkv")
        self.o = TorchLinear(w, d, bias=False)

    def new_state(self, batch: int, max_tokens: int, device, dtype) -> ToyState:
        return ToyState(self.spec, batch, device)

    def forward(self, x: torch.Tensor, rope=None, mask=None, store=None) -> torch.Tensor:
        B, T, _ = x.shape
        q, k, v = (p(x).view(B, T, self.n_head, -1).transpose(1, 2) for p in (self.q, self.k, self.v))  # (B, H, T, h)
        fq, fk = F.elu(q) + 1, F.elu(k) + 1
        s = store(fk, v) if store is not None else None
        if s is None:  # the parallel form: (B, H, T, T) scores, the future zeroed
            future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
            y = (fq @ fk.mT).masked_fill(future, 0.0) @ v
        else:  # the recurrent form over the state
            y = (fq.float() @ s).to(x.dtype)  # (B, H, T, h)
        return self.o(y.transpose(1, 2).reshape(B, T, -1))


# ---------- 3. the tests ----------
# tiny(): GPT-2 shaped, d = 32, 4 heads of 8, 2 layers, FFN 128 (GELU, biased), LayerNorm with bias, a
# learned position table of 16 rows, vocabulary 61, tied LM head
D, H, HD, L, F_, V, P = 32, 4, 8, 2, 128, 61, 16


def toy_config():
    cfg = tiny()
    arch = cfg.architecture
    layers = [dataclasses.replace(b, mixer=ToyLinearAttention(D, H, HD)) for b in arch.output.layers()]
    stack = Stack(compress(layers), arch.output.embeddings, arch.output.final_norm, arch.output.name)
    out = dataclasses.replace(cfg, name="tiny (toy linear attention)")
    out.__dict__["architecture"] = Architecture(arch.kind, (stack,), arch.head)
    return out


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(toy_config(), "cpu", torch.float32).eval()


def test_build_model_builds_the_module_the_component_names(model):
    assert [type(b.attn) for b in model.blocks] == [ToyLinearAttentionModule] * L
    idx = torch.randint(0, V, (2, 7))
    with torch.no_grad():
        logits = model(idx)
    assert logits.shape == (2, 7, V) and torch.isfinite(logits).all()
    # causal: a later token changes no earlier position's output
    other = idx.clone()
    other[:, -1] = (other[:, -1] + 1) % V
    with torch.no_grad():
        assert torch.equal(model(other)[:, :-1], logits[:, :-1])


def test_parameters_on_meta_equal_the_count():
    cfg = toy_config()
    meta = build_model(cfg, "meta")
    mixer = 4 * D * H * HD  # Q, K, V: d -> H·h; O: H·h -> d; no biases
    expected = V * D + P * D + L * (mixer + 2 * 2 * D + D * F_ + F_ + F_ * D + D) + 2 * D
    assert sum(p.numel() for p in meta.parameters()) == count_params.total(cfg) == expected == 27_680
    # each tensor to its component: the mixer's attn.<name>.<kind> is its Weight <name>_<kind>
    measured = measured_breakdown(meta)
    assert {k: n for k, n in measured.items() if n} == {k: n for k, n in count_params.breakdown(cfg).items() if n}
    assert [measured[f"attn_{p}_weight"] for p in "qkvo"] == [L * D * H * HD] * 4


@pytest.mark.parametrize("batch,seq", [(1, 1), (2, 9), (3, 16)])
def test_flop_counter_on_the_forward_equals_the_count(model, batch, seq):
    idx = torch.randint(0, V, (batch, seq))
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(idx)
    rows = batch * seq
    mixing = batch * H * 2 * (2 * seq * HD * seq)  # Q·Kᵀ and scores·V, full square, per head
    by_hand = L * (2 * rows * 4 * D * H * HD + 2 * rows * 2 * D * F_ + mixing) + 2 * rows * D * V
    counted = count_flops.forward_flops(toy_config(), Workload(batch=batch, seq=seq))
    assert counter.get_total_flops() == counted == by_hand


def test_generate_decodes_with_the_state_the_component_describes(model):
    cfg = toy_config()
    prompt, new = torch.randint(0, V, (2, 5)), 9
    cache = model.new_cache(2, 5 + new - 1)
    out = generate(model, prompt, new, cache=cache)
    # the recurrent form over the state continues the parallel form exactly where it should
    assert torch.equal(out, greedy_uncached(model, prompt, new))
    (t,) = ToyLinearAttention(D, H, HD).state()
    assert [tuple(s.s.shape) for s in cache.states] == [(2, *t.shape)] * L
    assert all(s.s.dtype == torch.float32 for s in cache.states)
    # its bytes are the count's, at any context and whatever the cache dtype asked for (fp32 kept)
    for kv_dtype in ("bf16", "fp32"):
        assert cache.nbytes == kv_cache_bytes(cfg, Workload(batch=2, seq=5, gen=new, kv_dtype=kv_dtype)) \
            == L * 2 * H * HD * HD * 4


def test_a_decode_step_runs_the_counted_flops_and_the_same_ops_at_every_context(model):
    """FlopCounterMode on each step equals the count's decode step (the recurrent form, fixed in the context),
    and every step runs the same ops on the same shapes."""
    cfg = toy_config()
    steps = step_flops(model, model.new_cache(1, 15), torch.randint(0, V, (1, 3)), 11)
    for context, (total, _) in zip(range(4, 15), steps, strict=True):
        assert total == count_flops.decode_flops(cfg, Workload(batch=1, seq=context))
    assert all(counts == steps[0][1] for _, counts in steps)


def test_continuous_batching_rows_decode_the_toy(model):
    # released row 0: the second sequence moves into it, its state S and its positions with it
    assert_rows_decode_alone(model, [torch.randint(0, V, (1, n)) for n in (3, 6)], max_tokens=12)


def test_a_state_that_cannot_rewind_refuses_a_verify_step(model):
    cache = model.new_cache(1, 10)
    with torch.no_grad():
        model.prefill(torch.randint(0, V, (1, 3)), cache)
    assert not cache.rewindable
    with pytest.raises(InputError, match="cannot rewind|states that rewind"):
        model.extend(torch.randint(0, V, (1, 2)), cache)
    with pytest.raises(InputError, match="cannot rewind"):
        cache.rewind(2)


def test_graph_capture_puts_back_the_carried_state(model):
    """What a CUDA graph's warm-up and capture put back (tfcalc.model.generate): the positions and S."""
    cache = model.new_cache(1, 10)
    assert all(any(t is s.s for t in cache.volatile()) for s in cache.states)


def test_a_module_without_a_tp_plan_is_refused_under_tp_by_name():
    """A real run under TP asks each mixer's torch module (tfcalc.measure.parallelize.check_measurable)."""
    from tfcalc.count.training.layout import Layout
    from tfcalc.measure.parallelize import check_measurable

    layout = Layout(tp=2, pp=1, dp=1, seq=16, global_batch=2, micro_batch=1, dtype="fp32")
    with pytest.raises(InputError, match="ToyLinearAttentionModule under TP is planned, not run"):
        check_measurable(toy_config(), layout)


def test_measured_flops_put_the_toys_projections_and_mixing_in_their_groups():
    """tfcalc.measure.flops on meta: the mixer's submodules are its projections, the rest of it its mixing."""
    from tfcalc.measure.flops import measure_flops

    cfg, w = toy_config(), Workload(batch=2, seq=9)
    m = measure_flops(cfg, w)
    b = count_flops.breakdown(cfg, w)
    assert m.groups == dict({g: n for g, n in b.totals().items() if g != "embeddings" or n}, other=0)
    assert m.groups["attention_proj"] == L * 2 * 2 * 9 * 4 * D * H * HD
    assert m.groups["attention_scores"] == L * 2 * H * 2 * (2 * 9 * HD * 9)


@dataclass(frozen=True)
class CountedOnly(ToyLinearAttention):
    module = None  # a mixer the counts know and no torch module runs


@dataclass(frozen=True)
class Misnamed(ToyLinearAttention):
    module = "tfcalc.model.layers:NoSuchMixer"


@pytest.mark.parametrize("kind, message", [(CountedOnly, "names no torch module"),
                                           (Misnamed, "'tfcalc.model.layers:NoSuchMixer' cannot be imported")])
def test_a_mixer_without_a_module_is_one_clear_line(kind, message):
    cfg = toy_config()
    arch = cfg.architecture
    layers = [dataclasses.replace(b, mixer=kind(D, H, HD)) for b in arch.output.layers()]
    stack = Stack(compress(layers), arch.output.embeddings, arch.output.final_norm, arch.output.name)
    cfg.__dict__["architecture"] = Architecture(arch.kind, (stack,), arch.head)
    with pytest.raises(InputError, match=message):
        build_model(cfg, "meta")


def test_a_cache_with_spare_ring_slots_asks_no_spare_of_a_state_that_cannot_rewind(model):
    """new_cache(..., spare=k) (a speculative run's rings, tfcalc.model.attention_state) passes ``spare`` only
    to mixers whose component declares rewind: the toy's new_state takes none, and its cache still refuses
    a verify step."""
    cache = model.new_cache(1, 10, spare=3)
    with torch.no_grad():
        model.prefill(torch.randint(0, V, (1, 3)), cache)
    with pytest.raises(InputError, match="states that rewind"):
        model.extend(torch.randint(0, V, (1, 2)), cache)
