"""--schedule dualpipev (tfcalc.count.perf.pipeline, step 5): DualPipe "cut in half" against deepseek-ai/DualPipe's
README table ("based on the same number of PP stages": DualPipeV's bubble (PP/2 − 1)(F&B + B − 3W), PP + 1
activations per device, PP/2 devices) and PyTorch's own ScheduleDualPipeV order (its
_calculate_single_rank_operations, the same code in torch 2.11 and 2.13), derived by hand:

- each rank runs 2m forwards (m of each of its two stages) and 2m backwards (whole B, or I then W);
- the rank's peak in flight is 2p − r micro-batches of stage r and r + 1 of stage 2p − 1 − r: steps 1-2 of
  the order run 2(p − r − 1) + (r + 1) forwards of stage r and r + 1 of the other, step 3 frees one and
  forwards one of the second stage, and the first overlapped pair forwards stage r once more before its
  backward half frees anything: 2p + 1 = PP + 1 in all;
- the bubble: played out on torch's order with unit F, B (input gradients) and W, each action after the
  one it needs (F of stage s after F of s − 1; B/I of s after B/I of s + 1, the last stage's after its F; W
  after I) and an overlapped pair as long as its two halves, the step takes 2m(F + B + W) of work + the
  table's (p − 1)(F + 2B − W) of a stage (half a rank).
The rank's parameters are one copy (the real module's numel summed over the ranks), its sends 4 − 2[first] −
2[last] a micro-batch, and the refusals one line each."""

import dataclasses

import pytest
import torch
from conftest import assert_one_line_error, tiny

from tfcalc.count.perf import pipeline
from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.comm import step_collectives
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.plan import make_plan, search
from tfcalc.count.training.search_space import SearchSpace
from tfcalc.count.training.steptime import Hardware, _stage_s
from tfcalc.errors import InputError

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)
schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
if not hasattr(schedules, "ScheduleDualPipeV"):  # PyTorch before 2.11
    pytest.skip("no ScheduleDualPipeV in this PyTorch", allow_module_level=True)


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=4, dp=1, seq=16, global_batch=8, micro_batch=1, schedule="dualpipev")
    fields.update(changes)
    return Layout(**fields)


def torch_order(p: int, m: int) -> dict[int, list]:
    """PyTorch's DualPipeV order of every rank, its overlapped pairs flattened (forward half first)."""
    s = schedules.ScheduleDualPipeV.__new__(schedules.ScheduleDualPipeV)  # the order needs no process group
    s.pp_group_size, s._n_microbatches = p, m
    return {r: [x for a in s._calculate_single_rank_operations(r) for x in (a.sub_actions or (a,))]
            for r in range(p)}


def pairs_order(p: int, m: int) -> dict[int, list]:
    s = schedules.ScheduleDualPipeV.__new__(schedules.ScheduleDualPipeV)
    s.pp_group_size, s._n_microbatches = p, m
    return {r: s._calculate_single_rank_operations(r) for r in range(p)}


CASES = [(2, 4), (2, 6), (3, 6), (4, 8), (4, 11), (5, 10)]


@pytest.mark.parametrize("p, m", CASES)
def test_each_rank_runs_its_two_stages_forward_and_backward_m_times(p, m):
    for r, actions in torch_order(p, m).items():
        kinds = {}
        for a in actions:
            kinds.setdefault((a.stage_index, a.computation_type.value), []).append(a.microbatch_index)
        assert {s for s, _ in kinds} == {r, 2 * p - 1 - r}  # the V: stages r and 2p − 1 − r
        for s in (r, 2 * p - 1 - r):
            assert sorted(kinds[s, "F"]) == list(range(m))
            assert sorted(kinds.get((s, "B"), []) + kinds.get((s, "I"), [])) == list(range(m))
            assert sorted(kinds.get((s, "W"), [])) == sorted(kinds.get((s, "I"), []))  # W only after a split B


@pytest.mark.parametrize("p, m", CASES)
def test_peak_in_flight_is_the_hand_count(p, m):
    """The peak of (forwarded, not yet freed by B or W) micro-batches, per stage, in torch's order."""
    for r, actions in torch_order(p, m).items():
        live, peak = set(), (0, None)
        for a in actions:
            key = (a.stage_index, a.microbatch_index)
            if a.computation_type.value == "F":
                live.add(key)
            elif a.computation_type.value in ("B", "W"):
                live.discard(key)
            if len(live) > peak[0]:
                peak = (len(live), sorted(live))
        counts = [sum(s == r for s, _ in peak[1]), sum(s == 2 * p - 1 - r for s, _ in peak[1])]
        assert counts == [2 * p - r, r + 1] == pipeline.chunk_micro_batches(layout(pp=p, global_batch=m), r)
        assert peak[0] == 2 * p + 1  # the README's PP + 1, PP = 2p stages


