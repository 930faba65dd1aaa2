"""LoRA fine-tuning (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large Language Models", arXiv 2106.09685):
what a training step keeps and computes when the base model is frozen and each adapted linear W (d_out × d_in)
gains a trainable pair A (r × d_in), B (d_out × r): y = W·x + (α/r)·B·(A·x). Pure arithmetic, no torch.

Targets: the linears of a block by their role, q, k, v, o (attention), gate, up, down (FFN), or "all-linear"
(every one of them; as PEFT's ``target_modules="all-linear"``, the output layer is left out). The default is
q and v: the paper's choice (sec. 7.1, Table 5: of one parameter budget, W_q with W_v adapts best) and
PEFT's default for llama-like models (peft/utils/constants.py, TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING:
"llama": ["q_proj", "v_proj"]). α scales B·A's output and changes no count (left out).

1. Parameters. Each adapted linear adds r·d_in + d_out·r = r·(d_in + d_out) trainable parameters; the base's P
   stay, frozen. GPT-3 175B (L = 96, d = 12,288), r = 4 on q and v: 96 · 2 · 4 · (12,288 + 12,288) = 18,874,368
   parameters, 37.7 MB in fp16 -- the paper's checkpoint of 35 MB, down from the 350 GB model's (sec. 4.2).
2. State (``lora_state``). The frozen weights stay in their dtype with no gradient and no optimizer state; the
   adapters carry what a trained parameter carries under the optimizer (adam-mixed: e_w weights + e_w gradients
   + 4 fp32 master + 8 fp32 moments; PEFT's autocast_adapter_dtype keeps adapters in fp32 instead, 4 + 4 + 8:
   the same 16 bytes). So a step holds e_w·P + (bytes a trained parameter costs)·P_lora. GPT-3 175B in fp16:
   350 GB of frozen weights + 0.30 GB of adapter state, where full fine-tuning holds 16 bytes a parameter, 2.8 TB.
   The paper's training VRAM (sec. 4.2) falls from 1.2 TB to 350 GB: its 350 GB is the fp16 weights, what this
   state gives (activations apart); its 1.2 TB, 6.9 bytes a parameter, is a setup it does not describe (fp16
   weights, gradients and moments would be 8; mixed-precision Adam, as counted here, 16).
3. Activations (``activation_delta``; the terms of tfcalc.count.model.activation_terms, per token). Autograd
   saves a tensor only for a gradient some input needs (PyTorch saves a matmul's input only when its weight
   needs a gradient). So against full fine-tuning:
   a. each adapter keeps A·x, e·r (B's weight gradient); x, A's input, is the base linear's input, kept once;
   b. a frozen linear no longer keeps its input for its weight gradient: QKV's (e·h) unless q, k or v is
      adapted, the FFN-up's (e·h) unless gate or up is, the down projection's (the product, or an ungated FFN's
      activation output, e·f) unless down is (ReLU keeps its output itself), the LM head's (e·h);
      the O projection's input is SDPA's output, which the fused kernel keeps anyway;
   c. an RMSNorm with a frozen weight no longer keeps x̂ (fp32, 4·h) for the weight's gradient (LayerNorm's
      backward keeps its input and statistics for the input's gradient: unchanged); RMSNorm Q/K norms (Qwen3),
      their x̂, 4·(q + k);
   d. before the first adapter nothing needs a gradient: in the first block every term ahead of the first
      adapted linear goes (the block's first norm always; the attention's terms when the first adapter is o or
      in the FFN; ...), as do the embeddings' norm.
   Checked to the byte against autograd's saved tensors of tfcalc's module with real adapters
   (tests/count/test_lora.py). In the first block a fused [gate | up] output needs a gradient as a whole when
   either is adapted (separate modules, PEFT's, keep less there: one block's difference, left out).
4. FLOPs (``training_flops``). Forward: the base's F plus 2·r·(d_in + d_out) a token per adapter. Backward:
   input gradients through every frozen matmul (F again for the linears, 2× for the attention scores), no
   weight gradients for them, so the 6N rule becomes ≈ 4N + the adapters' 6·r·(d_in + d_out) a token; before
   the first adapter no input gradient is taken (the first block's linears up to it, its attention's
   backward when the first adapter follows it, A's input gradient at the first adapters). Checked against
   FlopCounterMode on the real module with frozen weights.
5. Data parallelism: only the adapters' gradients are reduced (tfcalc.count.training.lora_plan).
6. QLoRA (``base_dtype`` "nf4"): the frozen block linears in NF4 (tfcalc.count.model.qlora); the rest as above.

Modelled for decoder-only stacks of one kind of softmax-attention block with a dense FFN and pre-norms (Llama,
Mistral, Qwen2, Qwen3's dense models with their RMSNorm Q/K norms, GPT-2, ...); other architectures (mixtures of
experts, hybrids, sandwich or output norms, blocks of several kinds) are refused in one line.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Optional

from tfcalc.architecture.ffn import FFN
from tfcalc.config import ModelConfig
from tfcalc.count.model import qlora
from tfcalc.count.model.params import param_entries
from tfcalc.errors import InputError, shown

TARGETS = ("q", "k", "v", "o", "gate", "up", "down")
DEFAULT_TARGETS = ("q", "v")
ALL_LINEAR = "all-linear"
WEIGHT = {t: f"{'attn' if t in 'qkvo' else 'ffn'}_{t}_weight" for t in TARGETS}
# the block's linears in the order a forward pass runs them, grouped by the input they read
STAGES = (("q", "k", "v"), ("o",), ("gate", "up"), ("down",))
FP32 = 4


@dataclass(frozen=True)
class LoraSpec:
    rank: int
    targets: tuple[str, ...] = DEFAULT_TARGETS
    base_dtype: Optional[str] = None  # "nf4": QLoRA's 4-bit base (tfcalc.count.model.qlora); None: --dtype
    all_linear: bool = False  # --lora-targets all-linear: the linears the model's block has (for_model)


def parse_targets(text: Optional[str]) -> tuple[str, ...]:
    """--lora-targets: comma-separated names of TARGETS, or "all-linear"; None: the default (q, v)."""
    if text is None:
        return DEFAULT_TARGETS
    if isinstance(text, (list, tuple)) and all(isinstance(t, str) for t in text):  # the Python API's sequence
        text = ",".join(text)
    if not isinstance(text, str):
        raise InputError(f"--lora-targets must be names, comma-separated; got {shown(text)}")
    names = [t.strip().lower() for t in text.split(",") if t.strip()]
    if names == [ALL_LINEAR]:
        return TARGETS
    if ALL_LINEAR in names:
        raise InputError(f"--lora-targets {ALL_LINEAR} stands alone (it names every linear); got {shown(text)}")
    bad = [t for t in names if t not in TARGETS]
    if bad or not names:
        raise InputError(f"unknown --lora-targets {shown(','.join(bad) or text)}; choose from {', '.join(TARGETS)} "
                         f"(comma-separated) or {ALL_LINEAR}")
    return tuple(t for t in TARGETS if t in names)


def spec(rank: Optional[int], targets: Optional[str], base_dtype: Optional[str] = None) -> Optional[LoraSpec]:
    """The LoRA of --lora-rank, --lora-targets and --base-dtype; None when off (rank absent or 0)."""
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):  # the Python API's values
        raise InputError(f"--lora-rank must be a whole number; got {shown(rank)}")
    if rank is not None and rank < 0:
        raise InputError(f"--lora-rank must be 0 (off) or positive, not {rank}")
    if base_dtype is not None and (not isinstance(base_dtype, str) or base_dtype.lower() != "nf4"):
        raise InputError(f"unknown --base-dtype {shown(base_dtype)}; choose nf4 (QLoRA), or leave it out (the "
                         "--dtype)")
    if not rank:
        if targets is not None or base_dtype is not None:
            raise InputError(f"{'--lora-targets' if targets is not None else '--base-dtype'} needs --lora-rank r "
                             "(r > 0)")
        return None
    parsed = parse_targets(targets)  # checked first: every name a string
    joined = ",".join(targets) if isinstance(targets, (list, tuple)) else targets or ""
    return LoraSpec(rank, parsed, base_dtype and base_dtype.lower(), joined.strip().lower() == ALL_LINEAR)


def for_model(cfg: ModelConfig, lora: Optional[LoraSpec]) -> Optional[LoraSpec]:
    """all-linear as PEFT's target_modules="all-linear" reads it: every linear of the block the model has (GPT-2's
    FFN has no gate); named targets stay as given (one the model lacks is refused by ``adapted``)."""
    if lora is None or not lora.all_linear:
        return lora
    shapes = block_linears(cfg)
    return replace(lora, targets=tuple(t for t in TARGETS if WEIGHT[t] in shapes))


def _blocks(cfg: ModelConfig):
    arch = cfg.architecture
    kinds = arch.kinds()
    ok = arch.kind == "decoder" and len(kinds) == 1
    block = kinds[0][1] if kinds else None
    ok = ok and block.mixer.kind == "self" and isinstance(block.ffn, FFN) and block.placement == "pre"
    qk = block.mixer.qk_norm
    ok = ok and block.parallel == "none" and not _extras(block) and (qk is None or qk.kind == "rmsnorm")
    if not ok:
        raise InputError(f"LoRA is modelled for decoder-only stacks of one kind of attention block with a dense FFN "
                         f"and pre-norms (Llama, Mistral, Qwen2, Qwen3 dense, GPT-2); {cfg.name} is not one")
    return block, kinds[0][2]


def _extras(block) -> bool:
    return any(getattr(block, name, None) for name in ("cross_attention", "hyper", "per_layer_input", "altup",
                                                       "laurel", "shortcut", "residual_scale", "layer_scalar"))


def block_linears(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """{weight name: shape} of the (one kind of) block's tensors, the architecture checked (``_blocks``)."""
    return {w.name: w.shape for w in _blocks(cfg)[0].weights()}


