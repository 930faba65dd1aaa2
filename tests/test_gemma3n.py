"""Gemma 3n's language model (gemma3n_text; gemma3n without its towers) against transformers 5.24: the tiny checkpoint
of tests/hf_tiny.py (parameters, FLOPs, logits and the cache are run by tests/test_hf_models.py) decoded over
tfcalc's cache; Gemma3nTextConfig's default sizes on meta (parameters exact, the cache after 4,096 tokens); what
each new piece (AltUp, LAuReL, the sparsity) changes; the hostile cases of the keys read."""

from __future__ import annotations

import json
import warnings

import pytest
import torch

from tfcalc.count.model import params as count_params
from tfcalc.count.model.memory import kv_cache_bytes
from tfcalc.errors import InputError
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")

TESTED_TYPES = {"gemma3n", "gemma3n_text"}  # tested here (tests/test_hf_config.py)


def _published(**changes) -> dict:
    import transformers

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return json.loads(transformers.Gemma3nTextConfig(**changes).to_json_string())


def _write(tmp_path, raw: dict, name: str = "gemma3n") -> str:
    folder = tmp_path / name
    folder.mkdir(exist_ok=True)
    (folder / "config.json").write_text(json.dumps(raw))
    return str(folder / "config.json")


class _Logits(torch.nn.Module):
    def __init__(self, hf):
        super().__init__()
        self.hf = hf

    def forward(self, idx):
        return self.hf(idx).logits


def test_tiny_decode_over_tfcalc_cache_equals_transformers(saved):
    """Greedy decode over tfcalc's cache (rings of 3 slots, two layers reading their sources' K/V, AltUp's streams
    carried through each step) equals its uncached forward and transformers' uncached greedy tokens (its generate
    stops at the tiny vocabulary's eos)."""
    from hf_pairs import greedy_uncached

    import tfcalc
    from tfcalc.model import generate

    hf, folder = saved("gemma3n_text")
    model = tfcalc.load_model(str(folder))
    prompt = torch.randint(3, 61, (2, 7), generator=torch.Generator().manual_seed(3))
    out = generate(model, prompt, 6, cache=model.new_cache(2, 13))
    assert torch.equal(out, greedy_uncached(model, prompt, 6))
    assert torch.equal(out, greedy_uncached(_Logits(hf), prompt, 6))


@pytest.mark.parametrize("part", ["altup", "laurel", "sparsity"])
def test_each_piece_matters(saved, tmp_path, part):
    """With AltUp's correction scale, LAuReL's norm or the sparsity taken out, tfcalc's logits leave
    transformers': each is what matches it."""
    import tfcalc

    hf, folder = saved("gemma3n_text")
    ids = torch.randint(3, 61, (1, 9), generator=torch.Generator().manual_seed(5))
    model = tfcalc.load_model(str(folder))
    with torch.no_grad():
        want = hf(ids).logits
        assert (want - model(ids)).abs().max() <= 1e-4 * want.abs().max()
        if part == "altup":
            for block in model.blocks:
                block.altup.output_scale.fill_(1.0)
        elif part == "laurel":
            for block in model.blocks:
                block.laurel.norm.weight.zero_()
        else:  # the sparsity is the description's: a model read without it
            raw = json.loads((folder / "config.json").read_text())
            (tmp_path / "config.json").write_text(json.dumps({**raw, "activation_sparsity_pattern": [0.0] * 6}))
            for f in folder.glob("*.safetensors"):
                (tmp_path / f.name).write_bytes(f.read_bytes())
            model = tfcalc.load_model(str(tmp_path))
        assert (want - model(ids)).abs().max() > 1e-3


def test_default_size_parameters_and_state(tmp_path):
    """Gemma3nTextConfig's defaults (35 layers, AltUp of 4, LAuReL 64, per-layer inputs of 256 from 262,144 rows,
    the last 15 layers reading K/V) on meta: parameters exact; the cache after 4,096 tokens is the 20 sources'
    (16 local rings of 512, 4 global layers of every position; 2 K/V heads of 256)."""
    import transformers

    from tfcalc.measure.params import measure_params

    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.Gemma3nForCausalLM(transformers.Gemma3nTextConfig())
    cfg = load(_write(tmp_path, _published()))
    total = sum(p.numel() for p in hf.parameters())
    assert count_params.total(cfg) == total
    measured, breakdown = measure_params(cfg)
    assert measured == total and breakdown == count_params.breakdown(cfg)
    assert breakdown["per_layer_embedding"] == 262_144 * 35 * 256
    kinds = [b.mixer.kv_share for b in cfg.architecture.output.layers()]
    assert kinds.count("reader") == 15 and kinds.count("source") == 2
    T = 4096
    assert kv_cache_bytes(cfg, Workload(batch=1, seq=T, kv_dtype="bf16")) == (16 * 512 + 4 * T) * 2 * 2 * 256 * 2


