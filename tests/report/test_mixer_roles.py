"""The reports name each token mixer's parts by the role it declares (tfcalc.architecture.mixer.MixerRole): a Mamba2
layer's weights and FLOPs are "SSM", a gated DeltaNet's "DeltaNet" and its "delta-rule recurrence", LFM2's short
convolution "short conv", never "attention" -- and the parts still add up to the totals.

The independent reference: the real module on meta, its parameters grouped by the class of the mixer module that
holds them (the test's own map, below), and FlopCounterMode's count per module (a mixer's nn.Linear children are
its projections, the rest of the mixer module its position mixing), at full published size."""

from __future__ import annotations

import pytest
import torch

from tfcalc.count.model import flops as count_flops, params as count_params
from tfcalc.model import build_model
from tfcalc.presets import load
from tfcalc.workload import Workload

# the mixer module's class -> (its parameter group, its projections' FLOP group, its mixing's FLOP group)
BY_CLASS = {"Attention": ("attention", "attention_proj", "attention_scores"),
            "Mamba2Mixer": ("ssm", "ssm_proj", "ssm_scan"),
            "GatedDeltaNetModule": ("deltanet", "deltanet_proj", "delta_rule"),
            "ShortConvModule": ("conv", "conv_proj", "conv")}
HYBRIDS = {  # preset -> the titles its tables show (and the mixer classes its layers hold)
    "nemotron-3-nano-30b-a3b": ("SSM projections", "SSM scan", "Attention projections"),
    "qwen3-next-80b-a3b": ("DeltaNet projections", "Delta-rule recurrence", "Attention projections"),
    "lfm2-1.2b": ("Short-conv projections", "Short conv (depthwise)", "Attention projections"),
    "codestral-mamba-7b": ("SSM projections", "SSM scan"),
}
SEQ = 512  # a whole number of Mamba2's (256) and DeltaNet's (64) chunks


def _mixers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """{path: module} of every block's mixer slot that holds a mixer (an FFN-alone layer's holds none)."""
    return {name: m for name, m in model.named_modules()
            if name.startswith("blocks.") and name.endswith(".attn") and type(m).__name__ in BY_CLASS}


def _is_norm(module: torch.nn.Module) -> bool:
    return "Norm" in type(module).__name__


@pytest.mark.parametrize("preset", list(HYBRIDS))
def test_params_by_role_match_the_module_grouped_by_mixer_class(cli, preset):
    cfg = load(preset)
    data = cli("params", preset, "--json").json()
    by_role = data["groups_by_role"]
    model = build_model(cfg, "meta")
    want = dict.fromkeys(by_role, 0)
    for mixer in _mixers(model).values():  # a mixer's tensors, its norms left to "norms"
        group = BY_CLASS[type(mixer).__name__][0]
        for sub in mixer.modules():
            if not _is_norm(sub):
                want[group] += sum(p.numel() for p in sub.parameters(recurse=False))
    for group in {v[0] for v in BY_CLASS.values()} & set(by_role):
        assert by_role[group] == want[group], group
    total = sum(p.numel() for p in model.parameters())
    assert sum(by_role.values()) == data["analytic_total"] == total
    # the old keys keep their meaning: "attention" is the whole token-mixer sub-layer
    mixers = sum(by_role[g] for g in ("attention", "ssm", "deltanet", "conv") if g in by_role)
    assert data["groups"]["attention"] == mixers
    assert {r["params"] for r in data["mixer_roles"]} <= set(by_role)


@pytest.mark.parametrize("preset", list(HYBRIDS))
def test_flops_by_role_match_flop_counter_per_module(cli, preset):
    from tfcalc.measure.flops import flop_counter, model_inputs

    cfg = load(preset)
    data = cli("flops", preset, "--seq", str(SEQ), "--json").json()
    by_role = data["breakdown_by_role"]
    model = build_model(cfg, "meta")
    counter = flop_counter()
    args, kwargs = model_inputs(cfg, Workload(batch=1, seq=SEQ), "meta")
    with torch.no_grad(), counter:
        model(*args, **kwargs)
    counts = {path: sum(ops.values()) for path, ops in counter.get_flop_counts().items()}
    root = type(model).__name__
    want = dict.fromkeys(by_role, 0)
    for path, mixer in _mixers(model).items():
        _, proj, mixing = BY_CLASS[type(mixer).__name__]
        linears = sum(counts.get(f"{root}.{path}.{name}", 0) for name, sub in mixer.named_children()
                      if isinstance(sub, torch.nn.Linear))
        want[proj] += linears
        want[mixing] += counts.get(f"{root}.{path}", 0) - linears
    for proj, mixing in {v[1:] for v in BY_CLASS.values()}:
        if proj in by_role:
            assert (by_role[proj], by_role[mixing]) == (want[proj], want[mixing]), proj
    assert sum(by_role.values()) == data["forward_flops"] == counter.get_total_flops()
    # the old keys keep the whole token-mixer sub-layer, so a script reading them reads what it read before
    roles = data["mixer_roles"]
    assert data["breakdown"]["attention_proj"] == by_role["attention_proj"] + sum(by_role[r["proj"]] for r in roles)
    assert data["breakdown"]["attention_scores"] == by_role["attention_scores"] + sum(
        by_role[r["mixing"]] for r in roles)
    assert sum(data["breakdown_by_role_causal"].values()) == data["forward_flops_causal"]
    assert sum(data["per_layer_by_role"].values()) == sum(
        e.per_copy for e in count_flops.breakdown(cfg, Workload(seq=SEQ)).entries
        if e.group in count_flops.BLOCK_GROUPS)