def played_out(p: int, m: int, f: float, b: float, w: float) -> float:
    """The step's length on torch's order (the module docstring's rules), every transfer instant."""
    n, done, free = 2 * p, {}, dict.fromkeys(range(p), 0.0)
    order, pos = pairs_order(p, m), dict.fromkeys(range(p), 0)

    def needs(a):
        t, s, mb = a.computation_type.value, a.stage_index, a.microbatch_index
        if t == "F":
            return [("F", s - 1, mb)] if s else []
        if t in ("B", "I"):
            return [("B", s + 1, mb)] if s < n - 1 else [("F", s, mb)]
        return [("B", s, mb)]

    length = {"F": f, "I": b, "W": w, "B": b + w}
    while any(pos[r] < len(order[r]) for r in range(p)):
        moved = False
        for r in range(p):
            while pos[r] < len(order[r]):
                parts = order[r][pos[r]].sub_actions or (order[r][pos[r]],)
                wait = [d for x in parts for d in needs(x)]
                if not all(d in done for d in wait):
                    break
                end = max([free[r]] + [done[d] for d in wait]) + sum(length[x.computation_type.value] for x in parts)
                for x in parts:
                    t = x.computation_type.value
                    done["B" if t in ("B", "I") else t, x.stage_index, x.microbatch_index] = end
                free[r], pos[r], moved = end, pos[r] + 1, True
        assert moved, "deadlock"
    return max(free.values())


@pytest.mark.parametrize("p, m", CASES)
def test_bubble_is_the_tables_on_torchs_order(p, m):
    """Unit times a stage (F = B = W = 1): idle (p − 1)(F + 2B − W) = 2(p − 1) beside 2m·3 of work; tfcalc's
    fraction, in a rank's F, B, W (two stages: 2 each), is that idle over the step."""
    span = played_out(p, m, 1.0, 1.0, 1.0)
    idle = span - 2 * m * 3
    assert idle == (p - 1) * (1 + 2 * 1 - 1)
    assert pipeline.bubble_fraction(layout(pp=p, global_batch=m), 2.0, 2.0, 2.0) == pytest.approx(idle / span)


def test_bubble_beside_dualpipes_and_1f1bs():
    """p = 4, F = B = W = 1 a rank: 1F1B 3 / (8 + 3), DualPipe on 4 ranks (p/2 − 1)(F + 2B − W) = 2, DualPipeV
    (p − 1)/2 · 2 = 3 over m(F + B + W) = 24."""
    assert pipeline.bubble_fraction(layout(schedule="1f1b"), 1, 1, 1) == pytest.approx(3 / 11)
    assert pipeline.bubble_fraction(layout(schedule="dualpipe"), 1, 1, 1) == pytest.approx(2 / 26)
    assert pipeline.bubble_fraction(layout(), 1, 1, 1) == pytest.approx(3 / 27)


def test_step_time_prices_the_bubble_with_the_models_f_b_w():
    cfg = tiny(n_layer=8, max_seq_len=16)
    s = _stage_s(cfg, layout(), H100)
    f, w = s.forward, s.weight_grad
    b = s.total - f - w
    idle = (4 - 1) / 2 * (f + 2 * b - w)
    step = make_plan(cfg, layout(), H100, None).step
    assert step.bubble == pytest.approx(idle / (8 * s.total + idle))
    assert step.compute_s == pytest.approx(make_plan(cfg, layout(schedule="1f1b"), H100, None).step.compute_s)


def real_numels(cfg) -> tuple[dict[str, int], int]:
    """The real module's parameters: each block's, and the whole model's (a tied tensor once)."""
    from tfcalc.model import build_model

    model = build_model(cfg, torch.device("meta"), torch.float32)
    blocks = {f"blocks.{i}": sum(q.numel() for q in b.parameters()) for i, b in enumerate(model.blocks)}
    return blocks, sum(q.numel() for q in model.parameters())