def test_multimodal_file_reads_its_language_model_and_refuses_the_towers(tmp_path):
    """gemma3n without towers: its text_config's model; with a vision or audio tower: one line (not counted)."""
    import transformers

    text = transformers.Gemma3nTextConfig(num_hidden_layers=20, vocab_size=1000).to_dict()
    with torch.device("meta"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = transformers.Gemma3nConfig(text_config=text)  # its model needs timm (the vision tower's)
        language = sum(p.numel() for p in transformers.Gemma3nForCausalLM(config.text_config).parameters())
    raw = json.loads(config.to_json_string())
    towers = {k: raw.pop(k) for k in ("vision_config", "audio_config")}
    cfg = load(_write(tmp_path, raw))
    assert count_params.total(cfg) == language and cfg.altup_inputs == 4
    for key, value in towers.items():
        with pytest.raises(InputError, match=f"'{key}': Gemma 3n's .* tower is not counted by tfcalc"):
            load(_write(tmp_path, {**raw, key: value}, key))


HOSTILE = [
    (dict(intermediate_size=[8192] * 34 + [4096]), "'intermediate_size' lists .*one width in every layer"),
    (dict(intermediate_size=[8192] * 3), "'intermediate_size' lists"),
    (dict(altup_num_inputs=1), "'altup_num_inputs' must be an integer of at least 2"),
    (dict(altup_active_idx=1), "'altup_active_idx' 1 is not supported"),
    (dict(altup_correct_scale="yes"), "'altup_correct_scale' must be true or false"),
    (dict(laurel_rank=0), "'laurel_rank' must be a positive integer"),
    (dict(hidden_size_per_layer_input=0), "'hidden_size_per_layer_input' must be a positive integer"),
    (dict(vocab_size_per_layer_input="x"), "'vocab_size_per_layer_input' must be an integer"),
    # null: Gemma3nTextConfig's strict int fields refuse it (transformers 5.24), not the default 256 in silence
    (dict(hidden_size_per_layer_input=None), "'hidden_size_per_layer_input' is null: Gemma3nTextConfig requires an"),
    (dict(vocab_size_per_layer_input=None), "'vocab_size_per_layer_input' is null: Gemma3nTextConfig requires an"),
    (dict(num_kv_shared_layers=35), "'num_kv_shared_layers' must be 0 or more and below"),
    (dict(activation_sparsity_pattern=[0.5] * 3), "'activation_sparsity_pattern' must give one share"),
    (dict(activation_sparsity_pattern=[1.0] * 35), "'activation_sparsity_pattern' must give one share"),
    (dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0}}),
     "'rope_parameters' full_attention must be an object of the default rope_type"),
    (dict(rope_parameters={"full_attention": {"rope_theta": 0}}), "rope_theta must be a positive number"),
    (dict(use_bidirectional_attention=True), "'use_bidirectional_attention' is not supported"),
    (dict(hidden_size=2050), "is not a multiple of 'num_attention_heads'"),
]


@pytest.mark.parametrize("changes, message", HOSTILE)
def test_hostile_config_json(tmp_path, changes, message):
    raw = {**_published(), **changes}
    with pytest.raises(InputError, match=message):
        load(_write(tmp_path, raw))


def test_sparsity_layers_and_a_single_share(tmp_path):
    """activation_sparsity_pattern as one number is every layer's; all zeros: none (no field)."""
    one = load(_write(tmp_path, {**_published(), "activation_sparsity_pattern": 0.5}))
    none = load(_write(tmp_path, {**_published(), "activation_sparsity_pattern": [0.0] * 35}, "z"))
    assert one.activation_sparsity == (0.5,) * 35 and none.activation_sparsity is None


FLAT_HOSTILE = [
    ("altup_inputs=4", "altup_inputs .AltUp's streams. is built as Gemma 3n has it"),
    ("laurel_rank=8", "laurel_rank is built with AltUp"),
    ("activation_sparsity=[0.5]", "activation_sparsity must give one share in .0, 1. for each of the 32 layers"),
]


@pytest.mark.parametrize("sets, message", FLAT_HOSTILE)
def test_flat_fields_hostile(cli, sets, message):
    import re

    r = cli("params", "llama2-7b", "--set", sets)
    assert r.code == 2 and re.search(message, r.err), r.err
    assert "Traceback" not in r.err and len(r.err.strip().splitlines()) == 1


