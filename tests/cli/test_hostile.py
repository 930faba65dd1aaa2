"""Hostile input across every command, in-process: one stderr line under 300 characters, the right exit
code, no traceback, a bounded time, and no file harmed (issue 11). The files are in hostile.py; cases that
need a real process (signals, broken pipes, encodings, rlimits) are in test_hostile_process.py."""

from __future__ import annotations

import hashlib
import os
import stat
import time
from pathlib import Path

import hostile
import hostile_runs
import pytest
from deepseek_configs import HOSTILE as DEEPSEEK_HOSTILE
from hostile_cfg import HOSTILE as CFG_HOSTILE

from tfcalc.measure import device as dev

BIG = "9" * 5000
GiB = 2**30

# (id, argv with {d} for the folder of hostile files, exit code, a fragment of the one stderr line)
CASES = [
    # ---- YAML and JSON bombs, size and special files ----
    ("yaml-alias-bomb", ["params", "{d}/bomb.yaml", "--no-measure"], 2, "aliases expand to more than 10,000"),
    ("yaml-alias-bomb-7", ["params", "{d}/bomb7.yaml"], 2, "aliases expand"),
    ("yaml-alias-bomb-flops", ["flops", "{d}/bomb.yaml"], 2, "aliases expand"),
    ("yaml-alias-bomb-compare", ["compare", "{d}/bomb.yaml", "gpt2"], 2, "aliases expand"),
    ("yaml-alias-bomb-snapshot", ["snapshot", "{d}/bomb.yaml", "-o", "{d}/out.json"], 2, "aliases expand"),
    ("yaml-alias-cycle", ["params", "{d}/cycle.yaml"], 2, "refers to a value that contains it"),
    ("yaml-100k-nesting", ["params", "{d}/deep.yaml"], 2, "nested more than 64 levels"),
    ("yaml-70-nesting", ["show", "{d}/deep70.yaml"], 2, "nested more than 64 levels"),
    ("yaml-duplicate-key", ["params", "{d}/dup.yaml"], 2, "the key 'n_layer' is given twice (lines 1 and 6)"),
    ("yaml-duplicate-nested-key", ["show", "{d}/dup_nested.yaml"], 2, "the key 'a' is given twice"),
    ("yaml-5000-digit-int", ["params", "{d}/long_int.yaml"], 2, "an integer of 5,000 digits is too long"),
    ("yaml-4000-digit-int", ["params", "{d}/wide_int.yaml"], 2, "must be at most 1,099,511,627,776; got a 4000-digit"),
    ("yaml-int-past-cap", ["flops", "{d}/too_big_int.yaml"], 2, "must be at most 1,099,511,627,776"),
    ("yaml-ffn-mult-overflow", ["params", "{d}/huge_ffn_mult.yaml"], 2, "the derived d_ff is more than"),
    ("yaml-inf-layers", ["params", "{d}/inf_layers.yaml"], 2, "must be an integer; got inf"),
    ("yaml-nan-layers", ["params", "{d}/nan_layers.yaml"], 2, "must be an integer; got nan"),
    ("yaml-bool-width", ["params", "{d}/bool_width.yaml"], 2, "must be an integer; got True"),
    ("yaml-name-list", ["params", "{d}/name_list.yaml"], 2, "'name' must be a string; got ['a', 'b']"),
    ("yaml-name-bytes", ["params", "{d}/name_bytes.yaml"], 2, "'name' must be a string"),
    ("yaml-10k-char-key", ["params", "{d}/long_key.yaml"], 2, "(str of 10,000 characters)"),
    ("yaml-10k-char-plain-key", ["params", "{d}/long_plain_key.yaml"], 2, "could not find expected ':'"),
    ("yaml-python-tag", ["params", "{d}/python_tag.yaml"], 2, "could not determine a constructor"),
    ("yaml-list", ["params", "{d}/list.yaml"], 2, "expected a mapping of field: value, got a list"),
    ("yaml-empty", ["params", "{d}/empty.yaml"], 2, "the file is empty"),
    ("yaml-syntax", ["params", "{d}/bad_syntax.yaml"], 2, "not valid YAML at line"),
    ("yaml-tabs", ["params", "{d}/tab.yaml"], 2, "not valid YAML"),
    ("yaml-not-utf8", ["params", "{d}/latin1.yaml"], 2, "not UTF-8 text"),
    ("yaml-over-1MiB", ["params", "{d}/big.yaml"], 2, "larger than 1 MiB"),
    ("yaml-fifo", ["params", "{d}/fifo.yaml"], 2, "is a FIFO (named pipe), not a YAML file"),
    ("json-fifo", ["show", "{d}/fifo.json"], 2, "is a FIFO (named pipe), not a JSON file"),
    ("yaml-folder", ["params", "{d}/folder.yaml"], 2, "is a directory"),
    ("dev-zero", ["params", "/dev/zero"], 2, "is a character device"),
    ("dev-null-json-link", ["params", "{d}/null-link.json"], 2, "is a character device"),
    ("missing-file", ["params", "{d}/nowhere.yaml"], 2, "no such file"),
    ("path-5000-chars", ["params", "{d}/" + "p" * 5000 + ".yaml"], 2, "cannot be read"),
    ("preset-100k-chars", ["params", "q" * 100_000], 2, "unknown preset"),
    # ---- Hugging Face config.json ----
    ("hf-model-type-list", ["params", "{d}/list_type/config.json"], 2, "model_type ['llama'] is not supported"),
    ("hf-model-type-dict", ["show", "{d}/dict_type/config.json"], 2, "model_type {'llama': 1} is not supported"),
    ("hf-hidden-act-list", ["params", "{d}/list_act/config.json"], 2, "'hidden_act' ['silu'] is not an activation"),
    ("hf-position-type-list", ["params", "{d}/list_pos/config.json"], 2, "'position_embedding_type' ['absolute']"),
    ("hf-duplicate-key", ["params", "{d}/dup_key/config.json"], 2, "the key 'vocab_size' is given twice"),
    ("hf-5000-digit-number", ["params", "{d}/long_number/config.json"], 2, "a number too long to read"),
    ("hf-nan-layers", ["params", "{d}/nan_layers/config.json"], 2, "must be an integer; got nan"),
    ("hf-100k-nesting", ["params", "{d}/deep/config.json"], 2, "nested too deeply to read"),
    ("hf-70-nesting", ["params", "{d}/deep70/config.json"], 2, "nested more than 64 levels"),
    ("hf-top-level-list", ["params", "{d}/top_list/config.json"], 2, "expected a JSON object"),
    ("hf-not-json", ["params", "{d}/not_json/config.json"], 2, "not valid JSON at line 1"),
    # ---- --set ----
    ("set-5000-digit-int", ["params", "gpt2", "--set", f"n_layer={BIG}"], 2, "an integer of 5,000 digits"),
    ("set-10k-char-value", ["params", "gpt2", "--set", "source=" + "[" * 10_000], 2, "(str of 10,000 characters)"),
    ("set-no-value", ["params", "gpt2", "--set", "n_layer"], 2, "--set expects key=value"),
    ("set-no-key", ["params", "gpt2", "--set", "=3"], 2, "--set expects key=value"),
    ("set-list", ["params", "gpt2", "--set", "n_layer=[1, 2]"], 2, "expected a single value"),
    ("set-alias-cycle", ["params", "gpt2", "--set", "n_layer=&a [*a]"], 2, "refers to a value that contains it"),
    ("set-python-tag", ["params", "gpt2", "--set", "norm=!!python/name:os.system"], 2, "cannot read the value"),
    ("set-unknown-long-field", ["params", "gpt2", "--set", "k" * 5000 + "=1"], 2, "unknown field"),
    ("set-past-cap", ["flops", "gpt2", "--set", f"d_model={2**50}"], 2, "must be at most"),
    # 100,000 experts are grouped tensors, a few modules (tests/measure/test_fit.py): refused only for top-k
    ("set-huge-experts", ["params", "{d}/huge_experts.yaml", "--set", "n_expert_active=100001"], 2,
     "must not exceed n_expert"),
    # the fields of gpt-oss and Qwen3-MoE (tfcalc.config_moe)
    ("set-dense-layers-order", ["params", "qwen3-30b-a3b", "--set", "dense_layers=[5,1]"], 2,
     "must list distinct layers in increasing order"),
    ("set-dense-layers-past-depth", ["params", "qwen3-30b-a3b", "--set", "dense_layers=[48]"], 2, "names layer 48"),
    ("set-dense-layers-dense-model", ["params", "gpt2", "--set", "dense_layers=[1]"], 2,
     "dense_layers applies to a mixture of experts only"),
    ("set-dense-layers-not-ints", ["params", "qwen3-30b-a3b", "--set", "dense_layers=[a]"], 2,
     "must be a list of integers or null"),
    ("set-swiglu-alpha-alone", ["params", "mixtral", "--set", "swiglu_alpha=1.7"], 2,
     "swiglu_alpha needs swiglu_limit"),
    ("set-expert-format-unknown", ["memory", "gpt-oss-20b", "--set", "expert_format=fp4"], 2,
     "must be one of mxfp4 or null"),
    ("set-router-bias-dense", ["params", "gpt2", "--set", "router_bias=true"], 2,
     "router_bias applies to a mixture of experts only"),
    ("set-sinks-encoder-decoder", ["params", "t5-base", "--set", "attn_sinks=true"], 2, "attn_sinks applies"),
    # ---- flops ----
    ("flops-seq-10e400", ["flops", "gpt2", "--seq", str(10**400)], 2, "got a 401-digit number"),
    ("flops-batch-5000-digits", ["flops", "gpt2", "--batch", BIG], 2, "Invalid value for '--batch'"),
    ("flops-batch-0", ["flops", "gpt2", "--batch", "0"], 2, "--batch must be between 1"),
    ("flops-src-seq-decoder", ["flops", "gpt2", "--src-seq", "8"], 2, "applies to encoder-decoder models only"),
    ("flops-measure-past-context", ["flops", "gpt2", "--measure", "--seq", "1025"], 2, "exceeds the model's context"),
    ("flops-measure-deep-meta", ["flops", "{d}/deep_model.yaml", "--measure"], 2, "more than the 20,000 tfcalc builds"),
    ("flops-measure-bad-device", ["flops", "gpt2", "--measure", "--device", "tpu"], 2, "unknown device 'tpu'"),
    ("flops-measure-cpu-too-big", ["flops", "bert-base", "--measure", "--device", "cpu", "--batch", "2048", "--seq",
                                   "512"], 2, "not running bert-base on cpu (forward, fp32): it needs an estimated "
                                              "30.41 GiB"),
    ("flops-measure-cpu-training", ["flops", "gpt2", "--measure", "--device", "cpu", "--training", "--batch", "16"],
     2, "try --batch 1 --seq 960 (an estimated 2 GiB)"),
    # ---- memory ----
    ("memory-budget-no-unit", ["memory", "gpt2", "--budget", "24"], 2, "--budget '24' has no unit; write 24GB"),
    ("memory-budget-10k-chars", ["memory", "gpt2", "--budget", "8" * 10_000], 2, "(10,000 characters)"),
    ("memory-budget-negative", ["memory", "gpt2", "--budget", "-5GB"], 2, "cannot read --budget '-5GB' as a size"),
    ("memory-budget-nan", ["memory", "gpt2", "--budget", "nanGB"], 2, "cannot read --budget 'nanGB' as a size"),
    ("memory-budget-bare-g", ["memory", "gpt2", "--budget", "80G"], 2, "say GB for 10^9 bytes"),
    ("memory-measure-too-big", ["memory", "gpt2", "--measure", "--training", "--batch", "64"], 2,
     "try --batch 5 (an estimated 7.576 GiB)"),
    ("memory-measure-deep", ["memory", "{d}/deep_model.yaml", "--measure"], 2, "more than the 20,000"),
    ("memory-seq-10e400", ["memory", "gpt2", "--seq", str(10**400)], 2, "401-digit number"),
    # ---- bench ----
    ("bench-seq-empty-item", ["bench", "gpt2", "--seq", "1,,2"], 2, "expected integers separated by commas"),
    ("bench-seq-comma", ["bench", "gpt2", "--seq", ","], 2, "expected integers separated by commas"),
    ("bench-seq-10e400", ["bench", "gpt2", "--seq", str(10**400)], 2, "lengths must be between 1 and"),
    ("bench-seq-range-backwards", ["bench", "gpt2", "--seq", "5..1"], 2, "1 <= START <= END"),
    ("bench-seq-range-past-cap", ["bench", "gpt2", "--seq", "1..99999999999999999999"], 2, "START <= END <="),
    ("bench-repeat-0", ["bench", "gpt2", "--repeat", "0"], 2, "--repeat must be between 1"),
    ("bench-n-layer-0", ["bench", "gpt2", "--n-layer", "0"], 2, "--n-layer must be between 1 and 12"),
    ("bench-matmul-10e30", ["bench", "gpt2", "--matmul-size", str(10**30)], 2, "--matmul-size must be between"),
    ("bench-too-big", ["bench", "llama2-70b", "--n-layer", "1", "--seq", "4096"], 2,
     "the free memory on cpu is 6 GiB; try --batch 1 --seq"),
    ("bench-deep", ["bench", "{d}/deep_model.yaml", "--seq", "8"], 2, "more than the 20,000"),
    # ---- scan ----
    ("scan-plot-txt", ["scan", "gpt2", "--plot", "{d}/x.txt"], 2, "the extension must be one of .png"),
    ("scan-plot-folder", ["scan", "gpt2", "--plot", "{d}"], 2, "is a folder; give a file name"),
    ("scan-plot-no-extension", ["scan", "gpt2", "--plot", "{d}/plots"], 2, "the extension must be one of"),
    ("scan-plot-fifo", ["scan", "gpt2", "--plot", "{d}/fifo.png"], 2, "is a FIFO"),
    ("scan-seq-zero", ["scan", "gpt2", "--seq", "0..4"], 2, "1 <= START"),
    ("scan-size-zero", ["scan", "gpt2", "--size", "0", "0"], 2, "--size takes 0.5 to 100 inches"),
    ("scan-dpi-huge", ["scan", "gpt2", "--dpi", "100000"], 2, "--dpi 10 to 1200"),
    ("scan-budget-no-unit", ["scan", "gpt2", "--budget", "24"], 2, "has no unit"),
    # ---- snapshot ----
    ("snapshot-to-char-device", ["snapshot", "gpt2", "-o", "/dev/null"], 2, "it is a character device"),
    ("snapshot-to-link-to-device", ["snapshot", "gpt2", "-o", "{d}/null-link.json"], 2, "(a link to /dev/null)"),
    ("snapshot-to-fifo", ["snapshot", "gpt2", "-o", "{d}/fifo.json"], 2, "it is a FIFO"),
    ("snapshot-to-folder", ["snapshot", "gpt2", "-o", "{d}/folder.yaml"], 2, "it is a directory"),
    ("snapshot-stdout-and-json", ["snapshot", "gpt2", "-o", "-", "--json"], 2, "give one of them"),
    ("snapshot-missing-folder", ["snapshot", "gpt2", "-o", "{d}/nowhere/s.json"], 2, "cannot write there"),
    # ---- check ----
    ("check-overrides-ints", ["check", "{d}/snap_overrides_ints.json"], 2, "'overrides' must be a list of KEY=VALUE"),
    ("check-preset-dict", ["check", "{d}/snap_preset_dict.json"], 2, "'preset' must be a string"),
    ("check-spec-list", ["check", "{d}/snap_spec_list.json"], 2, "has no 'spec' string"),
    ("check-figures-list", ["check", "{d}/snap_figures_list.json"], 2, "'params' must be an object"),
    ("check-no-entries", ["check", "{d}/snap_empty.json"], 2, "has no entries"),
    ("check-entries-dict", ["check", "{d}/snap_entries_dict.json"], 2, "no 'entries' list"),
    ("check-format-2", ["check", "{d}/snap_format2.json"], 2, "snapshot format 2"),
    ("check-100k-nesting", ["check", "{d}/snap_deep.json"], 2, "nested too deeply"),
    ("check-duplicate-key", ["check", "{d}/snap_dup.json"], 2, "the key 'format' is given twice"),
    ("check-5000-digit-format", ["check", "{d}/snap_long_format.json"], 2, "a number too long"),
    ("check-dev-zero", ["check", "/dev/zero"], 2, "is a character device"),
    ("check-fifo", ["check", "{d}/fifo.json"], 2, "is a FIFO"),
    ("check-tolerance-nan", ["check", "{d}/snap_empty.json", "--tolerance", "nan"], 2, "--tolerance must be a finite"),
    ("check-tolerance-inf", ["check", "{d}/snap_empty.json", "--tolerance", "inf"], 2, "--tolerance must be a finite"),
    ("check-tolerance-negative", ["check", "{d}/snap_empty.json", "--tolerance", "-1"], 2, "0 or more"),
    # ---- checkpoints: model folders and safetensors files ----
    ("ckpt-fifo-file", ["params", "{d}/ckpt_fifo/model.safetensors"], 2, "is a FIFO (named pipe), not a checkpoint"),
    ("ckpt-fifo-in-folder", ["params", "{d}/ckpt_fifo"], 2, "no .safetensors file"),
    ("ckpt-index-fifo", ["params", "{d}/ckpt_index_fifo"], 2, "is a FIFO (named pipe), not a index file"),
    ("ckpt-index-100k-nesting", ["params", "{d}/ckpt_index_deep"], 2, "nested too deeply"),
    ("ckpt-index-duplicate-key", ["params", "{d}/ckpt_index_dup"], 2, "the key 'weight_map' is given twice"),
    ("ckpt-index-escapes-folder", ["params", "{d}/ckpt_index_escape"], 2, "is not a file name in the checkpoint"),
    ("ckpt-garbage-bytes", ["params", "{d}/ckpt_garbage"], 2, "not a valid safetensors file"),
    ("ckpt-huge-header", ["params", "{d}/ckpt_huge_header"], 2, "not a valid safetensors file"),
    ("ckpt-5000-char-name", ["params", "{d}/" + "c" * 5000 + ".safetensors"], 2, "no such file"),
    ("ckpt-bench-weights-fifo", ["bench", "{d}/ckpt_fifo", "--weights", "{d}/ckpt_fifo/model.safetensors"], 2,
     "is a FIFO (named pipe), not a checkpoint"),
    ("ckpt-dev-zero", ["params", "/dev/zero.safetensors"], 2, "no such file"),
    # ---- the rest ----
    ("show-set-dict", ["show", "gpt2", "--set", "d_model={a: 1}"], 2, "expected a single value"),
    ("presets-bad-format", ["presets", "--format", "yaml"], 2, "'yaml' is not one of"),
    ("unknown-option", ["params", "gpt2", "--bogus"], 2, "No such option"),
    ("missing-argument", ["flops"], 2, "Missing argument"),
    ("json-and-format", ["params", "gpt2", "--json", "--format", "csv"], 2, "ask for two formats"),
    # ---- round 3 (issue 23), 1: data loss -- a full disk keeps the old plot (the write fails, see PATCHED) ----
    ("scan-plot-disk-full", ["scan", "gpt2", "--seq", "4..8", "--plot", "{d}/old.png"], 2,
     "No space left on device); the old file, if any, is intact"),
    # ---- 2: device files read as config files are ----
    ("device-fifo", ["plan", "llama2-7b", "--device-spec", "{d}/fifo.yaml"], 2, "is a FIFO (named pipe)"),
    ("device-fifo-infer", ["infer", "gpt2", "--device-spec", "{d}/fifo.yaml"], 2, "is a FIFO (named pipe)"),
    ("device-dev-zero", ["infer", "gpt2", "--device-spec", "/dev/zero"], 2, "is a character device"),
    ("device-alias-bomb", ["plan", "llama2-7b", "--device-spec", "{d}/bomb.yaml"], 2, "aliases expand"),
    ("device-over-1MiB", ["infer", "gpt2", "--device-spec", "{d}/big.yaml"], 2, "larger than 1 MiB"),
    ("device-100k-nesting", ["plan", "llama2-7b", "--device-spec", "{d}/deep.yaml"], 2, "nested more than 64"),
    ("device-duplicate-key", ["infer", "gpt2", "--device-spec", "{d}/dev_dup.yaml"], 2,
     "the key 'memory_bytes' is given twice"),
    ("device-5000-digit-number", ["infer", "gpt2", "--device-spec", "{d}/dev_5000_digits.yaml"], 2,
     "an integer of 5,000 digits is too long"),
    ("device-400-digit-memory", ["plan", "llama2-7b", "--device-spec", "{d}/dev_400_digits.yaml"], 2,
     "field 'memory_bytes' must be at most 1e+21; got a 400-digit integer"),
    ("device-half-byte-memory", ["plan", "llama2-7b", "--device-spec", "{d}/dev_half.yaml"], 2,
     "field 'memory_bytes' must be at least 1 byte; got 0.5"),
    ("device-gpus-per-node-1e9", ["plan", "llama2-7b", "--gpus", "auto", "--device-spec",
                                  "{d}/dev_gpus_per_node.yaml"], 2, "'gpus_per_node' must be an integer from 1"),
    ("device-rates-1e-300", ["infer", "gpt2", "--device-spec", "{d}/dev_tiny_rates.yaml", "--json"], 2,
     "'peak_flops.bf16' must be at least 1"),
    ("device-name-list", ["infer", "gpt2", "--device-spec", "{d}/dev_name_list.yaml"], 2,
     "field 'name' must be a string; got ['a', 'b']"),
    # ---- 2: work bounded before it starts ----
    ("plan-gpus-1e9", ["plan", "llama2-7b", "--gpus", "1000000000"], 2, "too many GPUs"),
    ("plan-gpus-prime", ["plan", "llama2-7b", "--gpus", "1099511627689"], 2, "too many GPUs"),
    ("infer-gen-1e6", ["infer", "gpt2", "--gen", "1000000", "--batch", "0"], 2, "--batch: batch sizes must be"),
    ("bench-nproc-too-big", ["bench", "llama2-7b", "--nproc", "2"], 2,
     "not running bench llama2-7b on 2 rank(s): it needs an estimated"),
    ("hf-ref-12GiB", ["params", "a/b"], 2, "is not in the local Hugging Face cache"),
    ("ckpt-unreadable", ["params", "{d}/ckpt_tiny"], 2, "model.safetensors: cannot be read (Permission denied)"),
    ("ckpt-load-wrong-shape", ["bench", "{d}/ckpt_wrong_shape", "--weights", "{d}/ckpt_wrong_shape", "--seq", "4"],
     2, "'wte.weight': shape [61, 16] does not fit tok_emb.weight [61, 32]"),
    # ---- 5: no tracebacks ----
    ("plan-tokens-1e999999", ["plan", "llama2-7b", "--gpus", "8", "--tokens", "1e999999"], 2,
     "--tokens: '1e999999' is more than 1e+30 tokens"),
    ("hf-home-nouser", ["params", "meta-llama/Llama-2-7b-hf"], 2, "HF_HOME=~nouser: cannot expand '~nouser'"),
    ("infer-measure-repeat-0", ["infer", "gpt2", "--measure", "--repeat", "0"], 2, "--repeat must be between 1"),
    # ---- 6: encoders refused before any rank starts ----
    ("bench-nproc-bert", ["bench", "bert-base", "--nproc", "2"], 2, "bert-base is an encoder: a real distributed"),
    ("plan-measure-bert", ["plan", "bert-base", "--dp", "2", "--measure"], 2, "is an encoder: a real distributed"),
    ("plan-measure-t5-tp", ["plan", "t5-base", "--tp", "2", "--measure"], 2, "per-head position bias"),
    # the range check speaks first: no past-the-context warning for a prompt of 0 tokens (found by the fuzz test)
    ("infer-seq-0-with-gen", ["infer", "gpt2", "--seq", "0", "--gen", "2000"], 2, "--seq must be between 1 and"),
    # ---- 9: bad values refused, not read as others ----
    ("plan-tp-0", ["plan", "llama2-7b", "--gpus", "8", "--tp", "0"], 2, "--tp must be between 1 and"),
    ("plan-pp-0", ["plan", "llama2-7b", "--gpus", "8", "--pp", "0"], 2, "--pp must be between 1 and"),
    ("plan-nproc-0", ["plan", "gpt2", "--dp", "2", "--measure", "--nproc", "0"], 2, "--nproc must be between 1"),
    ("bench-nproc-0", ["bench", "gpt2", "--nproc", "0"], 2, "--nproc must be between 1"),
    ("bench-nproc-tp-0", ["bench", "gpt2", "--nproc", "2", "--tp", "0"], 2, "--tp must be between 1"),
    ("plan-tokens-empty", ["plan", "llama2-7b", "--gpus", "8", "--tokens", ""], 2, "cannot read '' as a token count"),
    ("plan-tokens-negative-exponent", ["plan", "llama2-7b", "--gpus", "8", "--tokens", "1e-5"], 2, "must be positive"),
    ("infer-warmup-negative", ["infer", "gpt2", "--measure", "--warmup", "-1"], 2, "--warmup must be between 0"),
    ("plan-gpus-1e9-named-too-many", ["plan", "llama2-7b", "--gpus", "1000000"], 2, "give fewer --gpus"),
    # ---- 11: a --set value that cannot be read is bad input ----
    ("set-unreadable-int", ["params", "gpt2", "--set", "n_layer=[1"], 2, "--set n_layer: cannot read the value"),
    ("set-name-too-long", ["params", "gpt2", "--set", "name=" + "n" * 5000], 2, "must be at most 1,000 characters"),
    # ---- 8: no Infinity in JSON ----
    ("plan-mfu-1e-300", ["plan", "llama2-7b", "--gpus", "8", "--tp", "8", "--mfu", "1e-300", "--json"], 2,
     "--mfu must be a number in [0.0001, 1]; got 1e-300"),
    # ---- DeepSeek's latent attention, routing, YaRN (tests/deepseek_configs.py) ----
    *DEEPSEEK_HOSTILE,
    *hostile_runs.CASES,  # round 4 (issue 33): measured runs' fit, bounds, messages and outputs
    # ---- issue 33: per-layer lists against the depth, scales, quantized checkpoints (tests/hostile_cfg.py) ----
    *CFG_HOSTILE,
]
# cases refused against a limit, patched to the same size on any machine (free memory, in GiB)
LIMITED = {"flops-measure-cpu-too-big": 2, "flops-measure-cpu-training": 2, "memory-measure-too-big": 8,
           "bench-too-big": 6, "bench-nproc-too-big": 6}