@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("tied", [True, False])
def test_one_copy_of_the_parameters_in_a_v(p, tied):
    """Rank r holds the blocks of stages r and 2p − 1 − r (2p stages of L/(2p)); over the ranks, the real
    module's parameters exactly once -- DualPipe's two copies are 2× (test_pipeline_dualpipe)."""
    cfg = tiny(n_layer=4 * p, max_seq_len=16, tie_embeddings=tied)
    blocks, total = real_numels(cfg)
    held = [rm.stage_memory(cfg, layout(pp=p, global_batch=2 * p), r).params for r in range(p)]
    assert sum(held) == total
    for r in range(1, p):  # no end: the blocks of its two stages, 2 each
        assert held[r] == sum(blocks[f"blocks.{i}"] for i in (2 * r, 2 * r + 1, 4 * p - 2 * r - 2, 4 * p - 2 * r - 1))
    one = [rm.stage_memory(cfg, layout(pp=p, global_batch=2 * p, schedule="1f1b"), r).params for r in range(p)]
    assert sum(one) == total + (cfg.vocab_size * cfg.d_model if tied else 0)  # 1F1B: a tied tensor on both ends


@pytest.mark.parametrize("p", [2, 4])
def test_activations_and_sends(p):
    cfg = tiny(n_layer=2 * p, max_seq_len=16)
    L = layout(pp=p, global_batch=2 * p)
    one = layout(pp=2 * p, global_batch=2 * p, schedule="1f1b")  # a stage of 2p: one block, as DualPipeV's
    block = rm.stage_memory(cfg, one, 1).activations // (2 * p - 1)  # 1F1B's stage 1 holds 2p − 1 of its block
    for r in range(1, p):  # no end: (2p − r) + (r + 1) micro-batches of one block
        assert rm.stage_memory(cfg, L, r).activations == (2 * p + 1) * block
    sends = [next(c for c in step_collectives(cfg, L, r, 0) if c.cause == "pp_activations").calls for r in range(p)]
    assert sends == [2 * p * (4 - 2 * (r == 0) - 2 * (r == p - 1)) for r in range(p)]
    assert all(c.cause != "pp_tied_embedding" for r in range(p) for c in step_collectives(cfg, L, r, 0))


@pytest.mark.parametrize("changes, words", [
    (dict(global_batch=7), "needs at least as many micro-batches a step; got 7"),
    (dict(pp=1), "needs pp > 1"),
    (dict(pp_layers=(2, 2, 2, 2)), "leave out --pp-layers"),
    (dict(pp_split_counts=("embedding",)), "leave out --pp-layers and --pp-split-counts"),
])
def test_refusals(changes, words):
    with pytest.raises(InputError, match=words) as e:
        check_layout(tiny(n_layer=8, max_seq_len=16), layout(**changes))
    assert "\n" not in str(e.value)


def test_too_few_blocks_and_odd_pp():
    with pytest.raises(InputError, match="cuts tiny's 6 blocks into 2 × pp = 8 stages"):
        check_layout(tiny(name="tiny", n_layer=6, max_seq_len=16), layout())
    check_layout(tiny(n_layer=6, max_seq_len=16), layout(pp=3, global_batch=6))  # DualPipeV takes an odd pp


def test_search_tries_dualpipev_only_when_asked():
    cfg = tiny(n_layer=8, max_seq_len=16)
    base = Layout(seq=16, global_batch=64)
    plans = search(cfg, 8, base, H100, None, space=dataclasses.replace(SearchSpace(), schedule="dualpipev"))
    assert any(p.layout.pp > 1 for p in plans)
    assert all(p.layout.schedule == "dualpipev" for p in plans if p.layout.pp > 1)
    assert "dualpipev" not in {p.layout.schedule for p in search(cfg, 8, base, H100, None, space=SearchSpace())}


def test_cli(cli):
    args = ("plan", "gpt2", "--pp", "4", "--global-batch", "32")
    j = cli(*args, "--schedule", "dualpipev", "--json").json()
    text = " ".join(cli(*args, "--schedule", "dualpipev").out.split())  # the table's wrapped cells joined
    assert j["layout"]["schedule"] == "dualpipev" and "DualPipeV (p−1)/2·(F+2B−W)" in text
    assert "8+1 chunk micro-batches in flight of stages 0 and 7 (DualPipeV)" in text  # rank 0: 2p − 0 and 0 + 1
    assert "no recompute; 5 in flight" in " ".join(cli(*args, "--schedule", "dualpipe").out.split())  # p + 1
    assert j["step"]["bubble"] < cli(*args, "--json").json()["step"]["bubble"]
    assert_one_line_error(cli("plan", "gpt2", "--pp", "4", "--global-batch", "4", "--schedule", "dualpipev"),
                          "at least as many micro-batches")