@pytest.mark.parametrize("name", ["gemma3n_text", "gemma4_text-ple", "gemma4_text-moe"])
def test_measured_flops_agree_group_by_group(saved, cli, name):
    """`flops --measure`: FlopCounterMode on tfcalc's own module equals the analytic count in every group (AltUp's
    and LAuReL's matmuls in the FFN's, the streams' projections and the per-layer projection in the embeddings')."""
    _, folder = saved(name)
    r = cli("flops", str(folder), "--seq", "10", "--measure")
    assert r.code == 0 and "agree" in r.out and "DISAGREE" not in r.out, r.err


def test_bench_times_an_altup_block_and_its_sub_layers(saved, cli):
    """`bench`: block 0's attention and FFN sub-layers run on AltUp's active stream, the block on all of them."""
    _, folder = saved("gemma3n_text")
    r = cli("bench", str(folder), "--seq", "8", "--warmup", "0", "--repeat", "1", "--matmul-size", "64", "--json")
    assert r.code == 0, r.err
    assert set(r.json()["components"]) >= {"attention_s", "ffn_s"}


def full_size_flops(config_class: str, model_class: str, kwargs: dict, tmp_path, lengths=(64, 128)) -> None:
    """FlopCounterMode over transformers' whole model at its full size on meta (eager attention: the scores over
    the full square, tfcalc's convention), less its rotary-table matmul, equals tfcalc's forward FLOPs at each
    length."""
    import transformers
    from torch.utils.flop_counter import FlopCounterMode

    from tfcalc.count.model import flops as flops_count

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        config = getattr(transformers, config_class)(**kwargs)
    config._attn_implementation = "eager"
    cfg = load(_write(tmp_path, json.loads(config.to_json_string()), config_class))
    with torch.device("meta"):
        hf = getattr(transformers, model_class)(config).eval()
    for T in lengths:
        ids = torch.zeros(1, T, dtype=torch.long, device="meta")
        with torch.no_grad(), FlopCounterMode(display=False) as counter:
            hf(ids, output_hidden_states=True)
        rotary = sum(sum(ops.values()) for path, ops in counter.get_flop_counts().items()
                     if path.endswith("rotary_emb"))
        assert flops_count.forward_flops(cfg, Workload(batch=1, seq=T)) == counter.get_total_flops() - rotary


def test_default_size_forward_flops_equal_flop_counter_mode(tmp_path):
    """Gemma3nTextConfig's defaults: AltUp, LAuReL, per-layer inputs, 15 readers, sparsity, at 64 and 128 tokens."""
    full_size_flops("Gemma3nTextConfig", "Gemma3nForCausalLM", {}, tmp_path)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("name, changes", [
    ("gemma3n_text", {}),
    ("gemma3n_text", {"altup_correct_scale": False, "activation_sparsity_pattern": [0.0] * 6}),
    ("gemma3n_text", {"altup_num_inputs": 2, "num_kv_shared_layers": 0}),
    ("gemma4_text", {}), ("gemma4_text-ple", {}), ("gemma4_text-moe", {}),
])
def test_saved_activations_equal_autograds(tmp_path, name, changes, dtype):
    """The bytes autograd keeps for the backward pass of tfcalc's module (saved_tensors_hooks, each storage once;
    the module gives transformers' logits: test_tiny_decode_over_tfcalc_cache_equals_transformers) equal the count
    (tfcalc.count.model.activation_terms, step 13) to the byte at two lengths, in fp32 (where the norms keep views
    of the n streams) and bf16 (their fp32 copies): AltUp's streams, predict and correct, LAuReL, the per-layer
    inputs and gates, the sparsity's top-k, V's head norms, the layers reading another's K/V, Gemma 4's experts
    beside the MLP (their norms and router). Before: Gemma 3n 1.98x low, Gemma 4's per-layer inputs 1.10x, its experts
    1.19x."""
    import transformers
    from hf_tiny import CASES

    from tfcalc.count.model.memory import activations
    from tfcalc.measure.memory import forward_loss
    from tfcalc.model import build_model

    case = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        raw = json.loads(getattr(transformers, case.config)(**{**case.kwargs, **changes}).to_json_string())
    cfg = load(_write(tmp_path, raw))
    torch.manual_seed(0)
    model = build_model(cfg, "cpu", {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]).train()
    for seq in (8, 13):
        _, kept = forward_loss(model, torch.randint(0, 50, (2, seq)), count_saved=True)
        assert activations(cfg, Workload(batch=2, seq=seq, dtype=dtype)).stored == kept
