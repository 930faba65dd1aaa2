"""--schedule dualpipe (tfcalc.count.perf.pipeline, step 4) against the DeepSeek-V3 technical report (arXiv
2412.19437, sec. 3.2.1, Table 2), worked by hand on tiny configs: the bubble (PP/2 − 1)(F&B + B − 3W) beside
1F1B's (PP − 1)(F + B) and ZB1P's (PP − 1)(F + B − 2W); 2× the parameters a rank (each rank holds stage i and
stage PP − 1 − i; a block's parameters counted on transformers' GPT-2 block); PP + 1 micro-batches'
activations; and the one-line refusals (odd PP; an odd count of micro-batches or fewer than 2 × PP, as
deepseek-ai/DualPipe's DualPipe.step asserts)."""

import dataclasses

import pytest
from conftest import assert_one_line_error, tiny

from tfcalc.count.perf import pipeline
from tfcalc.count.training import rank_memory as rm
from tfcalc.count.training.layout import Layout, check_layout
from tfcalc.count.training.plan import make_plan, search
from tfcalc.count.training.search_space import SearchSpace
from tfcalc.count.training.steptime import Hardware, _stage_s
from tfcalc.errors import InputError

H100 = Hardware(989e12, 80 * 10**9, 450e9, 50e9, 8)


def layout(**changes) -> Layout:
    fields = dict(tp=1, pp=4, dp=1, seq=16, global_batch=8, micro_batch=1, schedule="dualpipe")
    fields.update(changes)
    return Layout(**fields)


def table2_idle(p: int, f: float, b_input: float, w: float) -> dict[str, float]:
    """Table 2's bubbles, its B the whole backward of a chunk (input + weight gradients) and F&B an
    overlapped forward-backward pair: as compute, F + B (the overlap hides communication)."""
    b = b_input + w
    return {"1f1b": (p - 1) * (f + b), "zero-bubble": (p - 1) * (f + b - 2 * w),
            "dualpipe": (p / 2 - 1) * ((f + b) + b - 3 * w)}


@pytest.mark.parametrize("p, m, f, b_input, w", [(4, 8, 1.0, 1.0, 1.0), (8, 16, 1.0, 2.0, 1.5),
                                                 (8, 16, 2.0, 1.0, 3.0), (2, 4, 1.0, 1.0, 1.0)])
def test_bubble_is_table_2s(p, m, f, b_input, w):
    """Each schedule's idle time over m·(F + B + W) of work, as the report's Table 2 writes it; at
    F = B_input = W = 1 and p = 4: 1F1B 9, ZB1P 3, DualPipe 2 passes; p = 2 leaves DualPipe no bubble."""
    work = m * (f + b_input + w)
    for schedule, idle in table2_idle(p, f, b_input, w).items():
        L = layout(pp=p, global_batch=m, schedule=schedule)
        frac = pipeline.bubble_fraction(L, f, b_input, w)
        assert frac == pytest.approx(max(0.0, idle) / (work + max(0.0, idle))), schedule
    assert table2_idle(4, 1, 1, 1) == {"1f1b": 9, "zero-bubble": 3, "dualpipe": 2}
    if p == 2:
        assert pipeline.bubble_fraction(layout(pp=2, global_batch=m), f, b_input, w) == 0.0


def test_step_time_prices_the_dualpipe_bubble_with_the_models_f_b_w():
    """The plan's bubble is Table 2's with the F, B and W of the performance model's micro-batch on the
    slowest stage (the parts zero-bubble reads: tfcalc.count.training.steptime), over m·(F + B + W): the
    same compute as 1F1B's, a smaller bubble."""
    cfg = tiny(n_layer=8, max_seq_len=16)
    s = _stage_s(cfg, layout(), H100)
    f, w = s.forward, s.weight_grad
    b_input = s.total - f - w
    assert f > 0 and w > 0 and b_input > 0
    m, idle = 8, table2_idle(4, f, b_input, w)["dualpipe"]
    dual = make_plan(cfg, layout(), H100, None).step
    one = make_plan(cfg, layout(schedule="1f1b"), H100, None).step
    assert dual.compute_s == pytest.approx(m * s.total) == pytest.approx(one.compute_s)
    assert dual.bubble == pytest.approx(idle / (m * s.total + idle))
    assert dual.pipelined_s == pytest.approx(m * s.total + idle)
    assert one.bubble == pytest.approx(3 / 11) and dual.bubble < one.bubble


GPT2_BLOCK = 12 * 32 * 32 + 13 * 32  # d 32: c_attn 3d² + 3d, c_proj d² + d, fc 4d² + 4d, proj 4d² + d, two norms 4d


