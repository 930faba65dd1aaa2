"""The mixture of experts without the host (tfcalc.model.experts, tfcalc.model.grouped): the grouped matmul
against a per-expert loop, FlopCounterMode's count against 2·rows·in·out by hand, no op of the forward that
reads a value back (a recording dispatch mode on real tensors, and a whole forward under FakeTensorMode,
where any such read raises), the same op shapes whatever the routing, and the capacity buffers against a
plain Switch Transformers reference."""

import pytest
import torch
from conftest import MIXTRAL_LIKE, tiny
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map
from torch.utils.flop_counter import FlopCounterMode

from tfcalc.count.model import flops as count
from tfcalc.measure import flops as measure
from tfcalc.model import build_model
from tfcalc.model.experts import MixtureOfExperts
from tfcalc.model.grouped import _grouped_mm_runs, expert_ends, grouped_matmul
from tfcalc.workload import Workload

# ops that read a tensor's value back to the host, or whose output shape depends on values
READS_BACK = {"_local_scalar_dense", "item", "is_nonzero", "equal", "nonzero", "bincount", "unique", "masked_select",
              "_unique2", "unique_consecutive", "nonzero_static"}
# the routings and expert kinds tfcalc's MoE runs (tfcalc.model.experts, routing.py, routing_input.py)
KINDS = {
    "mixtral": {},
    "qwen2-moe": dict(router_norm_topk=False, shared_expert_d_ff=16, shared_expert_gate=True),
    "gpt-oss": dict(ffn_bias=True, router_bias=True, swiglu_limit=7.0, swiglu_alpha=1.702),
    "deepseek": dict(n_expert=8, n_expert_active=2, router_scoring="sigmoid", router_groups=4, router_topk_groups=2,
                     router_score_bias=True, routed_scaling=2.5, shared_expert_d_ff=16),
    "llama-4": dict(router_sigmoid_input=True, shared_expert_d_ff=16),
    "capacity": dict(expert_capacity_factor=0.75),
}


class Recorder(TorchDispatchMode):
    """Every aten op a region runs, with its arguments' shapes."""

    def __init__(self):
        super().__init__()
        self.ops: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        shapes = tree_map(lambda a: ("tensor", tuple(a.shape)) if isinstance(a, torch.Tensor) else a, args)
        self.ops.append((func.overloadpacket.__name__, repr(shapes)))
        return func(*args, **(kwargs or {}))


def _moe(changes: dict, d_ff: int, dtype=torch.float32) -> tuple[MixtureOfExperts, int]:
    cfg = tiny(**{**MIXTRAL_LIKE, "d_ff": d_ff, **changes})
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", dtype)
    return next(m for m in model.modules() if isinstance(m, MixtureOfExperts)), cfg.d_model


def _loop_reference(x, weight, experts):
    """Row by row: each row times its expert's matrix."""
    return torch.stack([x[i] @ weight[e].T for i, e in enumerate(experts.tolist())])


@pytest.mark.parametrize("width", [24, 10], ids=["grouped-gemm", "gathered"])
def test_grouped_matmul_equals_a_loop_forward_and_backward(width):
    torch.manual_seed(1)
    E, P = 5, 23
    experts = torch.randint(0, E, (P,)).sort().values
    experts[experts == 3] = 2  # an expert with no rows
    x = torch.randn(P, width, requires_grad=True)
    weight = torch.randn(E, 2 * width, width, requires_grad=True)
    assert _grouped_mm_runs(x, weight) == (width == 24)  # an odd width: strides not 16-byte multiples
    y = grouped_matmul(x, weight, expert_ends(experts, E), experts)
    ref = _loop_reference(x, weight, experts)
    torch.testing.assert_close(y, ref)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, weight), g)
    want = torch.autograd.grad(ref, (x, weight), g)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("width", [24, 10], ids=["grouped-gemm", "gathered"])
def test_flop_counter_sees_each_row_once_forward_and_backward(width):
    """2·P·in·out for the forward, twice that for the backward (the input's and the weight's gradients),
    whatever the path and the routing: the rows meet their own expert only, never all E."""
    E, P, out = 6, 17, 3 * width
    experts = torch.randint(0, E, (P,)).sort().values
    x = torch.randn(P, width, requires_grad=True)
    weight = torch.randn(E, out, width, requires_grad=True)
    with FlopCounterMode(display=False) as fwd:
        y = grouped_matmul(x, weight, expert_ends(experts, E), experts)
    with FlopCounterMode(display=False) as bwd:
        y.backward(torch.randn_like(y))
    assert fwd.get_total_flops() == 2 * P * width * out
    assert bwd.get_total_flops() == 2 * 2 * P * width * out


