"""A hybrid's generation state split: K/V that grows with the tokens, the fixed state each sequence holds
(tfcalc.count.model.memory.StateSplit), what `memory --budget` solves with both, and what a decode step reads
and writes of the fixed state (roofline's row "state_write"). References: transformers' own cache after a
forward (tiny checkpoints of tests/hf_tiny.py, run for real on the CPU; the published Qwen3-Next config on
meta), each tensor of it classed by the attribute transformers keeps it in, and hand derivations."""

from __future__ import annotations

import pytest
import torch

from tfcalc.count.model.budget import fit_inference
from tfcalc.count.model.memory import kv_cache_bytes, kv_cache_expanded_bytes, state_split, weights_bytes
from tfcalc.count.model.quant import plain
from tfcalc.count.serving.roofline import decode_step
from tfcalc.presets import load
from tfcalc.workload import Workload

pytestmark = pytest.mark.filterwarnings("ignore")


def _hf_split(cache) -> tuple[int, int, dict[str, str]]:
    """(growing bytes, fixed bytes, {kind: dtype}) of what transformers' cache holds: ``keys`` and ``values``
    grow with the tokens; ``conv_states`` and ``recurrent_states`` do not."""
    growing = fixed = 0
    dtypes = {}
    for layer in cache.layers:
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            t = getattr(layer, name, None)
            for v in (t.values() if isinstance(t, dict) else [t]):
                if isinstance(v, torch.Tensor) and v.numel():
                    nbytes = v.numel() * v.element_size()
                    if name in ("keys", "values"):
                        growing += nbytes
                    else:
                        fixed += nbytes
                        dtypes[name] = str(v.dtype)
    return growing, fixed, dtypes


@pytest.mark.parametrize("name", ["qwen3_next", "lfm2", "lfm2_moe"])
@pytest.mark.parametrize("seq", [7, 70])
def test_split_is_what_transformers_cache_holds(saved, name, seq):
    """A real forward of the tiny checkpoint in bf16 with use_cache: its cache's K and V are the growing part, its
    conv and recurrent states the fixed part (the recurrent state fp32, the conv state bf16, as transformers
    keeps them), at two lengths: the fixed part does not move with the length."""
    hf, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    model = hf.to(torch.bfloat16)
    try:
        with torch.no_grad():
            out = model(input_ids=torch.zeros(2, seq, dtype=torch.long), use_cache=True)
    finally:
        hf.to(torch.float32)
    growing, fixed, dtypes = _hf_split(out.past_key_values)
    got = state_split(cfg, Workload(batch=2, seq=seq, kv_dtype="bf16"))
    assert (got.growing, got.fixed) == (growing, fixed)
    assert growing + fixed == kv_cache_bytes(cfg, Workload(batch=2, seq=seq, kv_dtype="bf16"))
    assert dtypes["conv_states"] == "torch.bfloat16"
    if name == "qwen3_next":
        assert dtypes["recurrent_states"] == "torch.float32"
        assert {n: d for n, (d, _) in got.fixed_parts.items()} == {"conv": "bf16", "recurrent": "fp32"}
        assert (got.growing_layers, got.layers) == (1, 4)


def test_published_qwen3_next_split_by_hand():
    """The StateSplit docstring's derivation: 12 attention layers of 2 KV heads of 256 grow 24,576 bytes a token
    (bf16); 36 DeltaNet layers hold (8,192·4·2 + 32·128·128·4) bytes each whatever the length. The expanded cache
    (no latent attention here) is the same bytes: the fp32 state priced in fp32, not in the KV dtype."""
    cfg = load("qwen3-next-80b-a3b")
    for seq in (1, 4096, 262_144):
        s = state_split(cfg, Workload(batch=3, seq=seq, kv_dtype="bf16"))
        assert s.growing == 3 * seq * 12 * 2 * 2 * 256 * 2
        assert s.fixed == 3 * 36 * (8192 * 4 * 2 + 32 * 128 * 128 * 4) == 3 * 77_856_768
        assert s.fixed_parts == {"conv": ("bf16", 3 * 36 * 8192 * 4 * 2),
                                 "recurrent": ("fp32", 3 * 36 * 32 * 128 * 128 * 4)}
        w = Workload(batch=3, seq=seq, kv_dtype="bf16")
        assert kv_cache_expanded_bytes(cfg, w) == kv_cache_bytes(cfg, w) == s.growing + s.fixed
    # an fp8 KV cache leaves the fp32 recurrent state in fp32
    s8 = state_split(cfg, Workload(batch=1, seq=4096, kv_dtype="fp8"))
    assert s8.growing == 4096 * 12 * 2 * 2 * 256 and s8.fixed_parts["recurrent"] == ("fp32", 36 * 32 * 128 * 128 * 4)


