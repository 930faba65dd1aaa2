"""Hugging Face tensor names of the state-space families -- mamba2 (Codestral Mamba) -> tfcalc's parameters
(the rule format of tfcalc.checkpoint.names: "param|part|transform"), from modeling_mamba2.py: the model lives
under ``backbone.``, each layer's one norm is ``layers.<i>.norm`` and its mixer ``layers.<i>.mixer``, whose
tensors are tfcalc's Mamba2 mixer's under the same names (tfcalc.architecture.mamba2) but its gated norm
(``mixer.norm`` -> ``attn.gate_norm``: the block's own norm is ``attn_norm``).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture

Rule = tuple[str, str]
TYPES = ("mamba2",)
MIXER = r"\.mixer\.(in_proj\.weight|in_proj\.bias|conv1d\.weight|conv1d\.bias|dt_bias|A_log|D|out_proj\.weight|" \
        r"out_proj\.bias)"


def mamba2_mixer(layer: str) -> list[Rule]:
    """A Mamba2 mixer's tensors under ``layer`` (a regex whose first group is the layer number)."""
    return [(layer + MIXER, "blocks.{0}.attn.{1}"),
            (layer + r"\.mixer\.norm\.weight", "blocks.{0}.attn.gate_norm.weight")]


def rules(arch: Architecture, model_type: str) -> list[Rule]:
    head = "tied:lm_head.weight" if arch.head.lm_head and arch.head.tied else "lm_head.weight"
    return mamba2_mixer(r"backbone\.layers\.(\d+)") + [
        (r"backbone\.embeddings?\.weight", "tok_emb.weight"),  # "embedding." in older files (Mamba2Model.load_hook)
        (r"backbone\.layers\.(\d+)\.norm\.weight", "blocks.{0}.attn_norm.weight"),
        (r"backbone\.norm_f\.weight", "final_norm.weight"),
        (r"lm_head\.weight", head),
    ]
