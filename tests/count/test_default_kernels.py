"""The kernels a plan prices when --kernels is not given (tfcalc.count.training.layout.default_kernels): eager for
attention models (PyTorch op by op, torchtitan's published runs), fused for a model with a mixer whose published
training runs its own fused kernels -- mamba_ssm's selective scan (Mamba-1) and SSD (Mamba-2), the
flash-linear-attention kernels of gated DeltaNet and Kimi Delta Attention, MiniMax's lightning kernels -- whose
op-by-op PyTorch path (what --kernels eager prices, op for op: tests/model/test_mamba*_eager.py) is a fallback."""

import pytest

import tfcalc
from tfcalc.count.training.layout import default_kernels
from tfcalc.presets import load

FUSED = ["falcon-mamba-7b", "codestral-mamba-7b", "granite-4.0-h-small", "qwen3-next-80b-a3b"]
EAGER = ["llama3-8b", "gpt2", "mixtral-8x7b", "deepseek-v3", "gemma-2-9b"]


@pytest.mark.parametrize("name", FUSED)
def test_a_model_with_a_scan_mixer_plans_fused_kernels(name):
    assert default_kernels(load(name)) == "fused"


@pytest.mark.parametrize("name", EAGER)
def test_an_attention_model_plans_eager_kernels(name):
    assert default_kernels(load(name)) == "eager"


def test_the_default_is_said_and_a_given_mode_wins():
    default = tfcalc.plan("codestral-mamba-7b", dp=8, seq=4096).to_json()
    eager = tfcalc.plan("codestral-mamba-7b", dp=8, seq=4096, kernels="eager").to_json()
    fused = tfcalc.plan("codestral-mamba-7b", dp=8, seq=4096, kernels="fused").to_json()
    assert default["layout"]["kernels"] == "fused" and eager["layout"]["kernels"] == "eager"
    assert default["step"]["overlap_s"] == fused["step"]["overlap_s"] < eager["step"]["overlap_s"]
    assert tfcalc.plan("llama3-8b", dp=8, seq=4096).to_json()["layout"]["kernels"] == "eager"


def test_the_cli_says_which_kernels_it_priced(cli):
    r = cli("plan", "codestral-mamba-7b", "--dp", "8", "--seq", "4096")
    assert r.code == 0 and "fused kernels" in r.out
    eager = cli("plan", "codestral-mamba-7b", "--dp", "8", "--seq", "4096", "--kernels", "eager").out
    assert "fused kernels" not in eager and "(eager kernels)" in eager  # eager: the title says nothing, the step does
