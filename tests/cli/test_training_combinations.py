"""The training options of issue 31 with each other and with plan's searches (review of --optimizer muon,
--lora-rank/--lora-targets/--base-dtype, the CP ring's --overlap cp and perf.gpu_variation): each combination a
coherent answer or one line."""

from pathlib import Path

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.errors import InputError

# Llama 2 7B (32 layers, d = 4,096): rank 8 on q and v is 32 · 2 · 8 · (4,096 + 4,096) parameters (Hu et al. 2021)
A_QV = 32 * 2 * 8 * (4096 + 4096)
GRAND_TETON = Path(__file__).parents[2] / "benchmarks" / "devices" / "grand-teton-h100-500w.yaml"
GEMMA = ("plan", "gemma-3-27b", "--seq", "1024", "--global-batch", "64", "--micro-batch", "1", "--json")


def test_gpus_auto_finds_the_fewest_gpus_muons_state_fits(cli):
    """Muon keeps one fp32 moment on the matrices where AdamW keeps two: gemma-3-27b fits 4 GPUs under Muon (a
    layout given at --gpus 4), where AdamW's 16 bytes a parameter need more than 5 (16 · 27.0e9 / 78.0 GiB). The
    search's GPU floor took AdamW's 16 bytes under Muon too and started at 6 (it answered 8)."""
    four = cli(*GEMMA, "--gpus", "4", "--optimizer", "muon").json()
    assert four["layout"]["gpus"] == 4 and four["fits"]
    assert four["per_rank"]["total_bytes"] <= four["device_usable_bytes"]
    auto = cli(*GEMMA, "--gpus", "auto", "--optimizer", "muon").json()
    assert auto["layout"]["gpus"] == 4 and auto["step"]["optimizer"] == "muon"
    adam = cli(*GEMMA, "--gpus", "auto").json()
    assert 16 * adam["params"] > 5 * adam["device_usable_bytes"] and adam["layout"]["gpus"] > 5


def test_a_muon_search_that_fits_nothing_says_which_offload_it_tried(cli):
    """ZeRO-Offload steps Adam on the CPU: a Muon search offloads activations only, and says so (it said
    'with offload too', where AdamW's search finds a layout of 8 GPUs with the optimizer offloaded)."""
    r = cli("plan", "llama2-70b", "--gpus", "8", "--optimizer", "muon")
    assert_one_line_error(r, "(with activation offload too; optimizer offload is not modelled with Muon)")
    adam = cli("plan", "llama2-70b", "--gpus", "8", "--json").json()
    assert "optimizer" in adam["layout"]["offload"]


def test_overlap_cp_in_a_search_applies_where_the_layout_has_a_ring():
    """--overlap cp as --overlap tp and pp: kept on the layouts it applies to (cp > 1). At 8,192 tokens a search
    tries no CP (each rank keeps at least 8,192 positions): the answer is the search's without the flag (it was
    'no layout of 8 GPUs splits llama3-8b'); at 32,768 the CP layout keeps it and its ring is hidden."""
    args = dict(gpus=8, global_batch=8, kernels="compile", zero=3, device_spec="h100-sxm")
    short, plain = (tfcalc.plan("llama3-8b", seq=8192, overlap=o, **args).plan for o in (("cp",), ()))
    assert short.layout == plain.layout and short.step.overlap_s == plain.step.overlap_s
    long = tfcalc.plan("llama3-8b", seq=32768, overlap=("cp",), max_seq_len=32768, **args).plan
    assert long.layout.cp > 1 and long.layout.overlap == ("cp",) and long.step.exposed_s["cp"] == 0.0


@pytest.mark.parametrize("args", [("--gpus", "8"), ("--gpus", "1"), ()])
def test_lora_with_gpus_alone_says_to_give_dp(cli, args):
    """A LoRA plan prices one layout; --gpus without --dp searches (its line said 'give --dp (or --gpus)')."""
    assert_one_line_error(cli("plan", "llama2-7b", *args, "--lora-rank", "8"),
                          "give --dp (--gpus alone searches), drop --measure")


def test_muon_with_lora_is_refused_in_one_line_on_both_commands(cli):
    assert_one_line_error(cli("plan", "llama2-7b", "--dp", "8", "--lora-rank", "8", "--optimizer", "muon"),
                          "plan --lora-rank is priced with Adam: drop --optimizer or --lora-rank")
    assert_one_line_error(cli("memory", "llama2-7b", "--training", "--lora-rank", "8", "--optimizer", "muon"),
                          "--lora-rank is priced with adam-mixed, adam or sgd, not --optimizer muon")


