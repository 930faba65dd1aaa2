"""The two request values every command passes down: a Workload, what a model is asked to run (batch,
sequence length, source length, generated tokens, dtype and the KV cache's), and a Layout, how a training
step is laid out on GPUs (parallel degrees, ZeRO stage, micro-batches, recompute, attention kernel). Both
keyword-only: no call site depends on the order of their fields.

Pure Python (no torch). ``for_model`` applies the rules every command shares, in one place:
- ``seq`` defaults to the model's context length (``max_seq_len``);
- ``src_seq`` (an encoder-decoder's source length) applies to encoder-decoders only, and defaults to
  ``seq`` there;
- sizes are positive and at most ``MAX_SIZE``, so no figure overflows a float when it becomes a share or
  a rate.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from tfcalc.config import ModelConfig
from tfcalc.errors import InputError

RECOMPUTE = ("none", "selective", "full", "op")  # op: op-level selective checkpointing (count.model.op_recompute)
MAX_SIZE = 2**40  # ~1.1e12 tokens or sequences: far past any real run, still exact as a float

# Bytes are counted in the dtype a run stores; a pure estimate (nothing runs) assumes bf16, the dtype
# large models are trained and served in. Runs on a device default to what that device computes fast:
# fp32 on a CPU (few CPUs have fast bf16 matmuls), bf16 on GPUs.
ESTIMATE_DTYPE = "bf16"


def default_dtype(device: Optional[str]) -> str:
    """The dtype rule of every command: bf16 for estimates and GPUs, fp32 for runs on a CPU."""
    return "fp32" if device is not None and device.strip().lower() == "cpu" else ESTIMATE_DTYPE


def check_size(name: str, value: int, low: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{name} must be an integer; got {type(value).__name__}")
    if not low <= value <= MAX_SIZE:
        raise InputError(f"{name} must be between {low} and {MAX_SIZE:,}; got {value:,}" if value.bit_length() < 64
                         else f"{name} must be between {low} and {MAX_SIZE:,}; got a {len(str(value))}-digit number")
    return value


@dataclass(frozen=True, kw_only=True)
class Workload:
    batch: int = 1
    seq: Optional[int] = None  # None: the model's context length
    src_seq: Optional[int] = None  # encoder-decoders and cross-attention stacks only; None: = seq
    dtype: str = ESTIMATE_DTYPE
    gen: int = 0  # tokens generated after a prompt of seq (serving); 0 for a forward or training pass
    kv_dtype: Optional[str] = None  # what the KV cache is stored in; None: the dtype

    @property
    def kv(self) -> str:
        """The KV cache's dtype."""
        return self.kv_dtype or self.dtype

    def for_model(self, cfg: ModelConfig) -> "Workload":
        """This workload with every default resolved for cfg (seq and src_seq set), or InputError."""
        check_size("--batch", self.batch)
        seq = check_size("--seq", self.seq) if self.seq is not None else cfg.max_seq_len
        src_seq = self.src_seq
        if src_seq is not None:
            check_size("--src-seq", src_seq)
            if cfg.arch != "encoder-decoder" and not cfg.cross_attention:
                raise InputError(f"{cfg.name}: --src-seq applies to encoder-decoder models only, or to stacks "
                                 f"with cross_attention ({cfg.name} is {cfg.arch})")
        elif cfg.arch == "encoder-decoder" or cfg.cross_attention:
            src_seq = seq
        return replace(self, seq=seq, src_seq=src_seq)

    @property
    def tokens(self) -> int:
        return self.batch * (self.seq or 0)


def decoder_source(cfg: ModelConfig, seq: int, src_seq: Optional[int]) -> Optional[int]:
    """The source positions a decoding encoder-decoder reads (its cross-attention cache): src_seq, else
    the context seq; None for the other kinds (serving counts no external states for them)."""
    return (src_seq or seq) if cfg.arch == "encoder-decoder" else None


