"""Apply a parallel layout to the real model with PyTorch's own APIs: ``DistributedDataParallel``
(ZeRO-0), FSDP2 ``fully_shard`` (ZeRO-3) and ``parallelize_module`` (tensor and sequence parallel).

What each does here, and why (the plan, tfcalc.count.training.shard and tfcalc.count.training.comm, counts the same):

1. DDP: ``gradient_as_bucket_view=True`` (the gradients live in DDP's buckets, no second copy) and
   ``broadcast_buffers=False`` (the only buffers are RoPE/sinusoid tables every rank computes alike).
2. FSDP2: every block is an FSDP unit, then the root (embeddings, final norm, head); defaults
   otherwise (blocks resharded after forward, the root not).
3. TP: fused tensors are re-ordered before sharding, [Q₀ K₀ V₀ | Q₁ K₁ V₁ | ...] and [gate₀ up₀ |
   gate₁ up₁ | ...], so rank r's contiguous block of rows (what ColwiseParallel gives it) holds its own
   heads' Q, K, V and its own FFN columns' gate and up; each Attention then runs with its local head
   counts. The re-ordering permutes freshly initialized weights, so it changes no count. QKV and FFN-up
   are ColwiseParallel, the attention output and FFN-down RowwiseParallel, the untied LM head
   ColwiseParallel with vocabulary-sharded logits (the loss runs under ``loss_parallel``), the untied
   token embedding ColwiseParallel (split along the hidden dimension; see tfcalc.count.training.shard for why),
   a tied embedding and head one vocabulary-split tensor (RowwiseParallel lookups, Megatron's).
   What is split is read block by block from the model's components (tfcalc.architecture): a
   cross-attention's Q, fused [K | V] and output as self-attention's; a mixture of experts' shared
   expert as an FFN, its router and routed experts whole on every rank (experts replicated, for now);
   an encoder-decoder's encoder blocks as the decoder's.
4. Sequence parallel (Korthikanti et al. 2022): norms are SequenceParallel, the row-parallel layers
   reduce-scatter to sequence shards, and each attention/FFN input is gathered (PrepareModuleInput).
   The embedding output is gathered whole and block 0 takes its sequence shard (a local slice), so the
   positions are added to whole sequences; the final norm and head take sequence shards.
5. TP × DP: FSDP2 over the dp dimension of a 2-D mesh, after TP (as torchtitan does).
6. Issue 20: FSDP2 blocks with ``reshard_after_forward`` as the layout says (False for
   --no-reshard-after-forward and for what a ZeRO-2 plan runs); expert parallelism
   (tfcalc.measure.experts_parallel) before DDP, whose buckets then skip the rank's own experts; ZeRO-1's
   ZeroRedundancyOptimizer is the optimizer (tfcalc.measure.distributed).
"""

from __future__ import annotations

import torch
from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.count.training.layout import Layout
from tfcalc.errors import InputError
from tfcalc.model.mixers import interleave, interleave_rows, resolve

__all__ = ["check_measurable", "interleave_rows"]  # interleave_rows: where tfcalc.model.mixers keeps it


