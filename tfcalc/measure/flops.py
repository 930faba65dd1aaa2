"""Measured FLOPs: run the real module under ``torch.utils.flop_counter.FlopCounterMode``.

FlopCounterMode counts matmul-like aten ops from their shapes (``addmm`` as 2·m·k·n, bias ignored), the
convention of tfcalc.count.model.flops. What it sees depends on the device, because
``F.scaled_dot_product_attention`` dispatches to different aten ops:

- on ``meta`` it is decomposed into the math path (two ``bmm``: Q·Kᵀ and attention·V), which is counted;
  a grouped-query K/V is expanded to the query heads first, so the count is q heads × the full T² square;
- on the CPU it is one ``aten._scaled_dot_product_flash_attention_for_cpu`` op, for which PyTorch
  registers no formula: FlopCounterMode counts 0 for the attention scores. We pass formulas for it, and
  for its backward, through ``custom_mapping`` (local to our counter, no global registration), reusing
  PyTorch's own ``sdpa_flop_count`` / ``sdpa_backward_flop_count`` (they take K/V with fewer heads and
  count the query heads, as the kernel computes);
- on CUDA the flash, memory-efficient and cuDNN kernels already have formulas in PyTorch.

A mixture of experts runs each expert on the tokens routed to it, so the count is that of the top-k
experts per token, whatever the routing: its forward has the same shapes for any routing, meta included
(tfcalc.model.experts), and its grouped GEMM, for which PyTorch has no formula, is counted by the one
tfcalc.model.grouped registers (2·rows·in·out). An encoder-decoder runs on (source, target) token ids.

Meta is the default: nothing is allocated, so GPT-3 175B at T = 2048 is counted anywhere. A real device
allocates the weights and runs the forward; ``check_measurable`` refuses what would not fit or not run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch.utils.flop_counter import FlopCounterMode, sdpa_backward_flop_count, sdpa_flop_count

from tfcalc.config import ConfigError, ModelConfig
from tfcalc.count.model.flops import GROUPS
from tfcalc.measure.params import blocks_of, local_path
from tfcalc.measure.speedups import fast_meta
from tfcalc.model import build_model
from tfcalc.workload import Workload

aten = torch.ops.aten

LATENT_LINEARS = ("q", "q_a", "q_b", "kv_a", "kv_b")  # DeepSeek's latent attention (tfcalc.model.latent)
# module path of a leaf Linear, read as tfcalc.measure.params.local_path reads it (no "encoder.", no
# "blocks.<i>.", experts as "expert_ffn.") -> breakdown group (tfcalc.count.model.flops.GROUPS)
MODULE_GROUPS = {"attn.qkv": "attention_proj", "attn.out": "attention_proj",
                 "cross_attn.q": "cross_attention_proj", "cross_attn.kv": "cross_attention_proj",
                 "cross_attn.out": "cross_attention_proj", "ffn.router": "ffn", "ffn.up": "ffn", "ffn.down": "ffn",
                 "expert_ffn.up": "ffn", "expert_ffn.down": "ffn", "ffn.shared.up": "ffn", "ffn.shared.down": "ffn",
                 "ffn.shared_gate": "ffn", "pooler": "pooler", "head_dense": "lm_head", "lm_head": "lm_head",
                 **{f"attn.{m}": "attention_proj" for m in LATENT_LINEARS},
                 "project_out": "lm_head", "project_in": "embeddings",  # OPT-350m's projections
                 "attn_hc": "attention_proj", "ffn_hc": "ffn", "hc_head": "lm_head",  # DeepSeek-V4's hyper-connections
                 "ple_in.proj": "embeddings", "ple.gate": "ffn", "ple.out": "ffn",  # Gemma 4's per-layer inputs
                 "altup_io": "embeddings", "altup": "ffn", "laurel": "ffn"}  # Gemma 3n's (each module's all)
# mixer module -> (the group of its projections: every submodule of it, whatever the kind of mixer; the group
# of what it counts beyond them: SDPA's scores, a state-space scan's matmuls)
ATTENTION_MODULES = {"attn": ("attention_proj", "attention_scores"),
                     "cross_attn": ("cross_attention_proj", "cross_attention_scores")}


def _cpu_flash_flop(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs) -> int:
    return sdpa_flop_count(query_shape, key_shape, value_shape)


def _cpu_flash_backward_flop(
    grad_out_shape, query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs
) -> int:
    return sdpa_backward_flop_count(grad_out_shape, query_shape, key_shape, value_shape)


def _unit_lower_solve_flop(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
    """linalg_solve_triangular, unit lower (a gated DeltaNet chunk's UT transform, tfcalc.model.gated_deltanet):
    n(n-1)/2 multiply-adds per right-hand column, n(n-1) FLOPs, over the batch (tfcalc.architecture.gated_deltanet).
    PyTorch registers no formula: FlopCounterMode counts 0 for it."""
    *batch, n, cols = b_shape
    return math.prod(batch) * n * (n - 1) * cols


CUSTOM_FORMULAS = {
    aten.linalg_solve_triangular: _unit_lower_solve_flop,
    aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_flop,
    aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward_flop,
}


def flop_counter() -> FlopCounterMode:
    """A FlopCounterMode that also counts the CPU flash-attention ops (see the module docstring)."""
    return FlopCounterMode(display=False, custom_mapping=CUSTOM_FORMULAS)


@dataclass(frozen=True)
class MeasuredFlops:
    device: str
    total: int  # the forward pass, all that FlopCounterMode counted
    by_module: dict[str, int]  # attn.qkv, attn.out, attn.scores (SDPA), ffn.up, ..., lm_head: summed over blocks
    groups: dict[str, int]  # mapped onto tfcalc.count.model.flops.GROUPS, plus 'other' for anything unattributed
    training_total: int | None = None  # forward + backward, when asked


def _positions_table(cfg: ModelConfig) -> str | None:
    """What limits the real module to max_seq_len positions, or None when nothing does."""
    return {"learned": "learned positions", "sinusoidal": "sinusoidal table rows",
            "rope": "RoPE table rows"}.get(cfg.pos_encoding)


def estimate_bytes(cfg: ModelConfig, workload: Workload, training: bool = False) -> int:
    """What a measured run holds at its peak, in fp32 (the dtype it builds in): the weights and the forward
    pass's working set; with training, the weights, their gradients and the activations autograd keeps
    (tfcalc.count.model.memory, the estimate `tfcalc memory` checks against measured peaks)."""
    from tfcalc.count.model import memory as mem
    from tfcalc.count.model.training_memory import training_state

    w = replace(workload.for_model(cfg), dtype="fp32")
    if training:
        return training_state(cfg, "fp32", "sgd").total + mem.activations(cfg, w).total
    return mem.weights_bytes(cfg, "fp32") + mem.forward_working_set(cfg, w)


def check_measurable(cfg: ModelConfig, workload: Workload, device: str, training: bool = False) -> None:
    """Raise ConfigError (one line) when the real module cannot run the workload on device: beyond its
    position table, too many modules to build, or (off meta) more memory than the tightest limit allows."""
    from tfcalc.measure.fit import require_buildable, require_fits, smaller_run

    w = workload.for_model(cfg)
    table = _positions_table(cfg)
    for option, length in (("--seq", w.seq), ("--src-seq", w.src_seq)):
        if table and length is not None and length > cfg.max_seq_len:
            raise ConfigError(
                f"{cfg.name}: {option} {length} exceeds the model's context of {cfg.max_seq_len} {table}, so the "
                "module cannot run it; drop --measure to count analytically"
            )
    require_buildable(cfg, blocks_of(cfg), cfg.name,
                      "a smaller --set n_layer (FLOPs per layer do not depend on depth), or drop --measure")
    if torch.device(device).type == "meta":
        return
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as e:  # e.g. CUDA not compiled in, or no such GPU
        raise ConfigError(f"--device {device} cannot be used here: {str(e).splitlines()[0]}") from None
    what = f"{cfg.name} on {device} ({'forward and backward' if training else 'forward'}, fp32)"

    def need(b: int, t: int) -> int:  # the same run at another size (the source as long as it was)
        return estimate_bytes(cfg, replace(w, batch=b, seq=t), training)

    require_fits(need(w.batch, w.seq), device, what, "measure on meta (the default), which allocates nothing",
                 smaller_run(need, w.batch, w.seq))


def _module_counts(counts: dict[str, dict]) -> dict[str, int]:
    """Sum FlopCounterMode's per-module-path counts over the blocks and stacks, by module path."""
    totals = {path: sum(ops.values()) for path, ops in counts.items()}
    out = dict.fromkeys(list(MODULE_GROUPS) + [f"{name}.scores" for name in ATTENTION_MODULES], 0)
    children: dict[str, int] = {}  # each path's nearest counted submodules' counts, summed (a module called
    for path, n in totals.items():  # through its children only, Zamba2's shared block, has no count of its own)
        parent = path.rpartition(".")[0]
        while parent and parent not in totals:
            parent = parent.rpartition(".")[0]
        children[parent] = children.get(parent, 0) + n
    for path, n in totals.items():
        _, _, inside = path.partition(".")  # FlopCounterMode names paths from the root's class: "Transformer."
        local = local_path(inside)[1]
        mixer, _, child = local.partition(".")
        inner = children.get(path, 0)
        if local in MODULE_GROUPS or (mixer in ATTENTION_MODULES and child and not inner):
            out[local] = out.get(local, 0) + n  # a Linear, or a submodule of a mixer: one of its projections
        elif mixer in ATTENTION_MODULES:  # what a mixer module (or one nested in it) counts beyond its submodules:
            out[f"{mixer}.scores"] += n - inner  # SDPA, a scan (Falcon-H1's Mamba2 beside its attention)
    return out


def _groups(by_module: dict[str, int], total: int) -> dict[str, int]:
    out = dict.fromkeys((g for g in GROUPS if g != "embeddings"), 0)
    for path, group in MODULE_GROUPS.items():
        if by_module[path] or group != "embeddings":  # embeddings: a lookup, unless projected in (OPT-350m)
            out[group] = out.get(group, 0) + by_module[path]
    for path, n in by_module.items():  # another mixer's submodules (tfcalc.model.mixers): its projections
        mixer, _, child = path.partition(".")
        if path not in MODULE_GROUPS and mixer in ATTENTION_MODULES and child != "scores":
            out[ATTENTION_MODULES[mixer][0]] += n
    for name, (_, group) in ATTENTION_MODULES.items():
        out[group] += by_module[f"{name}.scores"]
    out["other"] = total - sum(out.values())
    return out


def model_inputs(cfg: ModelConfig, workload: Workload, device: str,
                 dtype: torch.dtype = torch.float32) -> tuple[tuple[torch.Tensor, ...], dict[str, torch.Tensor]]:
    """(args, kwargs) for forward(): (idx,); (src_idx, tgt_idx) for an encoder-decoder; a stack with
    cross_attention also reads memory, src_seq states (default: seq) of width d_model."""
    w = workload.for_model(cfg)
    idx = torch.zeros(w.batch, w.seq, dtype=torch.long, device=device)
    if cfg.arch == "encoder-decoder":
        return (torch.zeros(w.batch, w.src_seq, dtype=torch.long, device=device), idx), {}
    if cfg.cross_attention:
        return (idx,), {"memory": torch.zeros(w.batch, w.src_seq, cfg.d_model, device=device, dtype=dtype)}
    return (idx,), {}


def _loss(output) -> torch.Tensor:
    """A scalar that every output depends on (BERT returns hidden states and the pooled token)."""
    return sum(o.sum() for o in output) if isinstance(output, tuple) else output.sum()


def measure_flops(cfg: ModelConfig, workload: Workload, device: str = "meta", training: bool = False) -> MeasuredFlops:
    """Count the FLOPs of the real module's forward pass (and, with training, of forward + backward) on
    the workload (an encoder-decoder reads its src_seq source tokens, default: seq)."""
    check_measurable(cfg, workload, device, training)
    model = build_model(cfg, device)
    inputs, kwargs = model_inputs(cfg, workload, device)
    training_total = None
    with fast_meta(device):  # the same count, without the start-up and repeated work (see speedups)
        with torch.no_grad(), flop_counter() as counter:
            model(*inputs, **kwargs)
        if training:
            with flop_counter() as training_counter:
                _loss(model(*inputs, **kwargs)).backward()
            training_total = training_counter.get_total_flops()
    total = counter.get_total_flops()
    by_module = _module_counts(counter.get_flop_counts())
    return MeasuredFlops(str(torch.device(device)), total, by_module, _groups(by_module, total), training_total)