@pytest.mark.parametrize("preset", list(HYBRIDS))
def test_tables_name_each_mixer_by_its_role(cli, preset):
    params = cli("params", preset).out
    flops = cli("flops", preset, "--seq", "4096").out
    for title in HYBRIDS[preset]:
        assert title in flops, title
    role = {"nemotron": "SSM", "qwen3": "DeltaNet", "lfm2": "Short conv", "codestral": "SSM"}[preset.split("-")[0]]
    assert f"\n{role} " in params
    scan = " ".join(cli("scan", preset).out.split())  # the note, its lines joined
    assert "the position mixing (" in scan and HYBRIDS[preset][1] in scan and "whole mixer sub-layer" in scan
    if "Attention projections" not in HYBRIDS[preset]:  # Codestral Mamba: no layer attends
        assert "Attention" not in params and "Attention projections" not in flops
        assert "overtake" not in flops or "attention" not in flops.split("overtake")[0]
    else:
        assert "When does the token mixing overtake the FFN" in flops
        assert "the whole mixer sub-layer" in flops and "the whole attention sub-layer" not in flops


def test_a_model_of_attention_alone_reports_as_before(cli):
    """No new key, no new row: the reports of a model whose mixers are all attention are what they were."""
    p = cli("params", "gpt2", "--json").json()
    f = cli("flops", "gpt2", "--json").json()
    assert not {"groups_by_role", "mixer_roles"} & set(p) and not {"breakdown_by_role", "mixer_roles"} & set(f)
    assert list(p["groups"]) == list(count_params.GROUPS) and list(f["breakdown"]) == list(count_flops.GROUPS)
    text = cli("flops", "gpt2").out
    assert "When does attention overtake the FFN in gpt2? Per layer, the attention scores" in text


@pytest.mark.parametrize("preset, mixer", [("nemotron-3-nano-30b-a3b", "ssm"), ("codestral-mamba-7b", "ssm"),
                                           ("qwen3-next-80b-a3b", "deltanet"), ("lfm2-1.2b", "conv")])
def test_memory_names_the_terms_of_a_layer_of_another_mixer(cli, preset, mixer):
    """"Per layer" is the commonest block: where its mixer is not attention, its terms carry its own labels (a
    Mamba2 layer's scan is no softmax), and the JSON says which mixer they are of."""
    activations = cli("memory", preset, "--seq", "4096", "--json").json()["activations"]
    assert activations["per_layer_mixer"] == mixer
    assert set(activations["per_layer_labels"]) <= set(activations["per_layer"])
    text = cli("memory", preset, "--seq", "4096", "--verbose").out
    assert "softmax scores" not in text and "Q, K, V" not in text
    for label in activations["per_layer_labels"].values():
        assert label.split(":")[0] in text
    assert "per_layer_mixer" not in cli("memory", "gpt2", "--json").json()["activations"]


def test_the_width_note_re_reads_only_the_attention_layers():
    """Nemotron-3-Nano: 32 heads of 128 (4096 wide) over d_model 2688 in its 6 attention layers (2 KV heads, no
    biases); its 23 Mamba2 and 23 FFN-alone layers have no such width. With attention 2688 wide (d_head 84, 2 KV
    heads of 84) each attention layer holds 2·d·d + 2·d·168 in place of 2·d·4096 + 2·d·256: by hand,
    6 · (2·2688·(4096 + 256) − 2·2688·(2688 + 168)) = 48,254,976 fewer parameters."""
    from tfcalc.count.model.params import total, width_note

    cfg = load("nemotron-3-nano-30b-a3b")
    note = width_note(cfg)
    assert note.total_attention_d_model_wide == total(cfg) - 48_254_976
    d = 2688
    assert 48_254_976 == 6 * (2 * d * (4096 + 256) - 2 * d * (d + 168))


def test_compare_says_a_hybrids_attention_shares_are_its_mixers(cli):
    """compare's "attention" shares keep their JSON keys and values (the whole token-mixer sub-layer); beside a
    hybrid, the rows say so and the hybrid's row names its other mixers' roles."""
    rows = cli("compare", "gpt2", "nemotron-3-nano-30b-a3b", "--json").json()
    assert "mixer_roles" not in rows[0] and [r["params"] for r in rows[1]["mixer_roles"]] == ["ssm"]
    cfg = load("nemotron-3-nano-30b-a3b")
    groups = count_params.group_totals(cfg, count_params.breakdown(cfg))
    assert rows[1]["attention_param_share"] == groups["attention"] / count_params.total(cfg)
    text = cli("compare", "gpt2", "nemotron-3-nano-30b-a3b").out
    assert "token-mixer (attention, SSM) share of params" in text


def test_scan_plot_labels_a_hybrids_series_by_its_roles(cli, tmp_path):
    from tfcalc.cli.render.plot import _mixer_labels, scan_plot

    report = cli("scan", "qwen3-next-80b-a3b", "--json").json()
    labels = _mixer_labels(report)
    assert labels == {"attention_scores": "position mixing (attention scores, Delta-rule recurrence)",
                      "attention_proj": "projections (attention, DeltaNet)"}
    scan_plot(report, tmp_path / "scan.png")
    assert (tmp_path / "scan.png").stat().st_size > 0
    assert _mixer_labels(cli("scan", "gpt2", "--json").json()) == {}
