"""Hugging Face tensor names -> the parameters of tfcalc's model: the generic matcher. The rules of each family
live in its own module of tfcalc.hf_config (``checkpoint_names``, found through its ``REGISTRY`` row; the rule
format: tfcalc.hf_config.names), so a new family edits no file here.

Each rule maps a name (after the wrapper prefix -- ``model.``, ``transformer.``, ``bert.``,
``gpt_neox.`` -- is taken off) to one tfcalc parameter, a named block of its rows (``q``, ``k``, ``v``
of ``attn.qkv``; ``gate``, ``up`` of an FFN's ``up``), and how the tensor is laid out differently (the
transforms, undone by tfcalc.model.load and read by the counts here):

- ``T``: GPT-2's Conv1D stores (in, out), the transpose of a Linear's weight;
- ``neox_qkv``: GPT-NeoX interleaves per head, rows [head][q, k, v][d_head] (modeling_gpt_neox.py; BLOOM's and
  StarCoder's multi-head c_attn too);
- ``falcon_qkv``: Falcon-7B's multi-query [Q | K | V] is tfcalc's layout; with several K/V heads the
  rows are grouped, [kv head][its query heads..., k, v][d_head] (modeling_falcon.py, _split_heads);
- ``norm+1``: Gemma's RMSNorm scales by (1 + w) (modeling_gemma.py): tfcalc's weight is w + 1;
- ``rope_pairs``: GLM-4 and Cohere rotate interleaved channel pairs (modeling_glm4.py, rotate_half); tfcalc
  rotates halves, so the rotated rows of each Q and K head are reordered (pairs (0, 1), (2, 3), ... to halves
  0, 2, ... | 1, 3, ...): Q·Kᵀ is unchanged by one reordering applied to both (Llama 4's complex RoPE too);
  ``rope_pairs_heads`` does the same to Cohere's per-head Q/K norm weights, (heads, h);
- ``value_scale``: MiMo-V2-Flash scales its values by attention_value_scale: folded into V's rows and bias;
- ``flat``: ERNIE-4.5's router correction bias, stored (1, E), tfcalc's buffer (E,);
- ``mT``: Llama 4's grouped experts, stored (E, in, out): each expert's matrix transposed;
- ``oss_gate_up``, ``oss_bias``, ``mxfp4``: gpt-oss's interleaved gate/up columns and MXFP4 expert blocks.

A layer's experts are grouped tensors in tfcalc's model (tfcalc.model.experts: ``ffn.experts.up.weight``
(E, m·f, d), rows [gate | up] per expert, and ``ffn.experts.down.weight`` (E, d, f)). A per-expert name
(transformers 4's ``experts.<e>.w1.weight``, ``experts.<e>.gate_proj.weight``) fills expert e's slice
(a target ``param@e``); transformers 5's grouped ``experts.gate_up_proj`` (E, 2f, d) and
``experts.down_proj`` (E, d, f) are tfcalc's layout already and fill the whole tensor.

A name no rule covers is unexplained; ``BUFFERS`` are tensors old checkpoints store that are not
parameters (causal masks, rotary tables); ``tied:`` targets are stored copies of a tied parameter.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from tfcalc.architecture import MoE
from tfcalc.config import ModelConfig
from tfcalc.count.model.components import block_of
from tfcalc.hf_config import checkpoint_names

PREFIXES = ("model.", "transformer.", "bert.", "gpt_neox.", "roberta.")
BUFFERS = re.compile(r".*(\.attn\.bias|\.attn\.masked_bias|\.attention\.bias|\.attention\.masked_bias|"
                     r"rotary_emb\.inv_freq|embeddings\.position_ids)$")


@dataclass(frozen=True)
class Piece:
    param: str  # tfcalc parameter path, e.g. "blocks.3.attn.qkv.weight"
    part: Optional[str] = None  # a named block of its rows; None: the whole parameter
    transform: Optional[str] = None  # see the module docstring
    tied: bool = False  # a stored copy of a parameter tied to another (counted there)
    expert: Optional[int] = None  # the expert whose slice (dim 0) of a grouped expert tensor it fills
    buffer: bool = False  # a buffer of the model, loaded but no parameter (DeepSeek-V3's router bias)


_PARTS = {"query": "q", "key": "k", "value": "v"}


# a vision-language checkpoint (Gemma3ForConditionalGeneration, Llama4ForConditionalGeneration, Kimi K2.5's): its
# language model's names behind one more prefix (transformers 5: model.language_model.; 4: language_model.
# and language_model.model.), and its vision tower and projector, counted apart (the config's vision_params)
LANGUAGE_PREFIXES = ("language_model.model.", "language_model.")
# (Gemma 4's audio tower and the two towers' projections, embed_vision and embed_audio, among them)
VISION = re.compile(r"(?:model\.)?(?:vision_tower|vision_model|multi_modal_projector|mm_projector|visual|audio_tower"
                    r"|embed_vision|embed_audio)\..*")


def rules(cfg: ModelConfig, model_type: str) -> list[tuple[re.Pattern, str]]:
    """The compiled rules of one model type, from its family module (tfcalc.hf_config.checkpoint_names): the
    description decides what tied and layout-dependent names mean."""
    return [(re.compile(pattern), target) for pattern, target in checkpoint_names(cfg.architecture, model_type)]


def map_name(table: list[tuple[re.Pattern, str]], name: str) -> Piece | str | None:
    """A Piece, "buffer" for a known non-parameter tensor, "scales" for a quantized tensor's scales (MXFP4),
    "mtp" for an MTP module's (DeepSeek-V3), "vision" for a vision-language checkpoint's vision tower and
    projector, or None when no rule explains the name."""
    if VISION.fullmatch(name):
        return "vision"
    short = name
    for prefix in PREFIXES:
        if short.startswith(prefix):
            short = short[len(prefix):]
            break
    for prefix in LANGUAGE_PREFIXES:
        if short.startswith(prefix):
            short = short[len(prefix):]
            break
    for pattern, target in table:
        m = pattern.fullmatch(short)
        if m:
            m = _Groups(m)
            if target in ("buffer", "mtp", "scales"):
                return target
            if target.startswith("buffer:"):
                param, _, transform = target.removeprefix("buffer:").partition("||")
                return Piece(param.format(*m.groups()), transform=transform or None, buffer=True)
            tied = target.startswith("tied:")
            param, _, rest = target.removeprefix("tied:").partition("|")
            part, _, transform = rest.partition("|")
            part = part.format(*m.groups()) if part else None
            param, _, expert = param.format(*m.groups()).partition("@")
            return Piece(param, _PARTS.get(part, part), transform or None, tied, int(expert) if expert else None)
    return "buffer" if BUFFERS.fullmatch(name) else None


class _Group(str):
    """A matched group; the format spec ``2n+s`` gives 2·group + s: LongCat-Flash's layer i holds two sub-layers,
    tfcalc's blocks 2i and 2i + 1 (``layers.{0:2n+1}``)."""

    def __format__(self, spec: str) -> str:
        if spec.startswith("2n"):
            return str(2 * int(self) + int(spec[2:] or 0))
        return str.__format__(self, spec)


class _Groups:
    """A match whose groups format as ``_Group``s."""

    def __init__(self, m: re.Match):
        self._m = m

    def groups(self) -> tuple:
        return tuple(g if g is None else _Group(g) for g in self._m.groups())


def experts_of(cfg: ModelConfig, param: str) -> int:
    """Experts of the mixture of experts a parameter path sits in (that layer's ``MoE``); 0 when the layer
    has no mixture of experts."""
    block = block_of(cfg, param)
    return block.ffn.n_expert if block is not None and isinstance(block.ffn, MoE) else 0