def check_measurable(cfg: ModelConfig, layout: Layout) -> None:
    """The layouts a real run covers: DDP, FSDP, TP (with SP), FSDP × TP; one pipeline stage. The models
    it trains: decoders and encoder-decoders with an LM head (the loss is cross-entropy over the logits;
    an encoder-decoder reads the tokens as its source too); an encoder's pooled output or hidden states
    have no such loss."""
    if cfg.arch == "encoder" or not cfg.lm_head:
        kind = "an encoder" if cfg.arch == "encoder" else "a model without an LM head"
        raise InputError(f"{cfg.name} is {kind}: a real distributed run (plan --measure, bench --nproc) trains "
                         "models with an LM head (a next-token loss); estimate it without one")
    if layout.zero == 2 or (layout.zero == 1 and layout.zero_engine != "torch"):
        # tfcalc.report.plan_check runs ZeRO-2 as FSDP2 without resharding after forward, ZeRO-1 as PyTorch's
        # ZeroRedundancyOptimizer (zero_engine "torch")
        raise InputError(f"a real run covers ZeRO-0 (DDP), ZeRO-1 (as ZeroRedundancyOptimizer), ZeRO-2 (as FSDP2 "
                         f"without resharding after forward) and ZeRO-3 (FSDP); ZeRO-{layout.zero} is planned, not "
                         "run here (plan --measure runs it as PyTorch offers it)")
    arch = cfg.architecture
    if layout.hsdp is not None and layout.tp > 1:
        raise InputError("--hsdp is run with tp 1 (FSDP2 on a 2-D data-parallel mesh); under TP it is planned, not run")
    if layout.etp is not None and (layout.tp > 1 or layout.etp > 1):  # count.training.experts_folded
        raise InputError("experts folded over TP ranks or split by --etp are planned, not run (a run of expert "
                         "parallelism takes its group from the data-parallel ranks)")
    if layout.ep > 1:  # tfcalc.measure.experts_parallel
        moe = [b.ffn for _, b, _ in arch.kinds() if b.is_moe]
        if layout.tp > 1 or layout.zero != 0 or layout.ep != layout.dp:
            raise InputError("a run of expert parallelism takes every data-parallel rank into the expert-parallel "
                             "group (ep = dp), with tp 1 and DDP (--zero 0); other layouts are planned, not run")
        if any(f.capacity_factor is not None or f.sigmoid_input or f.beside_mlp is not None for f in moe):
            raise InputError(f"{cfg.name}: a run of expert parallelism covers dropless mixtures whose router weights "
                             "the outputs (no capacity factor, no Llama 4 input scaling, no Gemma 4 experts beside the "
                             "MLP); planned, not run")
    if layout.pp > 1:
        raise InputError("a real run has one pipeline stage; pp > 1 is planned, not run")
    if layout.recompute != "none":
        raise InputError("a real run has no activation recompute; the plan models it")
    if layout.tp > 1 and layout.dp > 1 and layout.zero == 0:
        raise InputError("a real run combines TP with FSDP (--zero 3), not with DDP")
    arch = cfg.architecture
    if layout.tp > 1 and any(s.embeddings.positions in ("alibi", "relative") for s in arch.stacks):
        raise InputError(f"{cfg.name}: a run under TP splits the heads, and its per-head position bias "
                         "(ALiBi, T5's buckets) is not split with them; planned, not run")
    if layout.tp > 1 and (cfg.per_layer_dim or cfg.altup_inputs or cfg.moe_beside_mlp):
        raise InputError(f"{cfg.name}: per-layer inputs, AltUp's streams and Gemma 4's experts beside the MLP are "
                         "planned under TP, not run")
    if layout.tp > 1:  # each mixer's torch module says whether it runs under TP (tfcalc.model.mixers)
        for _, b, _ in arch.kinds():
            for spec in (b.mixer, b.cross_attention):
                reason = None if spec is None else resolve(spec.module).tp_refusal(spec)
                if reason is not None:
                    raise InputError(f"{cfg.name}: {reason}")
    if layout.sequence_parallel and arch.head.pooler:
        raise InputError("sequence parallelism splits the tokens a pooler reads: not run with a pooler")
    if layout.sequence_parallel and (len(arch.stacks) > 1 or arch.has_moe):
        raise InputError(f"{cfg.name}: sequence parallelism is run on one-stack dense models; with a mixture of "
                         "experts or an encoder-decoder it is planned, not run")


def stacks(model: nn.Module) -> list[nn.Module]:
    """The model's stacks of blocks: an encoder-decoder's encoder, then the output stack."""
    return ([model.encoder] if getattr(model, "encoder", None) is not None else []) + [model]


@torch.no_grad()
def localize_fused(model: nn.Module, tp: int) -> None:
    """Re-order fused rows for TP and give each attention its local head counts (step 3), block by block
    as each block's components have them (tfcalc.architecture: its heads, V width, FFN or MoE)."""
    for stack in stacks(model):
        for block in stack.blocks:
            block.attn.tp_localize(tp)  # each mixer its own (tfcalc.model.mixers)
            if block.cross_attn is not None:
                block.cross_attn.tp_localize(tp)
            for ffn in _split_ffns(block):
                if ffn.gated:
                    interleave(ffn.up, [ffn.width, ffn.width], tp)


def _split_ffns(block: nn.Module) -> list[nn.Module]:
    """The FFNs TP splits: a dense FFN, or a mixture of experts' shared expert (its routed experts and
    router stay whole on every rank, for now: tfcalc.architecture.ffn)."""
    if block.spec.is_moe:
        return [block.ffn.shared] if block.ffn.shared is not None else []
    return [block.ffn]


