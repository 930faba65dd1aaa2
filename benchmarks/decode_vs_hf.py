"""tfcalc's static-cache greedy decoding against Hugging Face `generate` on the same model, shape and
dtype: GPT-2 (124M) built from a default GPT2Config with random weights (nothing is downloaded), fp32, on
this machine's CPU.

Both sides are timed the same way: a whole greedy generation of 1 token (the prefill) and of N + 1
tokens, each the median of --repeat runs, interleaved (tfcalc, HF, tfcalc, HF, ...) so that a busy
machine slows both alike; per decode step = (t(N + 1) − t(1)) / N. HF runs its default dynamic cache
(and, with --hf-static, its static cache). Needs `pip install "transformers>=4.40"`.

    python benchmarks/decode_vs_hf.py --seq 128 --new 32 --repeat 5
"""

from __future__ import annotations

import argparse
import functools
import statistics
import time

import torch


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel

    from tfcalc.model import build_model, generate
    from tfcalc.presets import load

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq", type=int, default=128)
    p.add_argument("--new", type=int, default=32)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--hf-static", action="store_true", help="HF with cache_implementation='static'")
    args = p.parse_args()

    torch.manual_seed(0)
    ours = build_model(load("gpt2"), "cpu", torch.float32)
    hf = GPT2LMHeadModel(GPT2Config()).eval()  # gpt2's shapes: 12 layers, 768 wide, 50257 tokens, 1024 positions
    assert sum(p.numel() for p in hf.parameters()) == sum(p.numel() for p in ours.parameters()) == 124_439_808
    prompt = torch.randint(0, 50257, (1, args.seq))
    mask = torch.ones_like(prompt)
    extra = {"cache_implementation": "static"} if args.hf_static else {}

    def run_hf(n: int) -> None:
        with torch.inference_mode():
            out = hf.generate(prompt, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              pad_token_id=0, **extra)
        assert out.shape[1] == args.seq + n

    def run_ours(n: int) -> None:
        assert generate(ours, prompt, n).shape[1] == n

    for fn in (run_ours, run_hf):  # warm-up: allocations, thread pool, kernel choice
        fn(args.new + 1)
    times: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.repeat):
        for name, fn in (("tfcalc", run_ours), ("hf", run_hf)):
            for n in (1, args.new + 1):
                times.setdefault((name, n), []).append(timed(functools.partial(fn, n)))
    print(f"GPT-2 124M, fp32, CPU ({torch.get_num_threads()} threads), prompt {args.seq}, {args.new} decode steps, "
          f"median of {args.repeat}")
    for name in ("tfcalc", "hf"):
        first = statistics.median(times[(name, 1)])
        step = (statistics.median(times[(name, args.new + 1)]) - first) / args.new
        label = "tfcalc (static KV cache)" if name == "tfcalc" else \
            f"HF generate ({'static' if args.hf_static else 'dynamic'} cache)"
        print(f"{label:34s} prefill {first * 1e3:7.1f} ms   decode {step * 1e3:6.1f} ms/token   "
              f"{1 / step:6.1f} tokens/s")


if __name__ == "__main__":
    main()