def adapted(cfg: ModelConfig, lora: LoraSpec) -> list[tuple[str, int, int, int]]:
    """(target, d_in, d_out, layers) of every adapted linear, checked: each target exists, r ≤ min(d_in, d_out)."""
    block, layers = _blocks(cfg)
    shapes = block_linears(cfg)
    present = [t for t in TARGETS if WEIGHT[t] in shapes]
    out = []
    for t in lora.targets:
        if WEIGHT[t] not in shapes:
            raise InputError(f"{cfg.name} has no '{t}' linear to adapt; it has {', '.join(present)}")
        d_out, d_in = shapes[WEIGHT[t]]
        if lora.rank > min(d_in, d_out):
            raise InputError(f"--lora-rank {lora.rank} exceeds {t}'s smaller dimension {min(d_in, d_out)} "
                             f"({d_in} -> {d_out}): a rank above it adds nothing")
        out.append((t, d_in, d_out, layers))
    return out


def trainable_params(cfg: ModelConfig, lora: LoraSpec) -> int:
    """Step 1: Σ over adapted linears r·(d_in + d_out), every layer."""
    return sum(lora.rank * (d_in + d_out) * n for _, d_in, d_out, n in adapted(cfg, lora))


def checkpoint_bytes(cfg: ModelConfig, lora: LoraSpec, dtype_bytes: int) -> int:
    """The adapters alone, stored in the dtype (the paper's checkpoint, sec. 4.2)."""
    return trainable_params(cfg, lora) * dtype_bytes