def _block_plan(block: nn.Module, seq, sp: bool) -> dict:
    """Step 3 (and 4) for one block, from what it holds."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
    )

    plan = {f"attn.{name}": style for name, style in block.attn.tp_plan(seq).items()}
    if block.cross_attn is not None:
        plan.update({f"cross_attn.{name}": style for name, style in block.cross_attn.tp_plan(seq).items()})
    for ffn in _split_ffns(block):
        path = "ffn" if ffn is block.ffn else "ffn.shared"
        plan.update({f"{path}.up": ColwiseParallel(), f"{path}.down": RowwiseParallel(output_layouts=seq)})
    if sp:  # one-stack dense models only (check_measurable)
        plan.update({name: SequenceParallel() for name in ("attn_norm", "ffn_norm", "attn_post_norm",
                                                           "ffn_post_norm") if getattr(block, name) is not None})
        plan.update({
            "attn": PrepareModuleInput(input_layouts=(seq, None, None),
                                       desired_input_layouts=(Replicate(), None, None)),
            "ffn": PrepareModuleInput(input_layouts=(seq,), desired_input_layouts=(Replicate(),)),
        })
    return plan


def apply_tp(model: nn.Module, mesh, sp: bool) -> None:
    """Steps 3 and 4 on the tp mesh. A tied token embedding and LM head are one vocabulary-split tensor
    (Megatron): the embedding RowwiseParallel (each rank looks up its rows, the partial sums all-reduced),
    the head ColwiseParallel, then tied again (parallelize_module gives each module its own parameter)."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    localize_fused(model, mesh.size())
    seq = Shard(1) if sp else Replicate()
    embedding = RowwiseParallel if model.tied else ColwiseParallel
    root = {"tok_emb": embedding(input_layouts=Replicate(), output_layouts=Replicate())}
    encoder = getattr(model, "encoder", None)
    if encoder is not None and encoder.tok_emb is not model.tok_emb:  # an untied encoder table: split as well
        root["encoder.tok_emb"] = ColwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())
    if model.lm_head is not None:
        root["lm_head"] = ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False)
    if sp and model.final_norm is not None:
        root["final_norm"] = SequenceParallel()
    if sp:
        root["blocks.0"] = PrepareModuleInput(input_layouts=(Replicate(), None, None, None),
                                              desired_input_layouts=(seq, None, None, None), use_local_output=True)
    parallelize_module(model, mesh, root)
    model.tie_weights()
    for stack in stacks(model):
        for block in stack.blocks:
            parallelize_module(block, mesh, _block_plan(block, seq, sp))


def apply_fsdp(model: nn.Module, mesh, reshard_after_forward: bool = True) -> nn.Module:
    """Step 2 (and 5, on the dp dimension of a 2-D mesh); ``reshard_after_forward`` False keeps each block
    gathered from its forward to its backward (plan --no-reshard-after-forward, and what a ZeRO-2 run runs)."""
    from torch.distributed.fsdp import fully_shard

    for stack in stacks(model):
        for block in stack.blocks:
            fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh)
    return model


def apply_ddp(model: nn.Module, device: torch.device, group) -> nn.Module:
    """Step 1, on the dp group of the mesh."""
    from torch.nn.parallel import DistributedDataParallel

    ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=ids, process_group=group, gradient_as_bucket_view=True,
                                   broadcast_buffers=False)


_MESHES: dict[tuple, object] = {}
HSDP_DIMS = ("dp_replicate", "dp_shard")


def device_mesh(device_type: str, dp: int, tp: int, hsdp: int | None = None):
    """The (dp, tp) mesh, made once per process: one set of process groups serves every job of a run
    (DeviceMesh caches its slices across equal meshes, so a second mesh would hand out the first's groups).
    Under HSDP the dp dimension is (dp_replicate, dp_shard) = (dp / hsdp, hsdp), flattened back to dp."""
    from torch.distributed.device_mesh import init_device_mesh

    key = (device_type, dp, tp, hsdp)
    if key not in _MESHES:
        if hsdp is None:
            _MESHES[key] = init_device_mesh(device_type, (dp, tp), mesh_dim_names=("dp", "tp"))
        else:
            mesh = init_device_mesh(device_type, (dp // hsdp, hsdp, tp), mesh_dim_names=(*HSDP_DIMS, "tp"))
            mesh[HSDP_DIMS]._flatten("dp")
            _MESHES[key] = mesh
    return _MESHES[key]


def group_names(mesh) -> dict[str, tuple[str, int]]:
    """{process-group name: ('dp', 'tp', 'dp_replicate' or 'dp_shard', size)} for the mesh's dimensions of
    more than one rank."""
    out = {}
    for name in mesh.mesh_dim_names:
        size = mesh[name].size()
        if size > 1:
            for group in (mesh.get_group(name), mesh[name].get_group()):
                out[group.group_name] = (name, size)
    return out


def parallelize(model: nn.Module, cfg: ModelConfig, layout: Layout, device: torch.device):
    """(the model to train, its mesh, {process-group name: (dp or tp, size)})."""
    from torch.nn.parallel import DistributedDataParallel

    mesh = device_mesh(device.type, layout.dp, layout.tp, layout.hsdp)
    groups = group_names(mesh)
    if layout.tp > 1:
        apply_tp(model, mesh["tp"], layout.sequence_parallel)
    if layout.ep > 1:  # experts local, DDP skips them (tfcalc.measure.experts_parallel)
        from tfcalc.measure.experts_parallel import apply_ep

        local = apply_ep(model, mesh["dp"].get_group(), layout.ep, mesh.get_local_rank("dp"))
        DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(model, local)
    if layout.dp > 1:
        dp = mesh["dp"]
        shard = mesh[HSDP_DIMS] if layout.hsdp is not None else dp  # HSDP: FSDP2 on the 2-D (replicate, shard) mesh
        model = (apply_fsdp(model, shard, layout.reshard_after_forward) if layout.zero == 3
                 else apply_ddp(model, device, dp.get_group()))
    return model, mesh, groups