@dataclass(frozen=True, kw_only=True)
class Layout:
    """A parallel training layout (checked by tfcalc.count.training.layout.check_layout). ``seq`` and
    ``micro_batch`` are the workload of one forward pass of one rank; ``attention`` the kernel the
    activations assume (flash, as every current training stack runs; math stores the T×T scores);
    ``dropout`` adds the paper's dropout masks (tfcalc's own module has none)."""

    tp: int = 1
    pp: int = 1
    dp: int = 1
    seq: int
    global_batch: int
    micro_batch: int = 1
    zero: int = 0  # 0 plain data parallel (DDP); 1, 2, 3 ZeRO stages (3 = FSDP)
    recompute: str = "none"  # none, selective (attention scores), full (block inputs only) or op (torchtitan's SAC)
    sequence_parallel: bool = False
    dtype: str = "bf16"
    attention: str = "flash"
    dropout: bool = False
    # --- issue 20, sharding and precision (helper X); checked by tfcalc.count.training.sharding ---
    ep: int = 1  # expert parallel: each MoE's routed experts split over ep ranks of the DP group
    # expert tensor parallel: None keeps the experts' legacy grid (EP within DP, experts whole on every TP rank);
    # an int folds the experts' ETP × EP grid over tp·cp·dp (tfcalc.count.training.experts_folded)
    etp: Optional[int] = None
    # how EP's tokens travel (tfcalc.count.training.experts_parallel): auto, alltoall or deepep (hierarchical)
    ep_dispatch: str = "auto"
    # the fullest EP rank's routed rows over the mean (tfcalc.count.perf.expert_imbalance): a skew's name, a fixed
    # factor, or None (the training default, "uniform": the routing's noise alone)
    expert_imbalance: Optional[object] = None
    compute_dtype: Optional[str] = None  # "fp8": the blocks' linears run FP8 GEMMs; storage stays `dtype`
    fp8_recipe: str = "delayed"  # the FP8 recipe by name (tfcalc.count.perf.fp8_recipes): delayed, tensorwise, ...
    reshard_after_forward: bool = True  # ZeRO-3: False keeps each unit gathered from its forward to its backward
    # ZeRO-3 under --compute-dtype fp8 --fp8-recipe tensorwise: the FP8 linears' weights all-gathered cast to FP8
    # (torchao's enable_fsdp_float8_all_gather; tfcalc.count.training.fp8, step 4)
    fp8_all_gather: bool = False
    hsdp: Optional[int] = None  # ZeRO-3 within groups of hsdp DP ranks, replicated across them; None: over all dp
    grad_dtype: Optional[str] = None  # "fp32": a main_grad buffer in fp32 (Megatron); None: the weights' dtype
    offload_optimizer: bool = False  # fp32 master weights and Adam moments in host memory, stepped there
    offload_activations: bool = False  # saved activations copied to host memory, back for the backward pass
    zero_engine: str = "flat"  # ZeRO 0/1: "flat", "torch" (ZeroRedundancyOptimizer), "deepspeed" (BF16_Optimizer)
    optimizer: str = "adam"  # adam (AdamW, mixed precision) or muon (tfcalc.count.training.muon_plan)
    # --- pipeline schedule, overlap and context parallelism (issue 20; tfcalc.count.perf.pipeline) ---
    schedule: str = "1f1b"  # 1f1b, interleaved (Narayanan et al. 2021), zero-bubble (ZB-H1), dualpipe(v)
    virtual_stages: int = 1  # V: model chunks per pipeline rank, > 1 only with the interleaved schedule
    overlap: tuple[str, ...] = ()  # communication hidden behind compute: any of "tp", "pp" (default: none)
    cp: int = 1  # context-parallel ranks: the sequence split C ways, K/V passed around a ring
    # the ends counted as a block each when the blocks are divided over the pp × V chunks (Megatron-LM's
    # --account-for-embedding/loss-in-pipeline-split; Llama 3, sec. 3.3.2): any of "embedding", "head"
    pp_split_counts: tuple[str, ...] = ()
    # blocks on each pipeline stage, given (--pp-layers; Megatron-LM's --decoder-first/last-pipeline-num-layers,
    # torchtitan's manual split): () divides them evenly (tfcalc.count.training.shard.stage_ranges)
    pp_layers: tuple[int, ...] = ()
    # --- the non-matmul kernels (issue 20; tfcalc.count.perf.eager) ---
    kernels: str = "eager"  # eager: PyTorch's op-by-op kernels; fused: Megatron/TE fused kernels, torch.compile
    # RoPE as complex products (torchtitan's apply_rotary_emb) or rotate-half ("real"): under kernels="compile"
    # Inductor leaves the complex product to an aten kernel between casts (tfcalc.count.perf.elementwise, 6)
    rope: str = "complex"

    @property
    def stage_split(self) -> tuple:
        """How the blocks divide over the stages, as tfcalc.count.training.shard.stage_ranges takes it: the
        given per-stage counts (ints), else the ends counted as blocks (names); under dualpipev ("v",): two
        stages a rank, placed in a V (tfcalc.count.training.shard.V_SHAPE)."""
        if self.schedule == "dualpipev" and self.pp > 1:
            return ("v",)
        return self.pp_layers or self.pp_split_counts

    @property
    def gpus(self) -> int:
        return self.tp * self.cp * self.pp * self.dp

    @property
    def data_ranks(self) -> int:
        """Ranks that hold the same weights and split the data: dp × cp (CP ranks split the sequence; their
        gradients are reduced and ZeRO's states sharded over all of them, as Megatron-Core does)."""
        return self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """m: micro-batches each DP rank runs per step."""
        return self.global_batch // (self.dp * self.micro_batch)

    def describe(self) -> str:
        sp = " +SP" if self.sequence_parallel else ""
        cp = f" · cp {self.cp}" if self.cp > 1 else ""
        counted = (f" ({' + '.join(self.pp_split_counts)} counted as blocks)" if self.pp_split_counts else
                   f" (layers {','.join(map(str, self.pp_layers))})" if self.pp_layers else "")
        sched = (f", {self.schedule}" + (f" V {self.virtual_stages}" if self.virtual_stages > 1 else "") + counted
                 if self.pp > 1 else "")
        overlap = f", overlap {'+'.join(self.overlap)}" if self.overlap else ""
        return (f"tp {self.tp}{sp}{cp} · pp {self.pp} · dp {self.dp}{sched}, ZeRO-{self.zero}, recompute "
                f"{self.recompute}, {self.attention} attention, micro-batch {self.micro_batch} × "
                f"{self.micro_batches}, seq {self.seq}, {self.dtype}{overlap}")

    @classmethod
    def single(cls, workload: Workload, recompute: str = "none", attention: str = "flash") -> "Layout":
        """One GPU running the (resolved) workload as one micro-batch: what `memory --training` asks."""
        return cls(seq=workload.seq, global_batch=workload.batch, micro_batch=workload.batch, recompute=recompute,
                   dtype=workload.dtype, attention=attention)
