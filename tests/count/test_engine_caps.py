"""The engine's caps (tfcalc.count.serving.engine_caps, `infer --rate --max-batch`): trtllm-bench throughput's heuristic
against hand derivations of tensorrt_llm/bench/build/tuning.py, and the cap in the steady state against its
definition (the largest rate whose sequences in flight, by Little's law's fixed point, stay within the cap)."""

from __future__ import annotations

import math
import time

import pytest
from conftest import assert_one_line_error

import tfcalc
from tfcalc.count.serving.engine_caps import finetune, trtllm_bench
from tfcalc.errors import InputError

GIB = 1024 ** 3
H100_NVML = round(79.65 * GIB)  # 81,559 MiB, nvidia-smi's total on an H100 SXM 80GB
LLAMA31_8B = (8_030_261_248, 32, 8, 128)  # parameters (HF safetensors), layers, KV heads, head size
QWEN3_235B = (235_093_634_560, 94, 4, 128)


@pytest.mark.parametrize("requests, isl, osl, expected", [
    (532.1, 1000, 1000, (640, 2048)),  # 532.1 < 1,024: up to 128s (640); 1,064.2 tokens < 4,096: 2,048 at least
    (40.0, 128, 128, (64, 2048)),  # below 256: multiples of 32, 64 at least
    (200.0, 128, 128, (224, 2048)),  # 200 → 224; 400 tokens → 2,048
    (1500.0, 2048, 128, (1536, 25600)),  # ≥ 1,024: multiples of 256; 1,500 × 17 = 25,500 ≥ 8,192: of 1,024
    (9000.0, 128, 128, (4096, 8192)),  # the 4,096 cap: 4,096 × 2 = 8,192 tokens, a multiple of 1,024
    (3000.0, 1000, 1000, (3072, 6144)),  # 3,000 → 3,072; 6,000 tokens → multiples of 512: 6,144
])
def test_finetune_by_hand(requests, isl, osl, expected):
    assert finetune(requests, isl, osl) == expected


def test_pipeline_stages_split_the_batch():
    assert finetune(2000.0, 128, 128, pp=2) == (1024, 2048)  # 1,000 a stage → 1,024; 2,000 tokens → 2,048


def test_llama31_8b_on_one_h100_by_hand():
    """The module docstring's worked example: 65,536 B a token (2 · 32 · 8 · 128 · 1 B, FP8), the weights 8.03e9 B."""
    caps = trtllm_bench(*LLAMA31_8B, 1, 1, 1000, 1000, H100_NVML, "fp8", "fp8")
    free = (79.65 - 8_030_261_248 / GIB) * 0.90  # GiB for the cache
    requests = free * GIB / 65_536 / 2000
    assert caps.kv_requests == pytest.approx(requests, rel=1e-9) and requests == pytest.approx(532.1, abs=0.1)
    assert (caps.max_batch_size, caps.max_num_tokens) == (640, 2048)  # 1,000 + 640 < 2,048: the floor holds


def test_whole_prompts_raise_the_tokens_to_a_prompt_and_the_batch():
    """get_settings: without chunked prefill max_num_tokens ≥ max ISL + max_batch_size (5,000 + 224)."""
    caps = trtllm_bench(*LLAMA31_8B, 1, 1, 5000, 500, H100_NVML, "fp8", "fp8")
    assert caps.max_batch_size == 224 and caps.max_num_tokens == 5000 + 224
    chunked = trtllm_bench(*LLAMA31_8B, 1, 1, 5000, 500, H100_NVML, "fp8", "fp8", chunked=True)
    assert chunked.max_num_tokens == 2304  # 193.6 × 11 = 2,130 → 2,304, the heuristic's own


def test_tp_group_of_qwen3_235b_on_h200():
    """TP 8 (attention DP does not enter): KV heads max(8, 4) = 8 over the group, 192,512 B a token; 8 × 139.6 GiB
    less 235.1e9 B of FP8 weights, × 0.9, over 2,000 tokens: 2,253.6 requests → 2,304; 4,507 tokens → 4,608."""
    mem = 149_900_000_000  # the h200 datasheet entry's bytes (tfcalc devices: 139.6 GiB)
    caps = trtllm_bench(*QWEN3_235B, 8, 1, 1000, 1000, mem, "fp8", "fp8")
    requests = (8 * mem - 235_093_634_560) * 0.9 / (2 * 94 * 8 * 128) / 2000
    assert caps.kv_requests == pytest.approx(requests, rel=1e-9) and requests == pytest.approx(2253.6, abs=0.1)
    assert (caps.max_batch_size, caps.max_num_tokens) == (2304, 4608)