def _disk_full(monkeypatch, tmp_path) -> None:
    """Every write fails as on a full disk, after the temporary file is created (tfcalc.writing)."""
    from tfcalc import writing

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(writing.os, "fsync", full)


def _hf_home_nouser(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", "~nouser")


def _huge_ref(monkeypatch, tmp_path) -> None:
    """A Hugging Face cache whose refs/main is a 12 GiB (sparse) file: read 256 bytes at most."""
    cache = tmp_path
    (cache / "models--a--b" / "refs").mkdir(parents=True)
    (cache / "models--a--b" / "snapshots" / ("0" * 40)).mkdir(parents=True)
    with open(cache / "models--a--b" / "refs" / "main", "wb") as f:
        f.truncate(12 * GiB)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))


def _unreadable_weights(monkeypatch, tmp_path) -> None:
    """Opening a .safetensors file fails as without read permission (tests may run as root, who may read)."""
    from tfcalc.checkpoint import files

    real = os.open

    def denied(path, *args, **kwargs):
        if str(path).endswith(".safetensors"):
            raise PermissionError(13, "Permission denied")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(files.os, "open", denied)


def _no_reading(monkeypatch, tmp_path) -> None:
    """A tensor read is a failure: the shapes must be refused from the headers first (the header reader,
    tfcalc.checkpoint.files._header, keeps the real safe_open)."""
    import safetensors

    import tfcalc.checkpoint.files as files

    real, header = safetensors.safe_open, files._header

    def never(*args, **kwargs):
        raise AssertionError("a tensor was read before its shape was checked")

    def headers_only(file):
        monkeypatch.setattr(safetensors, "safe_open", real)
        try:
            return header(file)
        finally:
            monkeypatch.setattr(safetensors, "safe_open", never)

    monkeypatch.setattr(safetensors, "safe_open", never)
    monkeypatch.setattr(files, "_header", headers_only)