def test_the_python_api_takes_loras_keywords(cli):
    """tfcalc.memory/plan(lora_rank=, lora_targets=, base_dtype=) answer as the flags do (they were read as
    config overrides: 'unknown field lora_rank')."""
    m = tfcalc.memory("llama2-7b", training=True, seq=2048, lora_rank=8, lora_targets=("v", "q")).to_json()
    assert m["lora"]["trainable_params"] == A_QV == 4_194_304
    assert m == cli("memory", "llama2-7b", "--training", "--seq", "2048", "--lora-rank", "8", "--json").json()
    args = ("--dp", "8", "--zero", "2", "--seq", "4096", "--global-batch", "64", "--device-spec", "h100-sxm")
    p = tfcalc.plan("llama2-7b", dp=8, zero=2, seq=4096, global_batch=64, lora_rank=8, base_dtype="nf4").to_json()
    assert p == cli("plan", "llama2-7b", *args, "--lora-rank", "8", "--base-dtype", "nf4", "--json").json()
    assert p["lora"]["trainable_params"] == A_QV


@pytest.mark.parametrize("kw, message", [
    (dict(lora_rank=8.5), "lora_rank must be a whole number; got 8.5"),
    (dict(lora_rank=True), "lora_rank must be a whole number; got True"),
    (dict(lora_rank=-1), "lora_rank must be 0 (off) or positive"),
    (dict(lora_rank=10**30), "exceeds q's smaller dimension 4096"),
    (dict(lora_rank=8, lora_targets=3), "lora_targets must be names, comma-separated; got 3"),
    (dict(lora_rank=8, lora_targets=["q", 3]), "lora_targets must be names"),
    (dict(lora_rank=8, lora_targets="[red]x[/red]"), "unknown lora_targets '[red]x[/red]'"),
    (dict(lora_rank=8, lora_targets="all-linear,q"), "all-linear stands alone"),
    (dict(lora_rank=8, base_dtype=4), "unknown base_dtype 4"),
    (dict(lora_rank=8, base_dtype="[red]x[/red]"), "unknown base_dtype '[red]x[/red]'"),
    (dict(lora_targets="q"), "lora_targets needs lora_rank"),
])
def test_bad_lora_values_through_the_api_are_one_line(kw, message):
    for call in (lambda: tfcalc.memory("llama2-7b", training=True, **kw), lambda: tfcalc.plan("llama2-7b", dp=8, **kw)):
        with pytest.raises(InputError) as e:
            call()
        assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("args, message", [
    (["--lora-targets", "all-linear,q"], "--lora-targets all-linear stands alone"),
    (["--lora-targets", "[red]x[/red]"], "unknown --lora-targets '[red]x[/red]'"),
    (["--base-dtype", "[red]x[/red]"], "unknown --base-dtype '[red]x[/red]'"),
])
def test_bad_lora_values_on_the_cli_are_one_line(cli, args, message):
    assert_one_line_error(cli("memory", "llama2-7b", "--training", "--lora-rank", "8", *args), message)


@pytest.mark.parametrize("value", [".inf", "-1", "1e9", "fast", "'[red]x[/red]'", "[0.08]"])
def test_hostile_gpu_variation_is_one_line(cli, tmp_path, value):
    path = tmp_path / "mine.yaml"
    path.write_text(GRAND_TETON.read_text().replace("perf: {sustained_clock: 0.877}",
                                                    f"perf: {{sustained_clock: 0.877, gpu_variation: {value}}}"))
    r = cli("plan", "llama2-7b", "--dp", "8", "--device-spec", str(path))
    assert_one_line_error(r, "field 'perf.gpu_variation' must be a fraction in [0, 1)")


def test_all_linear_adapts_the_linears_the_model_has(cli):
    """PEFT's target_modules="all-linear" adapts every linear of the block: GPT-2's FFN has no gate (it answered
    "gpt2 has no 'gate' linear to adapt"). 12 layers, d = 768, f = 3,072, q, k, v, o and up, down as tfcalc's module
    stores them: 12 · 8 · (4 · (768 + 768) + 2 · (768 + 3,072)). A gate named explicitly is still refused."""
    want = 12 * 8 * (4 * (768 + 768) + 2 * (768 + 3072))
    m = cli("memory", "gpt2", "--training", "--lora-rank", "8", "--lora-targets", "all-linear", "--json").json()
    assert m["lora"]["targets"] == ["q", "k", "v", "o", "up", "down"] and m["lora"]["trainable_params"] == want
    p = cli("plan", "gpt2", "--dp", "2", "--lora-rank", "8", "--lora-targets", "all-linear", "--json").json()
    assert p["lora"] == {"rank": 8, "targets": ["q", "k", "v", "o", "up", "down"], "trainable_params": want}
    assert_one_line_error(cli("memory", "gpt2", "--training", "--lora-rank", "8", "--lora-targets", "q,gate"),
                          "gpt2 has no 'gate' linear to adapt")
