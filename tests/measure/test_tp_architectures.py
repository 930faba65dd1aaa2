"""Tensor parallelism applied from the description (tfcalc.measure.parallelize), run on 2 gloo ranks in one
launch: small copies (tfcalc.report.plan_check.small_copy) of gemma-2-9b (sandwich norms, soft-caps,
alternating windows), qwen2-7b (Q/K/V biases, no O bias), falcon-7b (one norm shared by a parallel block),
gpt2 (a tied embedding and head: one vocabulary-split tensor), mixtral (routed experts whole on every rank),
mixtral with a gated shared expert (Qwen2-MoE's: split as a dense FFN) and transformer-base (an
encoder-decoder: cross-attention split as self-attention), also with untied tables (each stack's lookups
gathered) and pre-norm with a final norm.

- every rank computes the single-device model's loss (the shards hold consistent heads and columns);
- rank 0's weights, gradients and Adam states are the description's tensors split as each one's ``tp``
  says, rank 0 holding torch.chunk's first block -- summed here from ``Architecture.weights()``, not by
  tfcalc.count.training.shard;
- the plan's model states and collectives (bytes and calls) are the measured ones, for every one of them
  (encoder-decoders included: a cross-attention's reductions, and its K/V input's gradient, measured).
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch
import torch.nn.functional as F

from tfcalc.config import replace
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.plan import make_plan
from tfcalc.count.training.steptime import Hardware
from tfcalc.errors import InputError
from tfcalc.measure.launch import launch
from tfcalc.measure.parallelize import check_measurable
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.report.plan_check import small_copy

LAYOUT = Layout(tp=2, pp=1, dp=1, seq=16, global_batch=2, micro_batch=1, dtype="fp32")
CFGS = {n: replace(small_copy(load(n), 2), n_layer=2)
        for n in ["gemma-2-9b", "qwen2-7b", "falcon-7b", "gpt2", "mixtral-8x7b", "transformer-base"]}
CFGS["mixtral-shared"] = replace(CFGS["mixtral-8x7b"], shared_expert_d_ff=32, shared_expert_gate=True)
CFGS["transformer-untied-pre"] = replace(CFGS["transformer-base"], tie_embeddings=False, tie_encoder_embedding=False,
                                         norm_placement="pre", final_norm=True, n_encoder_layer=1)
NAMES = list(CFGS)
# and the encoder-decoder under FSDP2 (dp 2, ZeRO-3: each encoder and decoder block its own unit), which the
# plan covers: its states and collectives must be the plan's
FSDP = dataclasses.replace(LAYOUT, tp=1, dp=2, zero=3, global_batch=4)
HW = Hardware(1e12, 10**12, 1e9, 1e9, 8)


@pytest.fixture(scope="module")
def runs():
    for cfg in CFGS.values():
        check_measurable(cfg, LAYOUT)
    jobs = [dict(config=dataclasses.asdict(c), layout=dataclasses.asdict(LAYOUT)) for c in CFGS.values()]
    jobs.append(dict(config=dataclasses.asdict(CFGS["transformer-base"]), layout=dataclasses.asdict(FSDP)))
    return dict(zip([*NAMES, "transformer-base-fsdp"], launch(jobs, 2, device="cpu"), strict=True))


def rank0_elements(cfg, tp: int) -> int:
    """Parameters on TP rank 0: each tensor of the description once (a tied one where it is counted), its
    split dimension cut to torch.chunk's first block, ⌈n/tp⌉."""
    total = 0
    for placed in cfg.architecture.weights():
        w = placed.weight
        if w.tied_to:
            continue
        shape = list(w.shape)
        if w.tp is not None:
            dim = 0 if w.tp == "rows" else 1
            shape[dim] = -(-shape[dim] // tp)
        total += math.prod(shape) * w.copies * placed.layers
    return total


@pytest.mark.parametrize("name", NAMES)
def test_each_rank_computes_the_single_device_loss(runs, name):
    cfg = CFGS[name]
    torch.manual_seed(0)  # the ranks' seed: the same weights before sharding
    model = build_model(cfg, "cpu").train()
    idx = torch.randint(0, cfg.vocab_size, (1, LAYOUT.seq), generator=torch.Generator().manual_seed(1000))
    with torch.no_grad():
        logits = model(idx, idx) if cfg.arch == "encoder-decoder" else model(idx)
    expected = F.cross_entropy(logits.float().view(-1, cfg.vocab_size), idx.view(-1)).item()
    for r in runs[name]:
        assert r["first_loss"] == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_rank0_states_are_the_descriptions_tensors_split(runs, name):
    n = rank0_elements(CFGS[name], LAYOUT.tp)
    r0 = runs[name][0]
    assert (r0["weights_bytes"], r0["grads_bytes"], r0["optimizer_bytes"]) == (4 * n, 4 * n, 8 * n)


def test_states_and_collectives_equal_the_plans_where_it_plans_the_model(runs):
    covered = []
    for name in NAMES:
        try:
            plan = make_plan(CFGS[name], LAYOUT, HW, 0.5)
        except InputError:
            continue
        covered.append(name)
        r0 = runs[name][0]
        assert (r0["weights_bytes"], r0["grads_bytes"], r0["optimizer_bytes"]) == (
            plan.memory.weights, plan.memory.grads, plan.memory.optimizer), name
        measured = {(c["cause"], c["op"]): (c["payload_bytes"], c["calls"]) for c in runs[name][0]["collectives"]}
        assert measured == {(c.cause, c.op): (c.payload_bytes, c.calls) for c in plan.collectives}, name
    assert covered == NAMES


def test_an_encoder_decoder_under_fsdp_is_planned_exactly(runs):
    plan = make_plan(CFGS["transformer-base"], FSDP, HW, 0.5)
    r0 = runs["transformer-base-fsdp"][0]
    assert (r0["weights_bytes"], r0["grads_bytes"], r0["optimizer_bytes"]) == (
        plan.memory.weights, plan.memory.grads, plan.memory.optimizer)
    measured = {(c["cause"], c["op"]): (c["payload_bytes"], c["calls"]) for c in r0["collectives"]}
    assert measured == {(c.cause, c.op): (c.payload_bytes, c.calls) for c in plan.collectives}


def test_what_a_run_under_tp_does_not_split_is_refused():
    for changes, message in [(dict(pos_encoding="alibi"), "position bias"),
                             (dict(arch="encoder-decoder", pos_encoding="relative"), "position bias")]:
        with pytest.raises(InputError, match=message):
            check_measurable(replace(CFGS["gpt2"], **changes), LAYOUT)
    moe_sp = dataclasses.replace(LAYOUT, sequence_parallel=True)
    with pytest.raises(InputError, match="sequence parallelism"):
        check_measurable(CFGS["mixtral-8x7b"], moe_sp)


def test_a_module_run_twice_in_one_recorded_section_is_tolerated():
    """An encoder-decoder's shared token embedding runs twice per forward; CommDebugMode's module tracker
    alone would raise IndexError on the second (tfcalc.measure.collectives._tolerate_repeated_modules)."""
    from tfcalc.measure.collectives import CollectiveLog

    shared = torch.nn.Embedding(5, 4)
    model = torch.nn.ModuleDict({"a": shared, "b": torch.nn.Sequential(shared)})
    log = CollectiveLog({})
    with log.section("forward"):
        model["a"](torch.tensor([1])) + model["b"](torch.tensor([2]))
    assert log.collectives() == []


def test_a_tracker_without_the_internal_is_left_as_it_is():
    """Another torch whose tracker lacks the hook: nothing is patched, the plain CommDebugMode runs."""
    from types import SimpleNamespace

    from tfcalc.measure.collectives import _tolerate_repeated_modules

    mode = SimpleNamespace(advanced_module_tracker=SimpleNamespace(parent_list=["Global"]))
    _tolerate_repeated_modules(mode)
    assert vars(mode.advanced_module_tracker) == {"parent_list": ["Global"]}
    _tolerate_repeated_modules(SimpleNamespace())  # no tracker at all
