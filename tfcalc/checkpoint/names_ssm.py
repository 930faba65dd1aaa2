"""Hugging Face tensor names of the state-space families -- mamba2 (Codestral Mamba), nemotron_h -> tfcalc's
parameters (the rule format of tfcalc.checkpoint.names: "param|part|transform"), from modeling_mamba2.py and
modeling_nemotron_h.py: the model lives under ``backbone.``, each layer's one norm is ``layers.<i>.norm`` and its
one sub-layer ``layers.<i>.mixer``. A Mamba2 mixer's tensors are tfcalc's under the same names
(tfcalc.architecture.mamba2) but its gated norm (``mixer.norm`` -> ``attn.gate_norm``: the block's own norm is
``attn_norm``). Nemotron-H's layer norm is the mixer's input norm (``attn_norm``) in an M or * layer and the FFN's
(``ffn_norm``) in a - or E layer, read from the description (``Block.norms``); its attention (q, k, v, o), MLP
(up, down), router (``gate``, with the correction bias as a buffer), experts (grouped ``experts.up_proj``
(E, f, d) and ``experts.down_proj`` (E, d, f), tfcalc's layout, or one tensor per expert as the released files
store them) and shared expert map as DeepSeek-V3's do. Granite-4.0-H (modeling_granitemoehybrid.py, after
``model.``): Llama's layer norms and attention, its Mamba2 mixer under ``mamba.``, the experts' stored
``block_sparse_moe.input_linear`` (E, 2f, d: [gate | up] per expert, tfcalc's layout) and ``output_linear``, the
router ``router.layer``, and the ``shared_mlp`` (input_linear [gate | up], output_linear): the shared expert, or the
FFN itself where the model has no experts.
"""

from __future__ import annotations

from tfcalc.architecture import Architecture

Rule = tuple[str, str]
TYPES = ("mamba2", "nemotron_h", "granitemoehybrid")
MIXER = r"\.mixer\.(in_proj\.weight|in_proj\.bias|conv1d\.weight|conv1d\.bias|dt_bias|A_log|D|out_proj\.weight|" \
        r"out_proj\.bias)"


def mamba2_mixer(layer: str) -> list[Rule]:
    """A Mamba2 mixer's tensors under ``layer`` (a regex whose first group is the layer number)."""
    return [(layer + MIXER, "blocks.{0}.attn.{1}"),
            (layer + r"\.mixer\.norm\.weight", "blocks.{0}.attn.gate_norm.weight")]


def _nemotron_h(arch: Architecture) -> list[Rule]:
    layer = r"backbone\.layers\.(\d+)\.mixer\."
    by_norm: dict[str, list[str]] = {}
    for i, block in enumerate(arch.output.layers()):
        by_norm.setdefault(block.norms()[0][0], []).append(str(i))
    norms = [(rf"backbone\.layers\.({'|'.join(ids)})\.norm\.weight", "blocks.{0}.%s.weight" % name)
             for name, ids in by_norm.items()]
    return norms + [
        (layer + r"([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"up_proj\.(weight|bias)", "blocks.{0}.ffn.up.{1}"),
        (layer + r"down_proj\.(weight|bias)", "blocks.{0}.ffn.down.{1}"),
        (layer + r"gate\.weight", "blocks.{0}.ffn.router.weight"),
        (layer + r"gate\.e_score_correction_bias", "buffer:blocks.{0}.ffn.score_bias"),
        (layer + r"experts\.up_proj", "blocks.{0}.ffn.experts.up.weight"),
        (layer + r"experts\.down_proj", "blocks.{0}.ffn.experts.down.weight"),
        (layer + r"experts\.(\d+)\.up_proj\.weight", "blocks.{0}.ffn.experts.up.weight@{1}"),
        (layer + r"experts\.(\d+)\.down_proj\.weight", "blocks.{0}.ffn.experts.down.weight@{1}"),
        (layer + r"shared_experts\.up_proj\.weight", "blocks.{0}.ffn.shared.up.weight"),
        (layer + r"shared_experts\.down_proj\.weight", "blocks.{0}.ffn.shared.down.weight"),
    ]


def _granite(arch: Architecture) -> list[Rule]:
    layer = r"layers\.(\d+)\."
    shared = "shared." if any(b.is_moe for b, _ in arch.output.kinds()) else ""
    return [(rule.replace(r"\.mixer\.", r"\.mamba\."), target) for rule, target in mamba2_mixer(r"layers\.(\d+)")] + [
        (r"embed_tokens\.weight", "tok_emb.weight"),
        (r"norm\.weight", "final_norm.weight"),
        (layer + r"input_layernorm\.weight", "blocks.{0}.attn_norm.weight"),
        (layer + r"post_attention_layernorm\.weight", "blocks.{0}.ffn_norm.weight"),
        (layer + r"self_attn\.([qkv])_proj\.(weight|bias)", "blocks.{0}.attn.qkv.{2}|{1}"),
        (layer + r"self_attn\.o_proj\.(weight|bias)", "blocks.{0}.attn.out.{1}"),
        (layer + r"block_sparse_moe\.input_linear\.weight", "blocks.{0}.ffn.experts.up.weight"),
        (layer + r"block_sparse_moe\.output_linear\.weight", "blocks.{0}.ffn.experts.down.weight"),
        (layer + r"block_sparse_moe\.router\.layer\.weight", "blocks.{0}.ffn.router.weight"),
        (layer + r"shared_mlp\.input_linear\.weight", "blocks.{0}.ffn.%sup.weight" % shared),
        (layer + r"shared_mlp\.output_linear\.weight", "blocks.{0}.ffn.%sdown.weight" % shared),
    ]


def rules(arch: Architecture, model_type: str) -> list[Rule]:
    head = "tied:lm_head.weight" if arch.head.lm_head and arch.head.tied else "lm_head.weight"
    if model_type == "granitemoehybrid":
        return _granite(arch) + [(r"lm_head\.weight", head)]
    first = _nemotron_h(arch) if model_type == "nemotron_h" else [
        (r"backbone\.layers\.(\d+)\.norm\.weight", "blocks.{0}.attn_norm.weight")]
    return first + mamba2_mixer(r"backbone\.layers\.(\d+)") + [
        (r"backbone\.embeddings?\.weight", "tok_emb.weight"),  # "embedding." in older files (Mamba2Model.load_hook)
        (r"backbone\.norm_f\.weight", "final_norm.weight"),
        (r"lm_head\.weight", head),
    ]