def test_gpt2_block_count_is_transformers():
    from transformers import GPT2Config, GPT2Model

    hf = GPT2Model(GPT2Config(n_embd=32, n_layer=1, n_head=4, vocab_size=61, n_positions=16))
    assert sum(t.numel() for t in hf.h[0].parameters()) == GPT2_BLOCK


def test_each_rank_holds_twice_the_parameters():
    """Table 2's "Parameter 2×": a middle rank of p 4 over 8 blocks holds its 2 blocks and the mirrored
    stage's 2 (stage 1 and stage 2): 4 × a GPT-2 block, against 1F1B's 2; weights, gradients and Adam's
    states all twice (16 bytes a parameter in bf16 without ZeRO)."""
    cfg = tiny(n_layer=8, max_seq_len=16)
    dual, one = rm.stage_memory(cfg, layout(), 1), rm.stage_memory(cfg, layout(schedule="1f1b"), 1)
    assert one.params == 2 * GPT2_BLOCK and dual.params == 4 * GPT2_BLOCK
    assert (dual.weights, dual.grads, dual.optimizer) == (2 * 4 * GPT2_BLOCK, 2 * 4 * GPT2_BLOCK, 12 * 4 * GPT2_BLOCK)
    ends = rm.stage_memory(cfg, layout(), 0)  # the first rank holds both ends: stage 0's and stage 3's
    first, last = (rm.stage_memory(cfg, layout(schedule="1f1b"), s) for s in (0, 3))
    assert ends.params == first.params + last.params
    assert rm.rank_memory(cfg, layout()).states > rm.rank_memory(cfg, layout(schedule="1f1b")).states


@pytest.mark.parametrize("p, m", [(4, 8), (8, 16), (6, 12)])
def test_activations_of_p_plus_1_micro_batches(p, m):
    """Table 2's "Activation PP + 1" (at most the m there are), every rank alike, against 1F1B's p − i."""
    cfg = tiny(n_layer=2 * p, max_seq_len=16)
    for stage in range(p):
        assert pipeline.chunk_micro_batches(layout(pp=p, global_batch=m), stage) == [min(p + 1, m)]
        assert pipeline.chunk_micro_batches(layout(pp=p, global_batch=m, schedule="1f1b"), stage) == [p - stage]
    # a middle stage (no embedding, no head): the bytes scale with the count, (p + 1)/(p − 1) of 1F1B's
    dual = rm.stage_memory(cfg, layout(pp=p, global_batch=m), 1).activations
    one = rm.stage_memory(cfg, layout(pp=p, global_batch=m, schedule="1f1b"), 1).activations
    assert dual * (p - 1) == one * min(p + 1, m)


@pytest.mark.parametrize("changes, words", [
    (dict(pp=3, global_batch=6), "needs an even pp and an even count of micro-batches a step, at least 2 × pp; "
                                 "got pp 3, 6"),
    (dict(pp=4, global_batch=6), "got pp 4, 6 micro-batches"),
    (dict(pp=4, global_batch=9), "got pp 4, 9 micro-batches"),
    (dict(pp=1), "needs pp > 1"),
])
def test_refusals(changes, words):
    with pytest.raises(InputError, match=words) as e:
        check_layout(tiny(n_layer=12, max_seq_len=16), layout(**changes))
    assert "\n" not in str(e.value)


def test_search_tries_dualpipe_only_when_asked_and_where_it_applies():
    cfg = tiny(n_layer=8, max_seq_len=16)
    base = Layout(seq=16, global_batch=64)
    plans = search(cfg, 8, base, H100, None, space=dataclasses.replace(SearchSpace(), schedule="dualpipe"))
    assert any(p.layout.pp > 1 for p in plans)
    assert all(p.layout.schedule == "dualpipe" for p in plans if p.layout.pp > 1)
    assert all(p.layout.pp % 2 == 0 for p in plans if p.layout.pp > 1)
    assert "dualpipe" not in {p.layout.schedule for p in search(cfg, 8, base, H100, None, space=SearchSpace())}


def test_cli_schedule_dualpipe(cli):
    args = ("plan", "gpt2", "--pp", "4", "--dp", "2", "--global-batch", "32")
    j = cli(*args, "--schedule", "dualpipe", "--json").json()
    assert j["layout"]["schedule"] == "dualpipe" and "DualPipe" in cli(*args, "--schedule", "dualpipe").out
    assert j["step"]["bubble"] < cli(*args, "--json").json()["step"]["bubble"]
    assert_one_line_error(cli("plan", "gpt2", "--pp", "3", "--global-batch", "32", "--schedule", "dualpipe"),
                          "even pp")