# cases whose condition is set up in-process: (case -> setup(monkeypatch, tmp_path))
PATCHED = {"scan-plot-disk-full": _disk_full, "hf-home-nouser": _hf_home_nouser, "hf-ref-12GiB": _huge_ref,
           "ckpt-unreadable": _unreadable_weights, "ckpt-load-wrong-shape": _no_reading, **hostile_runs.PATCHED}


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return hostile.write(tmp_path_factory.mktemp("hostile"))


def _state(folder: Path) -> dict[str, tuple]:
    """Every entry under folder (and /dev/null): its type, mode and content digest (or link target)."""
    out = {"/dev/null": (stat.S_IFMT(os.lstat("/dev/null").st_mode),)}
    for path in sorted(folder.rglob("*")):
        st = os.lstat(path)
        kind = stat.S_IFMT(st.st_mode)
        if stat.S_ISREG(st.st_mode):
            extra = hashlib.sha256(path.read_bytes()).hexdigest()
        elif stat.S_ISLNK(st.st_mode):
            extra = os.readlink(path)
        else:
            extra = None
        out[str(path)] = (kind, stat.S_IMODE(st.st_mode), extra)
    return out


@pytest.mark.parametrize("case, argv, code, message", CASES, ids=[c[0] for c in CASES])
def test_hostile_input_is_one_line(cli, folder, monkeypatch, tmp_path, case, argv, code, message):
    if case in LIMITED:  # the same refusal on any machine, whatever this one has free
        monkeypatch.setattr(dev, "free_memory", lambda device: LIMITED[case] * GiB)
    if case in PATCHED:
        PATCHED[case](monkeypatch, tmp_path)
    before = _state(folder)
    start = time.monotonic()
    from tfcalc.presets import preset_dir

    before_presets = _state(preset_dir())
    r = cli(*[a.replace("{d}", str(folder)).replace("{presets}", str(preset_dir())) for a in argv])
    elapsed = time.monotonic() - start
    assert r.code == code, (r.code, r.err)
    assert r.out == ""
    assert r.err.count("\n") == 1 and r.err.startswith("tfcalc: error: "), r.err
    assert len(r.err) < 300, len(r.err)
    assert "Traceback" not in r.err and "internal error" not in r.err
    assert message.replace("{d}", str(folder)) in r.err, r.err
    assert elapsed < 20, f"{case} took {elapsed:.1f} s"
    assert _state(folder) == before, "a file was changed"
    assert _state(preset_dir()) == before_presets, "a preset was changed"


def test_the_table_covers_every_command():
    commands = {argv[0] for _, argv, _, _ in CASES}
    assert commands == {"params", "flops", "memory", "bench", "scan", "snapshot", "check", "compare", "show",
                        "presets", "plan", "infer"}
    assert len(CASES) >= 100


def test_check_of_a_snapshot_naming_an_alias_bomb_reports_it_at_once(cli, folder):
    """The entry cannot be loaded: a drift of that entry (exit 1), not a hang and not an internal error."""
    start = time.monotonic()
    r = cli("check", str(folder / "snap_bomb.json"), "--json")
    assert r.code == 1 and time.monotonic() - start < 10
    (drift,) = r.json()
    assert drift["field"] == "(config)" and "aliases expand to more than 10,000 values" in drift["got"]
    assert len(drift["got"]) < 300
