"""Time the mixture-of-experts forward on this CPU: a 2-layer gpt-oss-like and qwen3-moe-like model (d 512,
32 experts, top-4, fp32), a T = 256 forward and a batch-1 one-token step (the MoE layer alone and the whole
model, no cache), median of repeated runs after warm-up. Run it with PYTHONPATH at the checkout to time:

    PYTHONPATH=$PWD python benchmarks/moe_cpu.py [--threads 1]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from tfcalc.model import build_model
from tfcalc.presets import load

SHAPES = {"gpt-oss-like": ("gpt-oss-20b", {"d_ff": 512}), "qwen3-moe-like": ("qwen3-30b-a3b", {"d_ff": 256})}
COMMON = {"n_layer": 2, "d_model": 512, "n_head": 8, "n_kv_head": 2, "d_head": 64, "n_expert": 32,
          "n_expert_active": 4, "vocab_size": 1024, "max_seq_len": 512}


def median_s(fn, warmup: int = 3, runs: int = 15) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def time_shape(preset: str, extra: dict) -> dict[str, float]:
    """{what: median seconds} for one shape."""
    torch.manual_seed(0)
    cfg = load(preset, [f"{k}={v}" for k, v in {**COMMON, **extra}.items()])
    model = build_model(cfg, "cpu", torch.float32).eval()
    moe = next(m for m in model.modules() if type(m).__name__ == "MixtureOfExperts")
    seq, one = torch.randint(0, cfg.vocab_size, (1, 256)), torch.randint(0, cfg.vocab_size, (1, 1))
    x256, x1 = torch.randn(1, 256, cfg.d_model), torch.randn(1, 1, cfg.d_model)
    with torch.no_grad():
        rows = {"model T=256": median_s(lambda: model(seq)), "MoE layer T=256": median_s(lambda: moe(x256)),
                "model 1 token": median_s(lambda: model(one), runs=50),
                "MoE layer 1 token": median_s(lambda: moe(x1), runs=100)}
    x256.requires_grad_(True)
    rows["MoE layer T=256 fwd+bwd"] = median_s(lambda: moe(x256).square().sum().backward(), runs=5)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    for label, (preset, extra) in SHAPES.items():
        for name, s in time_shape(preset, extra).items():
            print(f"{label:15s} {name:24s} {s * 1e3:8.3f} ms")


if __name__ == "__main__":
    main()
