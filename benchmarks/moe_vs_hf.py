"""tfcalc's mixture-of-experts forward against transformers' on the same device, shapes and dtype: the MoE layer
alone (one layer's experts and router, (1, T, d) in) and the whole model at 2 layers, for gpt-oss-20b's and
Qwen3-30B-A3B's shapes, random weights (nothing is downloaded), bf16. Each side is warmed up, then timed by
the host clock around a synchronized call, median of --repeat runs, the two sides interleaved so that a busy
machine slows both alike. transformers runs its default experts implementation (named in the output).

    python benchmarks/moe_vs_hf.py                         # CUDA, T = 1024
    python benchmarks/moe_vs_hf.py --device cpu --quick    # tiny shapes on the CPU: the script's own test

Used by tests/gpu/test_moe_cuda.py (tfcalc within 1.2x of transformers) and benchmarks/gpu_report.py.
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from hub_moe import GPT_OSS_20B, QWEN3_30B_A3B  # noqa: E402

from tfcalc.model import build_model  # noqa: E402
from tfcalc.model.experts import MixtureOfExperts  # noqa: E402
from tfcalc.presets import load  # noqa: E402

SHAPES = {"gpt-oss-20b": GPT_OSS_20B, "qwen3-30b-a3b": QWEN3_30B_A3B}
# tiny stand-ins for --quick: (tfcalc --set keys, HF config keys)
QUICK = ({"d_model": 64, "n_head": 4, "n_kv_head": 2, "d_head": 16, "d_ff": 32, "n_expert": 8, "vocab_size": 256},
         {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
          "intermediate_size": 32, "moe_intermediate_size": 32, "num_local_experts": 8, "num_experts": 8,
          "vocab_size": 256, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2})


def _hf_model(name: str, quick: bool, layers: int, device: str, dtype: torch.dtype):
    from transformers import AutoConfig, AutoModelForCausalLM

    fields = {k: v for k, v in copy.deepcopy(SHAPES[name]).items() if k != "quantization_config"}  # bf16 experts
    fields.update(num_hidden_layers=layers, **(QUICK[1] if quick else {}))
    if "layer_types" in fields:
        fields["layer_types"] = fields["layer_types"][:layers]
    config = AutoConfig.for_model(fields.pop("model_type"), **fields)
    with torch.device(device):  # built where it runs: no gigabytes of CPU initialisation to copy over
        return AutoModelForCausalLM.from_config(config, dtype=dtype).eval()


def _ours(name: str, quick: bool, layers: int, device: str, dtype: torch.dtype):
    sets = {"n_layer": layers, "max_seq_len": 4096, **(QUICK[0] if quick else {})}
    return build_model(load(name, [f"{k}={v}" for k, v in sets.items()]), device, dtype).eval()


def _median_s(fns: dict, device: str, repeat: int) -> dict[str, float]:
    """{name: median seconds} of each callable, interleaved, each call synchronized."""
    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize(device)

    times: dict[str, list[float]] = {name: [] for name in fns}
    with torch.inference_mode():
        for fn in fns.values():  # warm-up: allocations, kernel choice, grouped GEMM set-up
            for _ in range(3):
                fn()
        sync()
        for _ in range(repeat):
            for name, fn in fns.items():
                sync()
                start = time.perf_counter()
                fn()
                sync()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(t) for name, t in times.items()}


def compare(name: str, device: str = "cuda", seq: int = 1024, quick: bool = False, repeat: int = 20,
            layers: int = 2) -> dict:
    """Milliseconds of the MoE layer and of the 2-layer model forward, tfcalc and transformers, bf16."""
    torch.manual_seed(0)
    dtype = torch.bfloat16
    hf = _hf_model(name, quick, layers, device, dtype)
    ours = _ours(name, quick, layers, device, dtype)
    assert next(hf.parameters()).dtype == dtype == next(ours.parameters()).dtype
    moe = next(m for m in ours.modules() if isinstance(m, MixtureOfExperts))
    hf_moe = hf.model.layers[0].mlp
    d = hf.config.hidden_size
    x = torch.randn(1, seq, d, device=device, dtype=dtype)
    idx = torch.randint(0, hf.config.vocab_size, (1, seq), device=device)
    t = _median_s({"moe": lambda: moe(x), "hf_moe": lambda: hf_moe(x), "model": lambda: ours(idx),
                   "hf_model": lambda: hf(input_ids=idx, use_cache=False)}, device, repeat)
    out = {"shape": name, "device": str(device), "seq": seq, "layers": layers, "dtype": "bf16",
           "hf_experts_implementation": getattr(hf.config, "_experts_implementation", None)}
    for key, s in t.items():
        out[f"{key}_ms"] = s * 1e3
    out["moe_ratio"] = t["moe"] / t["hf_moe"]  # tfcalc ÷ transformers: below 1 is faster
    out["model_ratio"] = t["model"] / t["hf_model"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--seq", type=int, default=1024)
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="tiny shapes (the script's own test)")
    args = p.parse_args()
    for name in SHAPES:
        r = compare(name, args.device, 16 if args.quick else args.seq, args.quick, 3 if args.quick else args.repeat)
        print(f"{name:14s} MoE layer: tfcalc {r['moe_ms']:8.3f} ms  HF {r['hf_moe_ms']:8.3f} ms "
              f"({r['moe_ratio']:.2f}x)   model: tfcalc {r['model_ms']:8.3f} ms  HF {r['hf_model_ms']:8.3f} ms "
              f"({r['model_ratio']:.2f}x)"
              f"   HF experts: {r['hf_experts_implementation']}")


if __name__ == "__main__":
    main()