@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
@pytest.mark.parametrize("d_ff", [24, 9], ids=["grouped-gemm", "gathered"])
@pytest.mark.parametrize("tokens", [1, 13], ids=["decode", "prefill"])
def test_no_value_is_read_back_and_shapes_do_not_follow_the_routing(kind, d_ff, tokens):
    moe, d = _moe(KINDS[kind], d_ff)
    torch.manual_seed(0)
    inputs = [torch.randn(1, tokens, d)]
    routings = [moe.route(inputs[0][0])[1].sort(dim=-1).values]
    while torch.equal(routings[0], routings[-1]):  # a second input the router sends elsewhere
        inputs.append(torch.randn(1, tokens, d))
        routings.append(moe.route(inputs[-1][0])[1].sort(dim=-1).values)
    runs = []
    for x in (inputs[0], inputs[-1]):
        moe.zero_grad(set_to_none=True)  # the second backward would add into the first's gradients
        x.requires_grad_(tokens > 1)
        with Recorder() as rec:
            y = moe(x)
            if x.requires_grad:
                y.square().sum().backward()
        runs.append(rec.ops)
    names = {name for name, _ in runs[0]}
    assert not names & READS_BACK, names & READS_BACK  # the module as it was ran bincount, then .tolist()
    assert runs[0] == runs[1]  # another routing, the same ops on the same shapes
    if kind != "capacity":
        assert ("_grouped_mm" in names) == (d_ff == 24), names  # the grouped GEMM where it runs


@pytest.mark.parametrize("rows", [3, 40], ids=["a-matrix-per-row", "blocks"])
def test_the_gathered_op_inside_reads_nothing_back_and_keeps_its_shapes(rows):
    """tfcalc::gathered_mm is one op to a dispatch mode; what runs inside it, forward and backward, checked
    the same way: no host read, the same ops on the same shapes for another routing."""
    from tfcalc.model.grouped import _gathered_backward, _gathered_forward

    E, width = 5, 6
    weight = torch.randn(E, 2 * width, width)
    runs = []
    for seed in (0, 1):
        experts = torch.randint(0, E, (rows,), generator=torch.Generator().manual_seed(seed)).sort().values
        x, ends = torch.randn(rows, width), expert_ends(experts, E)
        with Recorder() as rec:
            y = _gathered_forward(x, weight, experts, ends)
            _gathered_backward(torch.randn_like(y), x, weight, experts, ends)
        runs.append(rec.ops)
        torch.testing.assert_close(y, _loop_reference(x, weight, experts))
    assert not {name for name, _ in runs[0]} & READS_BACK
    assert runs[0] == runs[1]


@pytest.mark.parametrize("kind", KINDS, ids=list(KINDS))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16-grouped-gemm", "fp32-gathered"])
def test_a_whole_forward_runs_on_fake_tensors(kind, dtype):
    """FakeTensorMode has shapes and no values: .tolist(), .item(), nonzero, bincount raise there. (The module
    as it was took a separate meta path here; there is one path now, so this runs the forward itself.)"""
    moe, d = _moe(KINDS[kind], 24 if dtype == torch.bfloat16 else 9, dtype)
    with FakeTensorMode(allow_non_fake_inputs=True) as mode:
        y = moe(mode.from_tensor(torch.randn(2, 7, d, dtype=dtype)))
    assert y.shape == (2, 7, d) and y.dtype == dtype


def test_capacity_buffers_match_switch_transformers():
    """Each expert runs its first C pairs in position order, the rest add nothing (Fedus et al. 2021, sec.
    2.2): the batched buffers against a loop over experts and tokens."""
    moe, d = _moe(KINDS["capacity"], 24)
    x = torch.randn(19, d)
    weights, chosen = moe.route(x)
    C = moe.spec.capacity(19)
    want, taken = torch.zeros_like(x), [0] * moe.n_expert
    for t in range(19):
        for s in range(moe.top_k):
            e = int(chosen[t, s])
            if taken[e] < C:
                taken[e] += 1
                want[t] += moe.experts(x[t][None, None], e)[0, 0] * weights[t, s]
    assert max(taken) == C  # some pairs were dropped
    torch.testing.assert_close(moe.routed(x), want)


@pytest.mark.parametrize("device", ["cpu", "meta"])
@pytest.mark.parametrize("d_ff", [24, 9], ids=["grouped-gemm", "gathered"])
def test_measured_training_flops_of_a_moe_equal_the_analytic(device, d_ff):
    """Forward and forward + backward: the top-k experts per token, through the grouped GEMM's registered
    formula on the CPU (no formula of PyTorch's: it would count 0) or the gathered bmm."""
    cfg, w = tiny(**{**MIXTRAL_LIKE, "d_ff": d_ff}), Workload(batch=2, seq=9)
    m = measure.measure_flops(cfg, w, device, training=True)
    assert m.total == count.forward_flops(cfg, w) and m.groups["other"] == 0
    expected = count.training_flops(cfg, w)
    if device == "cpu":  # the CPU flash-attention backward recomputes Q·Kᵀ (tests/count/test_flops.py)
        expected += cfg.n_layer * count.attention_score_flops(cfg, w) // 2
    assert m.training_total == expected