def test_dense_model_has_no_fixed_state():
    cfg = load("gpt2")
    s = state_split(cfg, Workload(batch=2, seq=100, kv_dtype="bf16"))
    assert s.fixed == 0 and s.fixed_parts == {} and s.growing_layers == s.layers == 12
    assert s.growing == 2 * 100 * 12 * 2 * 768 * 2


def test_budget_counts_the_fixed_state_once_per_sequence():
    """Qwen3-Next at a 200 GB budget, bf16, by hand: what is left after the weights W holds b sequences of
    (77,856,768 fixed + 4,096 · 24,576 K/V) bytes, or one sequence of 77,856,768 + T · 24,576."""
    cfg = load("qwen3-next-80b-a3b")
    w = Workload(batch=1, seq=4096, kv_dtype="bf16")
    fit = fit_inference(cfg, w, 200 * 10**9)
    left = 200 * 10**9 - weights_bytes(cfg, "bf16")
    assert fit.max_batch == left // (77_856_768 + 4096 * 24_576) == 227
    assert fit.max_seq == (left - 77_856_768) // 24_576
    # a length-only model of the state (K/V per token, no fixed part) would allow more
    assert fit.max_batch < left // (4096 * 24_576)


def test_memory_json_and_table_show_the_split(cli):
    data = cli("memory", "qwen3-next-80b-a3b", "--seq", "4096", "--budget", "200GB", "--json").json()
    assert data["kv_growing_bytes"] == 4096 * 24_576 and data["fixed_state_bytes"] == 77_856_768
    assert data["kv_growing_bytes"] + data["fixed_state_bytes"] == data["kv_cache_bytes"]
    assert data["fixed_state"]["recurrent"] == {"dtype": "fp32", "bytes": 36 * 32 * 128 * 128 * 4}
    assert data["kv_layers"] == 12 and data["fit"]["state_bytes_per_sequence"] == 77_856_768
    text = cli("memory", "qwen3-next-80b-a3b", "--seq", "4096", "--budget", "200GB").out
    assert "2·B·T·L·n_kv·d_head" not in text  # the dense label would claim K/V in all 48 layers
    assert "L_kv = 12 attention layers of 48" in " ".join(text.split()) and "fixed state" in text
    dense = cli("memory", "gpt2", "--seq", "128", "--json").json()
    assert dense["fixed_state_bytes"] == 0 and dense["kv_growing_bytes"] == dense["kv_cache_bytes"]


def _fixed_tensors(cache) -> list[torch.Tensor]:
    """The conv and recurrent states transformers' cache holds (a tensor or a dict of them per layer)."""
    out = []
    for layer in cache.layers:
        for name in ("conv_states", "recurrent_states"):
            t = getattr(layer, name, None)
            out += [v for v in (t.values() if isinstance(t, dict) else [t]) if isinstance(v, torch.Tensor)]
    return out