def lora_state(full, cfg: ModelConfig, lora: LoraSpec):
    """Step 2 from the full fine-tuning state (tfcalc.count.model.training_memory.TrainingState): the frozen weights
    and the adapters' weights in the dtype, the adapters' gradients, master weights and optimizer state at what the
    optimizer keeps a trained parameter (its bytes per parameter, so any optimizer's state scales alike); the
    optimizer step's temporaries those of the largest adapter tensor instead of the model's largest tensor (they
    are a few copies of one tensor, training_memory's module docstring)."""
    n, lora_params = full.params, trainable_params(cfg, lora)
    largest = max(e.per_copy for e in param_entries(cfg) if not e.tied_to)
    adapter = max(max(lora.rank * d_in, d_out * lora.rank) for _, d_in, d_out, _ in adapted(cfg, lora))

    def per(x: int) -> int:
        return x * lora_params // n

    return replace(full, weights=full.weights + per(full.weights), gradients=per(full.gradients),
                   master_weights=per(full.master_weights), optimizer_state=per(full.optimizer_state),
                   params=n + lora_params, step_temporaries=full.step_temporaries * adapter // largest)


def _first_stage(targets: tuple[str, ...]) -> int:
    return next(i for i, stage in enumerate(STAGES) if set(stage) & set(targets))


def activation_delta(cfg: ModelConfig, per_layer: dict[str, int], head: dict[str, int], tokens: int, e: int,
                     lora: LoraSpec) -> dict[str, int]:
    """Step 3: {term: bytes} to add to the full fine-tuning activations (negative: no longer kept), for
    ``per_layer`` and ``head`` the full terms (times the tokens) of the fused kernel without recompute."""
    block, L = _blocks(cfg)
    t = set(lora.targets)
    h, rms = cfg.architecture.d_model, block.norm.kind == "rmsnorm"
    f = block.ffn.d_ff
    x_hat = FP32 * h * tokens if rms else 0  # 3c, per norm
    # Q/K norms (Qwen3's RMSNorm of each head): their x̂, 4·(q + k), kept for their weights' gradient alone (3c)
    qk_hat = FP32 * (block.mixer.q_width + block.mixer.k_width) * tokens if block.mixer.qk_norm is not None else 0
    out = {"adapters": L * len(t) * e * lora.rank * tokens, "frozen_norms": -L * (2 * x_hat + qk_hat)}
    out["qkv_input"] = 0 if t & {"q", "k", "v"} else -L * per_layer["qkv_input"]
    out["ffn_input"] = 0 if t & {"gate", "up"} else -L * per_layer["ffn_input"]
    out["down_input"] = 0 if "down" in t or block.ffn.activation == "relu" else -L * e * f * tokens
    # 3d: the first block, ahead of its first adapter (what 3b and 3c have not already taken)
    first, lost = _first_stage(lora.targets), per_layer["attn_norm"] - x_hat
    if first >= 1:
        lost += sum(per_layer.get(k, 0) for k in ("qkv", "rope_qk", "attn_scores", "softmax_stats", "qk_norm")) - qk_hat
        lost += per_layer["qkv_input"] if t & {"q", "k", "v"} else 0  # (not already taken by 3b)
    if first >= 2:
        lost += per_layer["attn_output"] + per_layer["ffn_norm"] - x_hat
    if first >= 3:  # the down projection's input stays, its adapter's
        lost += per_layer["ffn_hidden"] - e * f * tokens + (per_layer["ffn_input"] if t & {"gate", "up"} else 0)
    out["first_block"] = -lost
    out["head"] = -(head.get("lm_head_input", 0) + head.get("embedding_norm", 0) + (x_hat if head.get("final_norm")
                                                                                   else 0))
    return out


def lora_activations(acts, delta: dict[str, int], layers: int):
    """The full fine-tuning Activations (tfcalc.count.model.activations) with step 3's delta: per layer, the adapters'
    A·x ("lora_adapters") and what frozen weights no longer keep ("lora_frozen"); outside the blocks, the first
    block's prefix and the head's ("lora_first_block", "lora_head"). One kind of block (``_blocks``)."""
    per = {"lora_adapters": delta["adapters"] // layers,
           "lora_frozen": sum(delta[k] for k in ("frozen_norms", "qkv_input", "ffn_input", "down_input")) // layers}
    per_layer = {**acts.per_layer, **per}
    terms = {key: {**t, **per} for key, t in acts.terms.items()}
    head = {**acts.head, "lora_first_block": delta["first_block"], "lora_head": delta["head"],
            **({"qlora_dequantized": delta["qlora_dequantized"]} if "qlora_dequantized" in delta else {})}
    return replace(acts, per_layer=per_layer, terms=terms, head=head, _ranges={})


def linears(cfg: ModelConfig) -> list[tuple[int, int]]:
    """(elements, layers) of the block's linear weights, q, k, v, o, gate, up, down (what QLoRA quantizes)."""
    shapes, layers = block_linears(cfg), _blocks(cfg)[1]
    return [(math.prod(shapes[WEIGHT[t]]), layers) for t in TARGETS if WEIGHT[t] in shapes]


@dataclass(frozen=True)
class LoraTraining:
    """What `memory --training --lora-rank` reports: the state and activations, and how they came."""

    activations: object  # tfcalc.count.model.activations.Activations, step 3's delta in
    state: object  # tfcalc.count.model.training_memory.TrainingState, step 2
    params: int  # the adapters'
    base_bytes: int  # the frozen base's weights (NF4 under QLoRA, tfcalc.count.model.qlora)
    adapter_bytes: int  # the adapters' weights in the dtype
    delta: dict[str, int]  # step 3, by term


def lora_training(cfg: ModelConfig, acts, full_state, lora: LoraSpec, tokens: int, e: int) -> LoraTraining:
    """Steps 1-3 (and QLoRA's base, tfcalc.count.model.qlora) of one training step from full fine-tuning's
    activations and state (their dtype: e_w = full_state.weights / params)."""
    check_terms(acts.per_layer, acts.attention, acts.recompute)
    if full_state.optimizer not in ("adam-mixed", "adam", "sgd"):  # a state per parameter alike (lora_state)
        raise InputError(f"--lora-rank is priced with adam-mixed, adam or sgd, not --optimizer {full_state.optimizer}")
    n = trainable_params(cfg, lora)
    delta = activation_delta(cfg, acts.per_layer, acts.head, tokens, e, lora)
    state, ew = lora_state(full_state, cfg, lora), full_state.weights // full_state.params
    base = full_state.weights
    if lora.base_dtype == "nf4":
        base = qlora.base_bytes(linears(cfg), full_state.params, ew)
        delta["qlora_dequantized"] = qlora.dequantized_bytes(linears(cfg), ew)
        state = replace(state, weights=base + ew * n)
    return LoraTraining(lora_activations(acts, delta, acts.n_layer), state, n, base, ew * n, delta)


def check_terms(per_layer: dict[str, int], attention: str, recompute: str) -> None:
    """The delta is derived for the fused kernel without recompute or dropout (step 3)."""
    if attention != "flash" or recompute != "none" or per_layer.get("dropout") or per_layer.get("scores_dropout"):
        raise InputError("LoRA activations are modelled for --attention flash without --recompute or dropout")


@dataclass(frozen=True)
class LoraFlops:
    """Step 4, FLOPs of one training step: the base's forward and backward and the adapters', beside full
    fine-tuning's (3 × the forward)."""

    base_forward: int
    base_backward: int
    adapter_forward: int
    adapter_backward: int
    full_training: int

    @property
    def total(self) -> int:
        return self.base_forward + self.base_backward + self.adapter_forward + self.adapter_backward


SCORES = ("attn_qk", "attn_av")
STAGE_OF = {"attn_q": 0, "attn_k": 0, "attn_v": 0, "attn_qkv": 0, "attn_o": 1, "ffn_gate": 2, "ffn_up": 2,
            "ffn_down": 3}


def training_flops(cfg: ModelConfig, entries, tokens: int, lora: LoraSpec) -> LoraFlops:
    """Step 4 over the forward's matmul entries (tfcalc.count.model.flops.matmul_entries) of ``tokens`` tokens."""
    first = _first_stage(lora.targets)
    fwd = sum(e.total for e in entries)
    bwd = 0
    for e in entries:
        per_copy = 2 * e.per_copy if e.component in SCORES else e.per_copy
        bwd += per_copy * e.copies
        if e.component in SCORES and first >= 1 or STAGE_OF.get(e.component, 9) <= first:
            bwd -= per_copy  # the first block, ahead of (or at the input of) its first adapter: no input gradient
    a_fwd = sum(2 * tokens * lora.rank * (d_in + d_out) * n for _, d_in, d_out, n in adapted(cfg, lora))
    first_a = sum(2 * tokens * lora.rank * d_in for t, d_in, _, _ in adapted(cfg, lora) if t in STAGES[first])
    return LoraFlops(fwd, bwd, a_fwd, 2 * a_fwd - first_a, 3 * fwd)
