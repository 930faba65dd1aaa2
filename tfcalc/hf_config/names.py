"""What a family's checkpoint tensor names are written in. Each family module of tfcalc.hf_config (the one its
``REGISTRY`` row names) defines ``checkpoint_names(arch, model_type) -> list[Rule]``: how that family spells
its tensors, next to how it spells its config.json keys, so that a new family adds its names in its own module
and edits no file of tfcalc.checkpoint (which reads the headers, matches the names against these rules and
counts: tfcalc.checkpoint.names). Pure Python, no torch.

A rule is (a regex over the name, once the wrapper prefix -- ``model.``, ``transformer.``, ``bert.``, ... and a
vision-language model's ``language_model.`` -- is taken off, a target). A target is
``param[@expert][|part][|transform]`` (the tfcalc parameter path, ``{0}``, ``{1}``... filled from the regex's
groups; the expert whose slice of a grouped expert tensor it fills; a named block of its rows, ``q``, ``k``,
``v``, ``gate``, ``up``; how the stored tensor is laid out differently, the transforms listed in
tfcalc.checkpoint.names), ``tied:param`` (a stored copy of a tied parameter), ``buffer`` (a stored tensor that
is no parameter), ``buffer:param`` (a buffer of the model, loaded), ``scales`` (a quantized tensor's scales) or
``mtp`` (a multi-token-prediction module, counted beside the model). The first rule that matches wins.

What a name means is read from the description (tfcalc.architecture), never from flat fields: whether the LM
head is the token embedding (``Head.tied``), whether a post-attention norm is a sandwich output norm, how many
layers precede the MTP modules.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture

Rule = tuple[str, str]


def tied_head(arch: Architecture) -> str:
    """Where a stored LM head goes: a copy of the tied token embedding, or the head's own parameter."""
    return "tied:lm_head.weight" if arch.head.lm_head and arch.head.tied else "lm_head.weight"
