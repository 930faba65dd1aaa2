"""The report of `tfcalc params`: parameter counts, analytic (from the config) and empirical (from the
real module built on the meta device), with the breakdown, the textbook approximation and weight bytes."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from tfcalc.checkpoint import CheckpointCount
from tfcalc.config import ModelConfig
from tfcalc.count.model import params as count, parts
from tfcalc.count.model.dtypes import weight_bytes
from tfcalc.count.model.layer_kinds import layer_kinds, mtp_summary
from tfcalc.count.model.params import ZERO_EXPERTS
from tfcalc.report.display import Displayed
from tfcalc.report.model_ref import ModelRef


def _cut(name: str, width: int = 80) -> str:
    """A tensor name as a message quotes it: whole when short, else its start and its length."""
    return name if len(name) <= width else f"{name[:width - 20]}… ({len(name):,} characters)"


@dataclass(frozen=True, repr=False)
class ParamsReport(Displayed):
    model: ModelRef
    entries: tuple[count.ParamEntry, ...]
    analytic: dict[str, int]
    empirical: Optional[dict[str, int]]  # None when not measured (--no-measure)
    empirical_method: Optional[str] = None  # tfcalc.measure.params.METHODS: "full" or "per_block"
    checkpoint: Optional[CheckpointCount] = None  # the checkpoint's headers, when the model named one

    def headline(self) -> str:
        return f"{self.model.label}: {self.analytic_total:,} parameters"

    @property
    def cfg(self) -> ModelConfig:
        return self.model.cfg

    @property
    def analytic_total(self) -> int:
        return sum(self.analytic.values())

    @property
    def empirical_total(self) -> Optional[int]:
        return None if self.empirical is None else sum(self.empirical.values())

    @property
    def agrees(self) -> Optional[bool]:
        return None if self.empirical is None else self.empirical == self.analytic

    @property
    def approximation(self) -> int:
        return count.seeds_approximation(self.cfg)

    @property
    def approximation_rel_error(self) -> float:
        return (self.approximation - self.analytic_total) / self.analytic_total

    @property
    def groups(self) -> dict[str, int]:
        """{group: parameters}, each token mixer's tensors under the role it declares (tfcalc.count.model.parts:
        a Mamba2 layer's under "ssm", not "attention"); count.group_totals for a model of attention alone."""
        return parts.param_totals(self.cfg, self.analytic)

    def _groups_json(self) -> dict[str, Any]:
        """The JSON's groups and shares: "attention" the whole token-mixer sub-layer, as the keys always meant;
        beside them, where a mixer is not attention, ``groups_by_role`` and ``shares_by_role`` (each mixer's
        tensors under its declared role) and what each role calls its parts."""
        total, old = self.analytic_total, count.group_totals(self.cfg, self.analytic)
        out = {"groups": old, "shares": {group: n / total for group, n in old.items()}}
        if parts.roles(self.cfg):
            out |= {"groups_by_role": self.groups,
                    "shares_by_role": {group: n / total for group, n in self.groups.items()},
                    **parts.roles_json(self.cfg)}
        return out

    @property
    def attention_params(self) -> int:
        """Self- and cross-attention together: 'attention' means both wherever tfcalc reports a share."""
        return self.groups["attention"] + self.groups["cross_attention"]


    @property
    def stacks(self) -> dict[str, int]:
        """{encoder: n, decoder: n} for an encoder-decoder, {} otherwise."""
        return count.stack_totals(self.cfg, self.analytic)

    @property
    def active_params(self) -> int:
        """Parameters one token uses (a MoE runs only its top-k experts); the total when dense."""
        return count.active_params(self.cfg, self.analytic)

    @property
    def checkpoint_total(self) -> Optional[int]:
        """Every element the checkpoint's files hold (tied copies and buffers included); None without one."""
        return None if self.checkpoint is None else self.checkpoint.total

    def checkpoint_problems(self) -> list[str]:
        """What the config does not explain in the checkpoint, and what the checkpoint lacks."""
        c = self.checkpoint
        if c is None:
            return []
        out = [f"unexplained tensor {_cut(name)}" for name in c.unexplained]
        out += [f"tensor {name} does not fit the config's layout" for name in c.misfits]
        out += [f"{component} lacks {n:,} parameters" for component, n in c.missing.items()]
        out += [f"{component} has {n:,} parameters more than the config explains" for component, n in c.surplus.items()]
        return out

    def mismatches(self) -> list[str]:
        """Components whose analytic and empirical counts differ."""
        if self.empirical is None:
            return []
        keys = list(self.analytic) + [k for k in self.empirical if k not in self.analytic]
        return [k for k in keys if self.analytic.get(k) != self.empirical.get(k)]

    @property
    def weights_bytes(self) -> dict[str, int]:
        """Every weight in fp32 and in bf16; and, where the config stores its experts in a format of their own
        (gpt-oss's MXFP4), as stored: bf16 with those experts ("bf16+mxfp4", tfcalc.count.model.quant); a quantized
        checkpoint's ("stored": its quantized matrices with their scales and the rest in bf16)."""
        out = {dtype: weight_bytes(self.analytic_total, dtype) for dtype in ("fp32", "bf16")}
        moe = self.cfg.architecture.moe()
        if moe is not None and moe.weight_format == "mxfp4":  # the experts' stored format, as described
            from tfcalc.count.model.quant import plain, weights_bytes

            out["bf16+mxfp4"] = weights_bytes(self.cfg, plain("bf16"))
        if self.cfg.stored_quant is not None:  # a quantized checkpoint: its bytes as stored (quant_stored)
            from tfcalc.count.model.quant import plain, weights_bytes

            out["stored"] = weights_bytes(self.cfg, plain("bf16"))
        return out

    @property
    def stored_label(self) -> str | None:
        """The checkpoint's stored format (a quantized checkpoint's quantization_config), or None."""
        if self.cfg.stored_quant is None:
            return None
        from tfcalc.count.model.quant import format_label, plain

        return format_label(self.cfg, plain("bf16"))

    @property
    def notes(self) -> list[str]:
        cfg, notes = self.cfg, []
        note = count.width_note(cfg)
        if note:
            notes.append(note.text(cfg.n_head, cfg.head_dim))
        per_layer = cfg.architecture.output.embeddings.per_layer  # Gemma 4's and 3n's table: shown apart
        if per_layer is not None:
            table = per_layer.vocab * per_layer.n_layer * per_layer.width
            notes.append(f"per-layer embeddings: {table:,} of the {self.analytic_total:,} parameters are the per-layer "
                         "token table (per_layer_embedding: looked up, never multiplied), counted in the model.")
        experts = cfg.architecture.moe()  # the mixture of experts' component (every MoE layer's alike)
        if experts is not None:
            kinds = cfg.architecture.kinds()
            moe, blocks = sum(n for _, b, n in kinds if b.is_moe), sum(n for _, _, n in kinds)
            where = "each block" if moe == blocks else f"each of the {moe:,} MoE blocks (of {blocks:,}; others dense)"
            notes.append(
                f"mixture of experts: each token runs {experts.top_k} of the {experts.n_expert} experts of {where}, "
                f"so {self.active_params:,} of {self.analytic_total:,} parameters are active per token "
                "(router, attention, embeddings, norms and head included); FLOPs per token count only those."
            )
            if experts.n_zero:
                notes.append(ZERO_EXPERTS.format(z=experts.n_zero, k=experts.top_k))
        if self.empirical_method == "per_block":
            blocks = sum(s.n_layer for s in cfg.architecture.stacks)
            notes.append(f"empirical count: {blocks:,} blocks are too many to build one by one in reasonable time, "
                         "so one real block of each kind in each stack was built on meta and its parameters "
                         "counted times the layers that are it.")
        if cfg.vision_params is not None:
            notes.append(f"vision tower and projector: {cfg.vision_params:,} parameters beside the language model's "
                         f"{self.analytic_total:,}, not counted in it ({self.analytic_total + cfg.vision_params:,} "
                         "in the whole vision-language model); every figure here is the language model's.")
        arch = cfg.architecture
        if arch.kind == "encoder" and not arch.head.lm_head:
            notes.append("no LM head: the model ends in hidden states" + (" and the pooler" if arch.head.pooler else "")
                         + ", as Hugging Face's BertModel, the model BERT's published sizes count.")
        return notes

    @property
    def nominal_rel_difference(self) -> Optional[float]:
        """How far the exact count is from the size the source names (which is rounded)."""
        named = count.nominal_value(self.cfg.nominal_params)
        return None if not named else (self.analytic_total - named) / named

    def to_json(self) -> dict[str, Any]:
        total = self.analytic_total
        return {
            "preset": self.cfg.name,
            "label": self.model.label,
            "overrides": list(self.model.overrides),
            "analytic_total": total,
            "empirical_total": self.empirical_total,
            "checkpoint_total": self.checkpoint_total,
            "breakdown": self.analytic,
            "arch": self.cfg.arch,
            "active_params": self.active_params,
            "layer_kinds": [k.to_json() for k in layer_kinds(self.cfg)],  # dense and MoE layers apart
            "mtp_module": mtp_summary(self.cfg),  # DeepSeek-V3's MTP modules: beside, not in analytic_total
            "stacks": self.stacks,
            "empirical_breakdown": self.empirical,
            "empirical_method": self.empirical_method,  # "full" (every block built), "per_block", or null
            "agree": self.agrees,
            **self._groups_json(),  # and, where a mixer is not attention, its parts under its role
            "approximation": {
                "formula": count.seeds_formula(self.cfg),
                "value": self.approximation,
                "rel_error": self.approximation_rel_error,
            },
            "nominal_params": self.cfg.nominal_params,
            "vision_params": self.cfg.vision_params,  # a multimodal checkpoint's vision tower, not in the total
            "nominal_rel_difference": self.nominal_rel_difference,
            "tied_embeddings": self.cfg.tie_embeddings,
            "weights_bytes": self.weights_bytes,
            "notes": self.notes,
            "checkpoint": None if self.checkpoint is None else self.checkpoint.to_json(),
        }


def build_params(model: ModelRef, measure: bool = True) -> ParamsReport:
    """The analytic count always; the empirical one (torch, meta device) when measure is true."""
    empirical = method = None
    if measure:
        from tfcalc.measure.params import empirical_count  # imports torch: only when asked

        measured = empirical_count(model.cfg)
        empirical, method = measured.breakdown, measured.method
    checkpoint = None
    if model.weights is not None:  # headers only: no tensor data is read
        from tfcalc.checkpoint import count_checkpoint

        checkpoint = count_checkpoint(model.cfg, model.weights)
    return ParamsReport(model, tuple(count.param_entries(model.cfg)), count.breakdown(model.cfg), empirical, method,
                        checkpoint)
