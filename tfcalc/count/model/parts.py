"""The reports' groups: each token mixer's parameters and FLOPs under the role it declares.

The folds keep one group for the token-mixer sub-layer whatever mixes the positions (the parameter group
``attention``, tfcalc.count.model.params.GROUPS; the FLOP groups ``attention_proj`` and ``attention_scores``,
tfcalc.count.model.flops.GROUPS): the plans, the step time and the quantized bytes read them so. The reports
show each mixer's parts under the role its own module declares (tfcalc.architecture.mixer.MixerRole): a Mamba2
layer's tensors as ``ssm``, its in_proj and out_proj as ``ssm_proj`` ("SSM projections"), its convolution and
chunked scan as ``ssm_scan``; gated DeltaNet's as ``deltanet``, ``deltanet_proj``, ``delta_rule``; a short
convolution's as ``conv``, ``conv_proj``, ``conv``. Each such part sits right after attention's (``attention``,
``attention_scores``), and attention's keys stay (0 where no layer attends), so the parts of a dict still add
up to its total. For a model whose mixers are all attention the parts are the groups, key for key.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from tfcalc.architecture.mixer import ATTENTION, MixerRole
from tfcalc.config import ModelConfig
from tfcalc.count.model import params as count_params
from tfcalc.count.model.flops import BLOCK_GROUPS, CROSS_GROUPS, GROUPS as FLOP_GROUPS, FlopBreakdown, MatmulEntry


def _after(groups: tuple[str, ...], anchor: str, extra: list[str]) -> tuple[str, ...]:
    at = groups.index(anchor) + 1
    return groups[:at] + tuple(p for p in dict.fromkeys(extra) if p not in groups) + groups[at:]


def roles(cfg: ModelConfig) -> tuple[MixerRole, ...]:
    """The roles of the model's token mixers that are not attention, in model order (none for most models)."""
    return tuple(r for r in cfg.architecture.roles() if r != ATTENTION)


def attends(cfg: ModelConfig) -> bool:
    """Whether some layer's mixer is attention (a Mamba2 model's none is; its attention keys stay, at 0)."""
    return ATTENTION in cfg.architecture.roles()


def param_parts(cfg: ModelConfig) -> tuple[str, ...]:
    """The parameter groups the reports show: GROUPS, each mixer role's after "attention"."""
    return _after(count_params.GROUPS, "attention", [e.part for e in count_params.param_entries(cfg) if e.part])


def param_totals(cfg: ModelConfig, counts: dict[str, int]) -> dict[str, int]:
    """A breakdown of cfg's model (analytic or measured, {component: parameters}) summed into ``param_parts``;
    a component the model does not list goes to 'other' (as group_totals)."""
    part = {e.component: e.part or e.group for e in count_params.param_entries(cfg)}
    out = dict.fromkeys(param_parts(cfg), 0)
    for component, n in counts.items():
        key = part.get(component, "other")
        out[key] = out.get(key, 0) + n
    return out


def shown(e: MatmulEntry) -> str:
    """The FLOP group the reports show a matmul under: its mixer's declared role, else its group."""
    return e.part or e.group


def flop_parts(b: FlopBreakdown) -> tuple[str, ...]:
    """The FLOP groups the reports show: GROUPS, each mixer role's after "attention_scores"."""
    return _after(FLOP_GROUPS, "attention_scores", [shown(e) for e in b.entries])


def flop_totals(b: FlopBreakdown, causal: bool = False) -> dict[str, int]:
    """``FlopBreakdown.totals`` by ``flop_parts``: the same dict where every mixer is attention."""
    out = dict.fromkeys(flop_parts(b), 0)
    for e in b.entries:
        out[shown(e)] += e.causal_total if causal else e.total
    return out


def flop_per_layer(b: FlopBreakdown, causal: bool = False) -> dict[str, int]:
    """``FlopBreakdown.per_layer`` by ``flop_parts``: one block of each kind, its mixer's FLOPs under its role."""
    block = BLOCK_GROUPS + (CROSS_GROUPS if b.cfg.architecture.kind == "encoder-decoder" else ())
    out = dict.fromkeys((p for p in flop_parts(b) if p in block or p not in FLOP_GROUPS), 0)
    for e in b.entries:
        if shown(e) in out and e.stack != "encoder":
            out[shown(e)] += e.causal_per_copy if causal else e.per_copy
    return out


def param_titles(cfg: ModelConfig) -> dict[str, str]:
    """{parameter part: the title a table shows} for the mixer roles of the model that are not attention."""
    return {r.params: r.params_title for r in roles(cfg)}


def flop_titles(cfg: ModelConfig) -> dict[str, str]:
    """{FLOP part: the title a table shows} for the mixer roles of the model that are not attention."""
    return {k: v for r in roles(cfg) for k, v in ((r.proj, r.proj_title), (r.mixing, r.mixing_title))}


def mixing_parts(cfg: ModelConfig) -> tuple[tuple[str, str], ...]:
    """((projection part, mixing part), ...) of every mixer role of the output stack, attention's first: the FLOP
    parts that make "the mixer sub-layer" in the crossover and the shares."""
    arch_roles = cfg.architecture.roles()
    return tuple((r.proj, r.mixing) for r in (ATTENTION,) + tuple(r for r in arch_roles if r != ATTENTION))


def roles_json(cfg: ModelConfig) -> dict[str, Any]:
    """{"mixer_roles": [...]}: what each token mixer that is not attention calls its parts (its parameter group,
    its FLOP groups, their titles), for a report's JSON; {} for a model of attention alone (its JSON unchanged)."""
    found = roles(cfg)
    return {"mixer_roles": [dataclasses.asdict(r) for r in found]} if found else {}
