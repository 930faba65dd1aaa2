"""`infer --draft --measure`: speculative decoding run for real on this CPU with tiny models. The output is
the target's greedy output whatever the draft accepts (checked against plain decoding), a draft that is
the target accepts every proposal, a perturbed copy some; the JSON sets the measurement beside the
prediction at the measured acceptance; what cannot run is refused in one line. No timing thresholds."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import assert_one_line_error, tiny

from tfcalc.measure import bench
from tfcalc.measure.speculative import SpeculativePlan, _plain, _speculate, run_speculative
from tfcalc.model import build_model
from tfcalc.report import resolve
from tfcalc.report.infer import build_infer
from tfcalc.report.infer_options import InferOptions

ROPE = dict(pos_encoding="rope", vocab_size=64, max_seq_len=64, tie_embeddings=False)
TARGET = "name: tgt\nn_layer: 2\nd_model: 48\nn_head: 4\nvocab_size: 64\nmax_seq_len: 64\npos_encoding: rope\n" \
         "tie_embeddings: false\n"
DRAFT = TARGET.replace("name: tgt", "name: drf").replace("n_layer: 2", "n_layer: 1").replace("d_model: 48",
                                                                                              "d_model: 32")


@pytest.fixture
def yamls(tmp_path):
    (tmp_path / "tgt.yaml").write_text(TARGET)
    (tmp_path / "drf.yaml").write_text(DRAFT)
    return str(tmp_path / "tgt.yaml"), str(tmp_path / "drf.yaml")


def _against_a_perturbed_copy(cfg, noise: float, k: int, seq: int):
    """The target (fp64, seed 0) and, as the draft, a copy with N(0, noise²) added to every weight; a prompt of
    seq tokens: (the target's plain greedy 30 tokens, the speculated tokens, the loop, the plan of k a round)."""
    torch.manual_seed(0)
    target = build_model(cfg, "cpu", torch.float64).eval()
    draft = copy.deepcopy(target)
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(noise * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    prompt = torch.randint(0, cfg.vocab_size, (1, seq), generator=gen)
    plan = SpeculativePlan(target=cfg, draft=cfg, device="cpu", dtype="fp32", seq=seq, gen=30, k=k)
    with torch.inference_mode():
        greedy, _ = _plain(target, prompt, 30)
        tokens, loop, _ = _speculate(target, draft, prompt, plan, bench.HostClock(torch.device("cpu")))
    return greedy, tokens, loop, plan


@pytest.mark.parametrize("noise,k", [(0.0, 4), (0.001, 3), (0.005, 2), (0.01, 4), (1.0, 4)])
def test_the_output_is_the_targets_greedy_output_whatever_is_accepted(noise, k):
    """fp64, so that the verify step's and the decode step's argmax agree to rounding: a perturbed copy of the
    target as the draft accepts some proposals and not others, and every round's rewind keeps the output
    the target's (a wrong rewind or catch-up of the draft's cache would change the tokens)."""
    cfg = tiny(**ROPE)
    greedy, tokens, loop, _ = _against_a_perturbed_copy(cfg, noise, k, seq=6)
    assert tokens[:30] == greedy and len(tokens) == 30  # the last round proposes no token past gen
    assert loop.proposed == len(loop.draft_marks)  # one draft forward per proposal (a catch-up reads two tokens)
    if noise == 0:
        assert loop.accepted == loop.proposed and loop.rounds == -(-29 // (k + 1))
    elif noise < 1:
        assert 0 < loop.accepted < loop.proposed  # the rewinds were exercised both ways
    assert len(loop.verify_marks) == loop.rounds and len(tokens) - 1 == loop.accepted + loop.rounds


def test_a_draft_that_is_the_target_accepts_every_proposal():
    cfg = tiny(**ROPE)
    run = run_speculative(SpeculativePlan(target=cfg, draft=cfg, device="cpu", dtype="fp32", seq=5, gen=11, k=4))
    # rounds of 5, 5 tokens after the prefill's; then the generation needs none more
    assert run.exact and run.same_weights and run.accept_rate == 1 and (run.rounds, run.proposed) == (2, 8)
    assert run.produced == 10 and run.tokens_per_round == 5 and len(run.draft_steps.samples) == 8


@pytest.mark.parametrize("k", [3, 4])
def test_bf16_is_exact_against_the_same_kernels(k):
    """bf16 with the draft equal to the target (issue 29: on an H100 `exact` was false): every token kept
    is the target's greedy token as a verify step of k + 1 rows computes it, which the reference computes
    through steps of the same k + 1 rows (tfcalc.measure.speculative.same_kernel_greedy); the agreement
    with the plain one-token greedy decoding is reported beside it, with its first divergence."""
    cfg = tiny(**ROPE, n_layer=3, d_model=64)
    run = run_speculative(SpeculativePlan(target=cfg, draft=cfg, device="cpu", dtype="bf16", seq=5, gen=40, k=k,
                                          warmup=0))
    assert run.accept_rate == 1 and run.exact and run.agreement == 1 and run.first_divergence is None
    assert len(run.reference) == len(run.tokens) == len(run.greedy) == 40
    assert (run.plain_first_divergence is None) == (run.plain_agreement == 1) == (run.tokens == run.greedy)
    if run.plain_first_divergence is not None:
        d = run.plain_first_divergence
        assert run.tokens[:d] == run.greedy[:d] and run.tokens[d] != run.greedy[d]


def test_exact_holds_where_a_wider_step_rounds_otherwise(monkeypatch):
    """A GPU's bf16 kernels round a k + 1-row verify step otherwise than a one-row decode step; here a head
    that adds a fixed offset to every step of more than one row stands in for that. The output still equals
    the same-kernel reference (exact), and the plain greedy decoding's differs, its divergence reported."""
    from tfcalc.measure import speculative

    build = speculative.build_model
    offset = torch.randn(64, generator=torch.Generator().manual_seed(7))

    def built(*args, **kwargs):
        model = build(*args, **kwargs)
        model.lm_head.register_forward_hook(lambda m, i, out: out + offset * (out.shape[1] > 1))
        return model

    monkeypatch.setattr(speculative, "build_model", built)
    cfg = tiny(**ROPE)
    run = run_speculative(SpeculativePlan(target=cfg, draft=cfg, device="cpu", dtype="fp32", seq=5, gen=30, k=3,
                                          warmup=0))
    assert run.exact and run.agreement == 1 and run.first_divergence is None
    d = run.plain_first_divergence
    assert d is not None and run.plain_agreement < 1
    assert run.tokens[:d] == run.greedy[:d] and run.tokens[d] != run.greedy[d]


def test_measured_json_beside_the_prediction(yamls):
    target, draft = yamls
    o = InferOptions(batches=(1,), seq=6, gen=12, dtype="fp32", measure=True, warmup=0, repeat=1, matmul_size=16,
                     copy_bytes=2**16, draft=target, accept_rate=0.5, draft_tokens=3)
    r = build_infer(resolve(target, []), o).to_json()
    s = r["speculative"]
    m = s["measured"]
    assert m["exact"] and m["same_weights"] and m["accept_rate"] == 1 and m["tokens_checked"] == 12
    assert m["agreement"] == m["plain_agreement"] == 1 and m["first_divergence"] is None  # fp32: both references
    assert m["proposed"] == m["accepted"] and m["tokens_per_round"] == pytest.approx(11 / m["rounds"])
    p = m["predicted_at_measured"]  # the round of the prediction (its steps) at A = 1: K + 1 tokens
    assert p["expected_tokens_per_step"] == 4 and p["round_s"] == pytest.approx(s["round_s"])
    assert p["decode_s_per_token"] == pytest.approx(s["round_s"] / 4)
    assert m["ratio"]["decode"] == pytest.approx(p["decode_s_per_token"] / m["decode_s_per_token"])
    assert m["speedup"] == pytest.approx(m["plain_decode_s_per_token"] / m["decode_s_per_token"])
    assert s["accept_rate"] == 0.5 and r["measured"] is True  # the given A's prediction stays beside
    other = build_infer(resolve(target, []), InferOptions(**{**o.__dict__, "draft": draft})).to_json()
    m = other["speculative"]["measured"]
    assert m["exact"] and not m["same_weights"] and m["accept_rate"] < 0.5  # random weights: chance


def test_measured_table_on_screen(cli, yamls):
    target, _ = yamls
    r = cli("infer", target, "--measure", "--seq", "6", "--gen", "6", "--warmup", "0", "--repeat", "1",
            "--copy-size", "64KiB", "--draft", target, "--accept-rate", "0.5", "--draft-tokens", "2")
    assert r.code == 0, r.err
    assert "Speculative decoding measured on cpu" in r.out and "equal to the target's greedy output" in r.out
    csv = cli("infer", target, "--measure", "--seq", "6", "--gen", "4", "--warmup", "0", "--repeat", "1",
              "--copy-size", "64KiB", "--draft", target, "--accept-rate", "0.5", "--format", "csv", "--table",
              "speculative-measured")
    assert csv.code == 0, csv.err
    assert csv.out.splitlines()[0].startswith("figure,") and "verify step" in csv.out


@pytest.mark.parametrize("extra,message", [
    (("--batch", "2"), "give --batch 1"),
    (("--tp", "2"), "not measured"),
    (("--set", "pos_encoding=alibi"), "position biases"),
    (("--draft-tokens", "0"), "--draft-tokens must be an integer"),
])
def test_what_cannot_run_is_refused_in_one_line(cli, yamls, extra, message):
    target, draft = yamls
    assert_one_line_error(cli("infer", target, "--measure", "--seq", "6", "--gen", "6", "--draft", draft,
                              "--accept-rate", "0.5", *extra), message)


RINGS = {  # windowed and chunked models (their caches rings: tfcalc.model.attention_state), wrapped many times
    "mistral": dict(sliding_window=4),
    "gemma2": dict(n_layer=4, sliding_window=3, full_attention_every=2, attn_softcap=50.0, norm_placement="sandwich"),
    "gpt-oss": dict(attn_sinks=True, sliding_window=4, full_attention_every=2, n_head=4, n_kv_head=2,
                    n_expert=4, n_expert_active=2),
    "llama4": dict(n_layer=4, attention_chunk_size=3, full_attention_every=2, nope_every=2, qk_l2_norm=True),
}


@pytest.mark.parametrize("kind", RINGS, ids=RINGS.keys())
@pytest.mark.parametrize("noise,k", [(0.0, 4), (0.002, 3), (0.002, 2)])
def test_windowed_and_chunked_models_run_rounds_exactly(kind, noise, k):
    """Rings with k spare slots (W + k): every verify of k + 1 tokens and every rewind keeps the output the
    target's greedy output (fp64), rounds accepting all, some and none; the caches allocate what the count
    says with k spare slots, more than a plain decode's rings."""
    from tfcalc.count.model.memory import kv_cache_bytes
    from tfcalc.measure.speculative import state_bytes
    from tfcalc.workload import Workload

    cfg = tiny(**ROPE, **RINGS[kind])
    greedy, tokens, loop, plan = _against_a_perturbed_copy(cfg, noise, k, seq=5)
    assert tokens[:30] == greedy and len(tokens) == 30
    if noise == 0:
        assert loop.accepted == loop.proposed
    else:
        assert 0 < loop.accepted < loop.proposed  # the rewinds were exercised both ways
    counted = state_bytes(plan)  # fp32's count; the caches here are fp64: twice the bytes
    assert (loop.tc.nbytes, loop.dc.nbytes) == (2 * counted[0], 2 * counted[1])
    plain = kv_cache_bytes(cfg, Workload(batch=1, seq=plan.positions + k, dtype="fp32"))
    assert counted[0] > plain  # the rings grew by k slots; a plain decode's did not


def test_a_windowed_model_runs_rounds_from_the_command_line(cli, yamls, tmp_path):
    """`infer <windowed> --draft <windowed> --measure` (issue 29: refused before): exact, and the state the
    caches allocated equal to the count's, said on screen and in the JSON."""
    windowed, small = tmp_path / "win.yaml", tmp_path / "winsmall.yaml"
    windowed.write_text(TARGET.replace("name: tgt", "name: win") + "sliding_window: 4\n")
    small.write_text(DRAFT.replace("name: drf", "name: winsmall") + "sliding_window: 3\n")
    args = ("infer", str(windowed), "--measure", "--seq", "6", "--gen", "14", "--warmup", "0", "--repeat", "1",
            "--copy-size", "64KiB", "--accept-rate", "0.5", "--draft-tokens", "3")
    for draft in (windowed, small):
        r = cli(*args, "--draft", str(draft), "--json")
        assert r.code == 0, r.err
        import json

        m = json.loads(r.out)["speculative"]["measured"]
        p = m["predicted_at_measured"]
        assert m["exact"] and m["ring_spare_slots"] == 3
        assert (m["kv_cache_bytes"], m["draft_kv_cache_bytes"]) == (p["kv_cache_bytes"], p["draft_kv_cache_bytes"])
    screen = cli(*args, "--draft", str(small))
    assert screen.code == 0, screen.err
    assert "equal to the target's greedy output" in screen.out and "3 spare slots" in screen.out


def test_what_does_not_fit_is_refused_before_anything_runs(cli, yamls, monkeypatch):
    from tfcalc.measure.fit import Limit

    monkeypatch.setattr("tfcalc.measure.fit.tightest_limit", lambda *a: Limit(10_000, "free memory on cpu"))
    target, draft = yamls
    assert_one_line_error(cli("infer", target, "--measure", "--seq", "6", "--gen", "6", "--draft", draft,
                              "--accept-rate", "0.5"), "not running speculative decoding of tgt with draft drf")