def test_bf16_weights_and_cache_take_two_bytes():
    fp8 = trtllm_bench(*LLAMA31_8B, 1, 1, 1000, 1000, H100_NVML, "fp8", "fp8").kv_requests
    bf16 = trtllm_bench(*LLAMA31_8B, 1, 1, 1000, 1000, H100_NVML, "bf16", "bf16").kv_requests
    assert bf16 == pytest.approx((79.65 - 2 * 8_030_261_248 / GIB) * 0.9 * GIB / 131_072 / 2000, rel=1e-9)
    assert bf16 < fp8 / 2


def test_too_little_memory_is_refused():
    with pytest.raises(InputError, match="more GPUs"):
        trtllm_bench(*QWEN3_235B, 1, 1, 1000, 1000, H100_NVML, "fp8", "fp8")


RUN = dict(dtype="fp8", kv_dtype="fp8", device_spec="h100-sxm", mean_input=1000, mean_output=1000)


def state(rate: float, **kw) -> dict:
    return tfcalc.infer("llama3-8b", rate=rate, **{**RUN, **kw}).to_json()["continuous"]


def test_a_cap_that_does_not_bind_changes_nothing():
    """A cap at or above the sequences in flight at the capacity (2,046 of the KV cache's 5,978 at 128 in and out)
    moves nothing."""
    short = dict(mean_input=128, mean_output=128)
    free = state(1.0, **short)
    most = math.ceil(state(free["max_rate_per_s"], **short)["concurrency"])
    assert most < free["max_concurrency"]
    capped = state(1.0, max_batch=most, **short)
    assert capped["max_rate_per_s"] == free["max_rate_per_s"] and capped["ttft_s"] == free["ttft_s"]
    assert capped["max_batch"] == most and free["max_batch"] is None


def test_a_binding_cap_ends_the_steady_state_where_the_batch_reaches_it():
    """The capacity under a cap B is the largest rate whose uncapped steady state holds at most B sequences."""
    top = state(1.0)["max_rate_per_s"]
    n_top = state(top * 0.999)["concurrency"]
    cap = round(n_top * 0.6)
    rate = state(1.0, max_batch=cap)["max_rate_per_s"]
    assert rate < top
    assert state(rate * 0.999)["concurrency"] <= cap < state(rate * 1.01)["concurrency"]
    over = state(rate * 1.01, max_batch=cap)
    assert over["over_capacity"] and over["limit"] == "batch" and over["concurrency"] is None
    assert not state(rate * 0.999, max_batch=cap)["over_capacity"]


def test_the_cap_is_each_attention_dp_groups():
    """--ep 8 with attention DP 8: each group a server of R/8 holding at most B; the whole server 8 × B."""
    run = dict(dtype="fp8", kv_dtype="fp8", device_spec="h200", mean_input=1000, mean_output=1000, ep=8)
    top = tfcalc.infer("qwen3-235b-a22b", rate=1.0, **run).to_json()["continuous"]["max_rate_per_s"]
    n = tfcalc.infer("qwen3-235b-a22b", rate=top * 0.999, **run).to_json()["continuous"]["concurrency"]
    cap = round(n / 8 * 0.5)  # half a group's sequences at the top rate
    capped = tfcalc.infer("qwen3-235b-a22b", rate=1.0, max_batch=cap, **run).to_json()["continuous"]
    r = capped["max_rate_per_s"]
    below = tfcalc.infer("qwen3-235b-a22b", rate=r * 0.999, max_batch=cap, **run).to_json()["continuous"]
    assert r < top and below["concurrency"] <= 8 * cap and below["max_batch"] == cap


