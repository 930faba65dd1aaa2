"""Pipeline parallelism on real ranks, with PyTorch's own engine (``torch.distributed.pipelining``):
``Schedule1F1B`` for --schedule 1f1b, ``ScheduleInterleaved1F1B`` for --schedule interleaved and
``ScheduleInterleavedZeroBubble`` on one stage a rank for --schedule zero-bubble: PyTorch's ZB1P (Qi et al.
2024, arXiv 2401.10241), which with one local stage is ZB-H1, tfcalc's model (tfcalc.count.perf.pipeline,
step 3): 1F1B's order of forwards, each backward split into I (the inputs' gradient, sent back at once)
and W (the weights', deferred into the drain), 1F1B's sends and in-flight micro-batches. ``ScheduleDualPipeV``
(PyTorch 2.11 and later) for --schedule dualpipev (tfcalc.count.perf.pipeline, step 5): 2p stages in a V,
rank r holding stages r and 2p − 1 − r (tfcalc.count.training.shard.V_SHAPE), rank 0 both ends.

1. The model is built whole on every rank (the same seed), then cut into pp × V chunks of the blocks
   (tfcalc.count.training.shard.stage_ranges: rank r holds model chunks r, r + pp, ...); the first chunk holds the
   embeddings, the last the final norm and the head (under DualPipeV: stage 0 and stage 2p − 1, both on rank
   0, which then holds a tied embedding once: no all-reduce of step 2). With --pp-split-counts the ends count
   as a block each in that cut, so a chunk may hold the embedding alone or the head alone (no block): a
   PipelineStage takes any module, and the chunk then embeds, or runs the head, and nothing else. Each chunk is a
   ``PipelineStage``; a rank's parameters are its chunks' (the rest of the model it built is never run nor
   counted).
2. A tied embedding is held by the first chunk (as the token embedding) and the last (as the head), on
   two ranks: their gradients are all-reduced between those two after the backward passes (Megatron's
   "embedding group"; the plan's pp_tied_embedding).
3. The schedule runs the step's m micro-batches (scaling the gradients by 1/m), the cross-entropy of the
   logits upcast to fp32 on the last chunk, as tfcalc.measure.distributed does on one stage; then Adam.
4. Recorded: each activation and gradient the schedule sends, as it hands them to torch.distributed
   (its ``_batch_p2p``, the one place its sends and receives go through): the payload of every isend,
   and the calls; and the tied gradient's all-reduce. Saved activations: every tensor autograd packs on
   the rank during the step (rank 0 holds all its forwards in flight at once when m ≤ p and V ≤ 2: the
   plan's peak); under DualPipeV (2p micro-batches through stages that keep fewer) the most held at once
   (SavedBytes.pack_live). A micro-batch whose backward PyTorch splits (stage_backward_input with
   retain_graph, then stage_backward_weight) keeps part of its saved tensors past its W, to the step's end
   (measured on gloo: 20,736 of a one-block stage's 47,616 bytes): DualPipeV's step 3 splits p − r − 1
   micro-batches on rank r before its peak, so there the measurement exceeds the plan by up to those
   micro-batches (0 on the last rank); the model states of the rank's chunks.
5. With data parallelism (pp × dp ranks, tfcalc.report.plan_check step 4): a (dp, pp) mesh, each replica its
   own tokens; after the schedule, each rank's gradients all-reduced over its stage's dp group in one
   contiguous buffer (ReplicaGrads: Megatron-LM's way; PyTorch's DDP does not survive the schedule).
The rank's order of computations is returned with its answer (``actions``: F, and B or I and W).
Not run: pipeline with TP, ZeRO, recompute or sequence parallelism in one run (the measured run leaves them
out, and says so); ZB-H2 and ZB-V (not modelled either).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch import nn

from tfcalc.config import ModelConfig
from tfcalc.count.perf.pipeline import head_stage
from tfcalc.count.training.layout import Layout
from tfcalc.count.training.shard import stage_ranges, total_blocks
from tfcalc.errors import InputError
from tfcalc.measure.rank_bytes import SavedBytes, optimizer_tensors, storage_bytes
from tfcalc.measure.training_job import WARMUP_STEPS, job_layout

EMBEDDING = ("tok_emb", "pos_emb", "type_emb", "project_in", "emb_norm")
HEAD = ("final_norm", "head_dense", "head_norm", "project_out", "lm_head")


def check_pipeline_measurable(cfg: ModelConfig, layout: Layout, nproc: int) -> None:
    """What a measured pipeline covers (see the module docstring); one InputError line otherwise."""
    if cfg.arch != "decoder" or cfg.cross_attention:
        raise InputError(f"{cfg.name}: a measured pipeline runs decoder-only stacks (planned, not run)")
    if any(s.embeddings.positions == "relative" for s in cfg.architecture.stacks) or cfg.architecture.head.pooler:
        raise InputError(f"{cfg.name}: a learned position bias shared by every block, or a pooler, is not cut into "
                         "pipeline stages in a measured run (planned, not run)")
    if cfg.per_layer_dim or cfg.kv_shared_layers or cfg.altup_inputs:  # Gemma 4 and 3n (tfcalc.config_gemma)
        raise InputError(f"{cfg.name}: per-layer inputs, K/V shared across layers and AltUp's streams reach across "
                         "pipeline stages (planned, not run)")
    if any(b.shortcut for b, _ in cfg.architecture.output.kinds()):
        raise InputError(f"{cfg.name}: a shortcut MoE (LongCat-Flash) hands its experts' output to the next block, "
                         "across any stage cut between them: a measured pipeline is planned, not run")
    if layout.schedule == "dualpipev":
        from torch.distributed.pipelining import schedules

        if not hasattr(schedules, "ScheduleDualPipeV"):  # PyTorch 2.11 has it; older ones do not
            raise InputError(f"PyTorch {torch.__version__} has no ScheduleDualPipeV: a measured dualpipe run needs "
                             "2.11 or later (planned, not run)")
    chunks, counted = layout.pp * layout.virtual_stages, len(layout.pp_split_counts)
    even = layout.pp_layers or layout.schedule == "dualpipev"  # a given split, or DualPipeV's cut: as it comes
    if not even and (total_blocks(cfg) + counted) % chunks:
        ends = f" + {counted} ends counted" if counted else ""
        raise InputError(f"the measured pipeline cuts {cfg.name}'s {total_blocks(cfg)} blocks{ends} into pp × V = "
                         f"{chunks} equal chunks: not divisible")
    if layout.pp * layout.dp != nproc:
        raise InputError(f"a measured pipeline runs one stage per rank: pp {layout.pp} × dp {layout.dp} on {nproc} "
                         "ranks")


class Chunk(nn.Module):
    """Blocks ``span`` of the model; the first chunk embeds, the last runs the head (see step 1)."""

    def __init__(self, model: nn.Module, span: range, first: bool, last: bool):
        super().__init__()
        self._model = [model]  # not a submodule: only the parts below are this chunk's parameters
        self.span, self.first, self.last = span, first, last
        self.blocks = nn.ModuleList(model.blocks[i] for i in span)
        parts = (EMBEDDING if first else ()) + (HEAD if last else ())
        self.parts = nn.ModuleDict({n: getattr(model, n) for n in parts if getattr(model, n, None) is not None})

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        model = self._model[0]
        if self.first:
            x = model.embed(x)  # (B, T) ids -> (B, T, d)
        T = x.shape[1]
        ropes = model.rope_tables(0, T, x.dtype)
        masks = model.layer_masks(T, x.dtype)
        carry: list = []  # a shortcut MoE's output for the next block (tfcalc.model.block)
        for block, i in zip(self.blocks, self.span, strict=True):
            x = block(x, ropes[i], masks[i], None, carry=carry)
        if carry:  # the stage ends between a shortcut block and the block that adds its experts' output
            raise InputError("a measured pipeline stage may not end on a shortcut MoE block (LongCat-Flash's first "
                             "sub-layer): give a layout whose stages hold whole layer pairs")
        return model.head(x) if self.last else x


class P2PLog:
    """The sends torch.distributed.pipelining hands to torch.distributed (step 4), while recording."""

    def __init__(self):
        self.payload = self.calls = 0
        self.recording = False

    @contextlib.contextmanager
    def patched(self):
        from torch.distributed.pipelining import schedules

        original = schedules._batch_p2p

        def batch_p2p(ops, desc=None):
            if self.recording:
                for op in ops:
                    if op.op is torch.distributed.isend:
                        self.payload += op.tensor.numel() * op.tensor.element_size()
                        self.calls += 1
            return original(ops, desc)

        schedules._batch_p2p = batch_p2p
        try:
            yield self
        finally:
            schedules._batch_p2p = original


class PipelineGroups:
    """The process groups of a pipeline with data parallelism (step 5): a (dp, pp) mesh, rank r holding stage
    r mod pp of replica r div pp; without dp, the whole world is the pipeline."""

    def __init__(self, device: torch.device, dp: int, pp: int):
        import torch.distributed as dist

        self.pp_size = pp
        if dp == 1:
            self.pp, self.dp, self.pp_rank, self.dp_rank = None, None, dist.get_rank(), 0
            return
        from torch.distributed.device_mesh import init_device_mesh

        mesh = _MESHES.get((device.type, dp, pp))
        if mesh is None:  # once per process: one set of groups serves every job of a run
            mesh = _MESHES[device.type, dp, pp] = init_device_mesh(device.type, (dp, pp), mesh_dim_names=("dp", "pp"))
        self.pp, self.dp = mesh.get_group("pp"), mesh.get_group("dp")
        self.pp_rank, self.dp_rank = mesh.get_local_rank("pp"), mesh.get_local_rank("dp")

    def ends(self):
        """The group of this replica's first and last stages (a tied embedding's two copies, step 2); every
        rank creates every replica's group, in the same order, as torch.distributed requires."""
        import torch.distributed as dist

        p, mine = self.pp_size, None
        for replica in range(dist.get_world_size() // p):
            group = dist.new_group([replica * p, replica * p + p - 1])
            if replica == self.dp_rank:
                mine = group
        return mine


_MESHES: dict[tuple, object] = {}


class ReplicaGrads:
    """The replicas' gradient all-reduce of a pipeline with data parallelism (step 5), as Megatron-LM's
    DistributedDataParallel runs it: one contiguous buffer of the rank's gradients, all-reduced and averaged
    over its stage's dp group after the schedule's last backward. Not PyTorch's DDP: its reducer rebuilds
    its buckets from the gradients of the first synchronized backward, and the schedule's per-micro-batch
    backwards make it record each parameter m times (an internal assert: "rebuilt parameter indices size is
    not same as original model parameters size"). Recorded: the buffer's bytes and the call."""

    def __init__(self, group, size: int):
        self.group, self.size, self.payload, self.calls = group, size, 0, 0

    def all_reduce(self, params: list[nn.Parameter], record: bool) -> None:
        import torch.distributed as dist
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        grads = [q.grad for q in params if q.grad is not None]
        flat = _flatten_dense_tensors(grads)
        dist.all_reduce(flat, group=self.group)
        flat /= self.size
        for g, reduced in zip(grads, _unflatten_dense_tensors(flat, grads), strict=True):
            g.copy_(reduced)
        if record:
            self.payload += flat.numel() * flat.element_size()
            self.calls += 1


class PipelineTrainer:
    """The model's chunks on this rank under the layout's schedule, Adam, and this rank's batches (the
    interface of tfcalc.measure.distributed.Trainer)."""

    def __init__(self, cfg: ModelConfig, layout: Layout, model: nn.Module, device: torch.device):
        from torch.distributed.pipelining import (
            PipelineStage,
            Schedule1F1B,
            ScheduleInterleaved1F1B,
            ScheduleInterleavedZeroBubble,
        )

        self.cfg, self.layout, self.device = cfg, layout, device
        p = layout.pp
        self.groups = PipelineGroups(device, layout.dp, p)
        self.rank, self.dp_rank = self.groups.pp_rank, self.groups.dp_rank  # the stage, the replica
        v = layout.virtual_stages if layout.schedule == "interleaved" else 1
        dual = layout.schedule == "dualpipev"
        n = 2 * p if dual else p * v
        index = [self.rank, n - 1 - self.rank] if dual else [self.rank + k * p for k in range(v)]  # V or looped
        spans = stage_ranges(total_blocks(cfg), p, self.rank, v, layout.stage_split)  # a span may be empty
        self.chunks = [Chunk(model, span, i == 0, i == n - 1) for i, span in zip(index, spans, strict=True)]
        self.replicas = ReplicaGrads(self.groups.dp, layout.dp) if layout.dp > 1 else None  # step 5
        stages = [PipelineStage(c, i, n, device, group=self.groups.pp) for i, c in zip(index, self.chunks, strict=True)]
        self.first = any(c.first for c in self.chunks)
        self.last = any(c.last for c in self.chunks)
        self.m = layout.micro_batches

        def loss(output, target):
            return F.cross_entropy(output.float().view(-1, output.shape[-1]), target.view(-1))

        if dual:  # 2p stages in a V, two a rank (the module docstring)
            from torch.distributed.pipelining import schedules

            self.schedule = schedules.ScheduleDualPipeV(stages, n_microbatches=self.m, loss_fn=loss)
        elif layout.schedule == "zero-bubble":  # ZB-H1: one stage a rank, B and W apart (the module docstring)
            self.schedule = ScheduleInterleavedZeroBubble(stages, n_microbatches=self.m, loss_fn=loss)
        elif v == 1:
            self.schedule = Schedule1F1B(stages[0], n_microbatches=self.m, loss_fn=loss)
        else:
            self.schedule = ScheduleInterleaved1F1B(stages, n_microbatches=self.m, loss_fn=loss)
        self.actions = _compute_actions(self.schedule, self.rank)
        self.params = list({id(q): q for c in self.chunks for q in c.parameters()}.values())
        self.opt = torch.optim.Adam(self.params, foreach=False)
        tied = getattr(model, "tied", False) and p > 1 and not dual  # DualPipeV: both ends on rank 0
        self.tied_group = self.groups.ends() if tied else None  # every rank joins the groups' creation
        self.tied = model.lm_head.weight if tied and (self.first or self.last) else None
        gen = torch.Generator().manual_seed(1000 + self.dp_rank)  # the stages of one replica: the same tokens
        self.tokens = torch.randint(0, cfg.vocab_size, (self.m * layout.micro_batch, layout.seq),
                                    generator=gen).to(device)
        self.p2p = P2PLog()
        self.tied_calls = self.tied_payload = 0
        self.first_loss = torch.tensor(float("nan"))

    def step(self, log=None, saved=None) -> dict[str, int]:
        """One step of m micro-batches; the state bytes of the rank's chunks (step 3)."""
        import torch.distributed as dist

        hooks = (torch.autograd.graph.saved_tensors_hooks(saved.pack_live, lambda held: held.t) if saved is not None
                 else contextlib.nullcontext())
        self.p2p.recording = log is not None
        losses: list = []
        kwargs = {"target": self.tokens, "losses": losses} if self.last else {}
        args = (self.tokens,) if self.first else ()
        with self.p2p.patched(), hooks:
            self.schedule.step(*args, **kwargs)
        self.p2p.recording = False
        if self.replicas is not None:  # step 5: the replicas' gradients averaged
            self.replicas.all_reduce(self.params, log is not None)
        if self.tied is not None:  # step 2: the two copies' gradients summed
            dist.all_reduce(self.tied.grad, group=self.tied_group)
            if log is not None:
                self.tied_calls += 1
                self.tied_payload += self.tied.grad.numel() * self.tied.grad.element_size()
        if self.last and losses:
            self.first_loss = losses[0].detach()
        grads = storage_bytes(q.grad for q in self.params)
        self.opt.step()
        self.opt.zero_grad()
        return {"weights_bytes": storage_bytes(self.params), "grads_bytes": grads,
                "optimizer_bytes": storage_bytes(optimizer_tensors(self.opt))}

    def collectives(self) -> list[dict]:
        """What step 4 recorded, as tfcalc.count.training.comm.Collective's fields."""
        out = []
        if self.p2p.calls:
            out.append({"cause": "pp_activations", "op": "send_recv", "group": "pp", "group_size": 2,
                        "payload_bytes": self.p2p.payload, "calls": self.p2p.calls})
        if self.tied_calls:
            out.append({"cause": "pp_tied_embedding", "op": "all_reduce", "group": "pp", "group_size": 2,
                        "payload_bytes": self.tied_payload, "calls": self.tied_calls})
        if self.replicas is not None and self.replicas.calls:
            out.append({"cause": "dp_grads", "op": "all_reduce", "group": "dp", "group_size": self.layout.dp,
                        "payload_bytes": self.replicas.payload, "calls": self.replicas.calls})
        return out

    def shared_first_loss(self) -> float:
        """The first micro-batch's loss, which only the last chunk's rank computes, on every rank."""
        import torch.distributed as dist

        value = self.first_loss.reshape(1).to(self.device).float()
        dist.broadcast(value, group=self.groups.pp, group_src=head_stage(self.layout))
        return float(value)


def _compute_actions(schedule, rank: int) -> list[str]:
    """The rank's computations in the order the schedule runs them, as PyTorch names them ("0F1": stage 0's
    forward of micro-batch 1; B a whole backward, I the inputs' gradient, W the weights'), where the
    schedule lists them (the runtime schedules: interleaved, zero-bubble and DualPipeV, whose overlapped
    forward-backward pairs are listed as their two parts); else []."""
    order = getattr(schedule, "pipeline_order", None) or {}
    flat = [s for a in order.get(rank, []) if a is not None for s in (getattr(a, "sub_actions", None) or (a,))]
    return [str(a) for a in flat if a.computation_type.value in ("F", "B", "I", "W")]


def run_pipeline(job: dict, device: torch.device, advance) -> dict:
    """tfcalc.measure.distributed.run_measure for a layout with pp > 1: two warm-up steps, a measured one."""

    from tfcalc.config import from_mapping
    from tfcalc.measure.bench import host_seconds
    from tfcalc.measure.device import resolve_device, torch_dtype
    from tfcalc.measure.peak_meter import peak_meter
    from tfcalc.model import build_model

    meter = peak_meter(resolve_device(str(device)))
    meter.start()
    cfg, layout = from_mapping(job["config"]), job_layout(job)
    torch.manual_seed(job.get("seed", 0))
    model = build_model(cfg, device, torch_dtype(layout.dtype)).train()
    trainer = PipelineTrainer(cfg, layout, model, device)
    advance(f"warm-up step 1 of {WARMUP_STEPS}")
    for step in range(WARMUP_STEPS):
        trainer.step()
        if step == 0:  # before any update: the loss of the unchanged model on the first micro-batch
            first_loss = trainer.shared_first_loss()
        advance(f"warm-up step {step + 2} of {WARMUP_STEPS}" if step + 1 < WARMUP_STEPS else "the measured step")
    saved = SavedBytes(nn.ModuleList(trainer.chunks))
    result = {}  # on CUDA the schedule's kernels and NCCL sends are asynchronous: synchronized before each clock read
    step_s = host_seconds(lambda: result.update(trainer.step(log=True, saved=saved)), device)
    states = result
    advance("done")
    # activations: every storage saved in the step; DualPipeV runs 2p micro-batches through stages that keep
    # fewer (tfcalc.count.perf.pipeline, step 5): there the most held at once, the plan's figure
    saved_bytes = saved.peak if layout.schedule == "dualpipev" else saved.total
    return {**states, "step_s": step_s, "first_loss": first_loss, "activation_bytes": saved_bytes,
            "activation_peak_bytes": saved.peak,
            "peak_bytes": meter.peak(), "peak_method": meter.method, "collectives": trainer.collectives(),
            "comm_counts": {}, "schedule": type(trainer.schedule).__name__, "actions": trainer.actions}