@pytest.mark.parametrize("name", ["qwen3_next", "lfm2"])
def test_a_decode_step_writes_the_whole_fixed_state(saved, name):
    """transformers' own decode step on the tiny checkpoint (fp32): every element of every conv and recurrent
    state changes (a ring shifted, S decayed and updated), so the step writes them whole; the roofline's
    "state_write" row is those bytes, and the step's rows read them too (each fixed tensor once)."""
    hf, folder = saved(name)
    cfg = load(str(folder / "config.json"))
    ids = torch.randint(1, 60, (2, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = hf(input_ids=ids, use_cache=True)
        cache = out.past_key_values
        before = [t.clone() for t in _fixed_tensors(cache)]
        hf(input_ids=ids[:, :1], past_key_values=cache, use_cache=True)
        after = _fixed_tensors(cache)
    assert before and len(before) == len(after)
    written = sum(int((a != b).sum()) * a.element_size() for a, b in zip(after, before, strict=True))
    held = sum(a.numel() * a.element_size() for a in after)
    assert written == held  # the whole fixed state rewritten by one step
    step = decode_step(cfg, 2, 10, plain("fp32"), "fp32")
    rows = {r.component: r for r in step.rows}
    assert rows["state_write"].kv_bytes == held and rows["state_write"].flops == 0
    # the step without its write: every fixed tensor read once beside the K/V (the mixing rows' reads)
    growing = state_split(cfg, Workload(batch=2, seq=10, kv_dtype="fp32")).growing
    assert step.kv_bytes == growing + 2 * held


def test_a_dense_decode_step_has_no_state_write():
    step = decode_step(load("gpt2"), 1, 100, plain("bf16"), "bf16")
    assert "state_write" not in {r.component for r in step.rows}


def test_infer_prints_the_fixed_state_read_and_written(cli):
    data = cli("infer", "qwen3-next-80b-a3b", "--device-spec", "h100-sxm", "--seq", "4096", "--gen", "4",
               "--json").json()
    g = data["generation_state"]
    assert g["fixed_state_bytes"] == g["decode_step_fixed_state_written_bytes"] == 77_856_768
    assert g["kv_growing_bytes"] == (4096 + 4) * 24_576 and (g["kv_layers"], g["layers"]) == (12, 48)
    text = " ".join(cli("infer", "qwen3-next-80b-a3b", "--device-spec", "h100-sxm", "--seq", "4096").out.split())
    assert "read and written whole by each decode step: 74.25 MiB read + 74.25 MiB written" in text


def test_mixing_split_by_hand():
    """Qwen3-Next at T = 4,096: the 12 gated-attention layers' Q·Kᵀ and attention·V, full square, 2·2·T²·16·256
    each; the 36 DeltaNet layers' chunked scan grows like T (twice T, twice the FLOPs); both add up to the
    forward's attention_scores."""
    from tfcalc.count.model import flops as count_flops
    from tfcalc.count.model.state_growth import mixing_split

    cfg = load("qwen3-next-80b-a3b")
    g1, f1 = mixing_split(cfg, Workload(batch=1, seq=4096))
    g2, f2 = mixing_split(cfg, Workload(batch=2, seq=8192))
    assert g1 == 12 * 2 * 2 * 4096 * 4096 * 16 * 256
    assert f2 == 2 * 2 * f1 and g2 == 2 * 4 * g1  # batch 2: the fixed layers' ×2 per T, the attention's ×4
    assert g1 + f1 == count_flops.breakdown(cfg, Workload(batch=1, seq=4096)).totals()["attention_scores"]
    assert mixing_split(load("gpt2"), Workload(seq=128))[1] == 0


def test_scan_and_compare_show_where_the_cost_stops_growing(cli):
    scan = cli("scan", "qwen3-next-80b-a3b", "--seq", "1024,8192", "--json").json()
    assert (scan["kv_layers"], scan["layers"]) == (12, 48)
    small, big = scan["rows"]
    assert small["fixed_state_bytes"] == big["fixed_state_bytes"] == 77_856_768
    assert big["kv_growing_bytes"] == 8 * small["kv_growing_bytes"] == 8192 * 24_576
    assert big["fixed_state_share"] < small["fixed_state_share"]
    text = " ".join(cli("scan", "qwen3-next-80b-a3b", "--seq", "1024,8192").out.split())
    assert "where the cost grows with T" in text and "only in the 12 of 48 layers" in text
    assert "where the cost grows" not in cli("scan", "gpt2", "--seq", "128").out
    rows = cli("compare", "lfm2-1.2b", "qwen3-next-80b-a3b", "llama2-7b", "--json").json()
    lfm, qwen, llama = rows
    # K/V per token in the attention layers only: 6 layers · 2 · 8 heads · 64 · 2 bytes; 12 · 2 · 2 · 256 · 2
    assert lfm["kv_cache_bytes_per_token"] == 6 * 2 * 8 * 64 * 2 and qwen["kv_cache_bytes_per_token"] == 24_576
    assert lfm["fixed_state_bytes_per_sequence"] == 10 * 2048 * 3 * 2 and llama["fixed_state_bytes_per_sequence"] == 0
    assert llama["kv_cache_bytes_per_token"] == 32 * 2 * 32 * 128 * 2 and llama["kv_layers"] == 32
    assert qwen["state_bytes_at_seq"] == 4096 * 24_576 + 77_856_768  # the shortest context: llama2-7b's 4,096


def test_an_fp8_kv_cache_leaves_the_conv_and_recurrent_states_in_their_own_dtypes():
    """--kv-dtype fp8 prices K and V in fp8; the convolution's ring stays in the model's dtype (transformers and
    tfcalc's runtime allocate it so; vLLM keeps its mamba cache dtype apart from kv_cache_dtype) and S in fp32.
    Weights in int4 run bf16 activations: the ring in bf16."""
    from tfcalc.count.model.dtypes import state_dtype

    cfg = load("qwen3-next-80b-a3b")
    s = state_split(cfg, Workload(batch=1, seq=4096, dtype="bf16", kv_dtype="fp8"))
    assert s.growing == 4096 * 12 * 2 * 2 * 256
    assert s.fixed_parts == {"conv": ("bf16", 36 * 8192 * 4 * 2), "recurrent": ("fp32", 36 * 32 * 128 * 128 * 4)}
    lfm = state_split(load("lfm2-1.2b"), Workload(batch=1, seq=16, dtype="fp32", kv_dtype="fp8"))
    assert lfm.fixed_parts == {"conv": ("fp32", 10 * 2048 * 3 * 4)}
    resolved = (state_dtype("model", "fp8", "int4"), state_dtype(None, "fp8", "bf16"),
                state_dtype("fp32", "int8", "bf16"))
    assert resolved == ("bf16", "fp8", "fp32")
    # a decode step reads the ring in bf16 too: its read row is priced so beside the fp8 K/V
    step = decode_step(cfg, 1, 100, plain("bf16"), "fp8")
    conv_read = sum(r.kv_bytes for r in step.rows if r.component.endswith("conv"))
    assert conv_read == 36 * 8192 * 4 * 2


def test_hostile_dtypes_are_one_line(cli):
    """"model" is a state tensor's declaration, never a dtype a user may give the cache."""
    from conftest import assert_one_line_error

    from tfcalc.errors import InputError

    assert_one_line_error(cli("memory", "qwen3-next-80b-a3b", "--kv-dtype", "fp7"), "is not one of")
    assert_one_line_error(cli("infer", "lfm2-1.2b", "--device-spec", "h100-sxm", "--kv-dtype", "model"),
                          "is not one of")
    for bad in ("model", None, ["bf16"]):
        with pytest.raises(InputError, match="unknown dtype"):
            state_split(load("lfm2-1.2b"), Workload(seq=8, kv_dtype=bad) if bad is not None
                        else Workload(seq=8, dtype="model"))


@pytest.mark.parametrize("name", ["qwen3-next-80b-a3b", "lfm2-1.2b"])
def test_a_hybrids_scan_and_compare_answers_are_on_screen(name):
    """tests/cli/test_answer_on_screen.py's rule on the hybrids: every number of scan's and compare's JSON is in the
    table render at every width (the split's rows in scan's second table)."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1] / "cli"))
    from test_answer_on_screen import assert_on_screen, numbers

    import tfcalc
    from tfcalc.cli.render import compare as compare_view, scan as scan_view

    r = tfcalc.scan(name)
    j = r.to_json()
    answer = numbers({k: v for k, v in j.items() if k != "rows"})
    for row in j["rows"]:
        answer |= {f"T={row['seq']}.{k}": v for k, v in numbers(row).items()}
    assert answer["kv_layers"] and answer[f"T={j['rows'][0]['seq']}.fixed_state_bytes"]
    assert_on_screen(scan_view.document([r]), answer)
    c = tfcalc.compare(name, "llama2-7b")
    assert_on_screen(compare_view.document([c]), {f"{row['preset']}.{k}": v for row in c.to_json()
                                                  for k, v in numbers(row).items()})