def test_cli_json_and_speed(cli):
    args = ("infer", "llama3-8b", "--dtype", "fp8", "--kv-dtype", "fp8", "--rate", "10", "--mean-input", "1000",
            "--mean-output", "1000", "--max-batch", "64", "--json")
    start = time.perf_counter()
    r = tfcalc.infer("llama3-8b", rate=10, max_batch=64, **{k: v for k, v in RUN.items() if k != "device_spec"})
    assert time.perf_counter() - start < 0.6
    x = cli(*args)
    assert x.code == 0 and x.json()["continuous"]["limit"] == "batch" and x.json()["continuous"]["max_batch"] == 64
    assert r.to_json()["continuous"]["limit"] == "batch"


@pytest.mark.parametrize("args, message", [
    (("--rate", "1", "--mean-input", "8", "--mean-output", "8", "--max-batch", "0"), "--max-batch must be"),
    (("--rate", "1", "--mean-input", "8", "--mean-output", "8", "--max-batch", "-3"), "--max-batch must be"),
    (("--max-batch", "8"), "--max-batch belongs to continuous batching"),
    (("--rate", "1", "--mean-input", "8", "--mean-output", "8", "--max-batch", "lots"), "or trtllm-bench"),
    (("--rate", "1", "--mean-input", "8", "--mean-output", "8", "--max-batch", "2.5"), "--max-batch must be"),
    (("--concurrency", "4", "--mean-input", "8", "--mean-output", "8", "--max-batch", "8"), "--max-batch caps"),
])
def test_hostile(cli, args, message):
    assert_one_line_error(cli("infer", "gpt2", *args), message)


def test_trtllm_bench_keyword_sets_the_engines_settings(cli):
    """--max-batch trtllm-bench: tuning.py's arithmetic at the driver's memory (tfcalc's 79.19 GiB for an H100):
    (79.19 − 7.479) × 0.9 GiB over 65,536 B a token and 2,000 tokens a request: 528.7 → 640 and 2,048; whole prompts
    (--context-chunking off) in a budget of 2,048 (--prefill-chunk)."""
    from tfcalc import devices

    x = cli("infer", "llama3-8b", "--dtype", "fp8", "--kv-dtype", "fp8", "--rate", "10", "--mean-input", "1000",
            "--mean-output", "1000", "--max-batch", "trtllm-bench", "--json").json()["continuous"]
    gib = devices.driver_bytes(devices.by_key("h100-sxm")) / GIB
    requests = (gib - 8_030_261_248 / GIB) * 0.9 * GIB / 65_536 / 2000
    s = x["engine_settings"]
    assert s["kv_requests"] == pytest.approx(requests, rel=1e-9) and requests == pytest.approx(528.7, abs=0.1)
    assert (s["max_batch_size"], s["max_num_tokens"], s["tp_size"]) == (640, 2048, 1)
    assert (x["max_batch"], x["prefill_chunk"], x["context_chunking"]) == (640, 2048, "off")
    given = tfcalc.infer("llama3-8b", rate=10, max_batch="trtllm-bench", prefill_chunk=4096,
                         **{**RUN, "device_spec": "h100-sxm"}).to_json()["continuous"]
    assert given["prefill_chunk"] == 4096 and given["max_batch"] == 640  # a budget given stays


def test_trtllm_bench_counts_the_ep_gpus_as_its_tp_size():
    """TRT-LLM's MoE rows run `--tp 8 --ep 8` with attention DP: the heuristic over tp_size 8, the cap a rank's."""
    x = tfcalc.infer("qwen3-235b-a22b", rate=30, max_batch="trtllm-bench", ep=8, dtype="fp8", kv_dtype="fp8",
                     device_spec="h200", mean_input=1000, mean_output=1000).to_json()["continuous"]
    assert x["engine_settings"]["tp_size"] == 8 and (x["max_batch"], x["prefill_chunk"]) == (2304, 4608)


def test_untuned_quantization_takes_the_build_defaults():
    """build.py: int8/int4 are not in TUNED_QUANTS -- BuildConfig's 2,048 and 8,192 (8,192 ≥ 1,000 + 2,048)."""
    caps = trtllm_bench(*LLAMA31_8B, 1, 1, 1000, 1000, H100_NVML, "int4", "fp8")
    assert (caps.max_batch_size, caps.max_num_tokens) == (2048, 8192)
