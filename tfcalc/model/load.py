"""Real weights in tfcalc's own model: a Hugging Face checkpoint (safetensors) loaded into the module
tfcalc builds from the checkpoint's config.json, so that equal parameter counts can be backed by equal
outputs (tests/test_hf_models.py: logits within 1e-4 of transformers' for every supported model type).

Each checkpoint tensor is read once, laid out as tfcalc lays it out (tfcalc.checkpoint.names: fused
Q/K/V and [gate | up] rows, GPT-2's transposed Conv1D, GPT-NeoX's and Falcon's per-head interleaving,
Gemma's (1 + w) norms, one expert's slice of the grouped expert tensors) and copied into its rows of
the parameter; every element of every parameter must be written exactly once, or the load is refused
naming what is missing. Two things that change outputs but no count are refused too: a RoPE scaling the
model does not build (yarn, linear, llama3, longrope and proportional are built, tfcalc.model.rope_scaling, and
dynamic NTK is the default RoPE within max_position_embeddings), and GPT-2's per-layer attention scaling.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tfcalc import reading
from tfcalc.checkpoint.files import read_headers
from tfcalc.checkpoint.names import Piece, map_name, rules
from tfcalc.config import ModelConfig
from tfcalc.count.model.components import block_of, fused_rows, local_path
from tfcalc.errors import InputError, shown
from tfcalc.hf_config.rope_scaling import TEXT_CONFIG, kind_of, scalings
from tfcalc.model.transformer import Transformer


def _refuse_unbuilt(raw: dict[str, Any], where: Path, cfg: ModelConfig) -> None:
    """Keys that change the function, not the count: tfcalc counts such a model but cannot run it. A RoPE
    scaling the file states (or its config class fills in) that the config does not carry:
    one tfcalc.hf_config.rope_scaling does not read into the config (it reads yarn, linear, llama3, longrope and
    proportional)."""
    model_type = raw.get("model_type")
    inner = raw.get("text_config") if model_type in TEXT_CONFIG else raw
    model_type = TEXT_CONFIG.get(model_type, model_type)
    found = scalings(inner if isinstance(inner, dict) else {}, model_type)
    # dynamic NTK (_compute_dynamic_ntk_parameters) scales the base by (factor·T / max_position_embeddings -
    # (factor - 1)) only for T past max_position_embeddings: within them, all the positions tfcalc's tables
    # cover (max_seq_len), it is the default RoPE, and runs as such
    kinds = {kind_of(s, model_type) for s in found.values()} - {"default", "dynamic", None}
    for kind in sorted(kinds, key=str):
        if kind != cfg.rope_scaling:
            raise InputError(f"{where}: rope scaling {shown(kind)} is not built by tfcalc's model (the counts "
                             "hold; the outputs would not)")
    if raw.get("scale_attn_by_inverse_layer_idx"):
        raise InputError(f"{where}: 'scale_attn_by_inverse_layer_idx' is not built by tfcalc's model")


def _rows(cfg: ModelConfig, piece: Piece) -> tuple[int, int] | None:
    """The block of rows of the parameter a piece fills, or None for all of it."""
    if piece.part is None:
        return None
    _, path = local_path(piece.param)
    return fused_rows(cfg, path.rpartition(".")[0], piece.param)[piece.part]


def _layout(cfg: ModelConfig, raw: dict[str, Any], tensor: torch.Tensor, piece: Piece) -> torch.Tensor:
    """A checkpoint tensor in tfcalc's layout (see the module docstring); head counts from the layer's
    attention component (tfcalc.architecture)."""
    transform = piece.transform
    if transform == "T":
        return tensor.t()
    if transform == "mT":  # gpt-oss's grouped (E, in, out) -> (E, out, in)
        return tensor.mT
    if transform in ("oss_gate_up", "oss_bias"):  # gpt-oss: columns [g0 u0 g1 u1 ...] -> rows [gate | up]
        rows = tensor.mT if transform == "oss_gate_up" else tensor  # (E, 2f, d) or (E, 2f)
        return torch.cat([rows[:, 0::2], rows[:, 1::2]], dim=1)
    if transform == "norm+1":
        return tensor.float() + 1.0
    if transform == "value_scale":  # MiMo-V2-Flash: V times attention_value_scale (MiMoV2FlashConfig: 0.707,
        scale = raw.get("attention_value_scale", 0.707)  # null: 1), folded into V's rows: hf_config.mimo_v2_flash
        return tensor * (1.0 if scale is None else scale)
    if transform == "flat":  # ERNIE-4.5's router correction bias, stored (1, E): hf_config.ernie4_5_moe
        return tensor.reshape(-1)
    if transform == "mT":
        return tensor.mT
    if transform == "rope_pairs_heads":  # Cohere's per-head Q/K norm weights, (heads, h): hf_config.cohere
        hd = block_of(cfg, piece.param).mixer.head_dim
        return tensor.reshape(-1, hd // 2, 2).transpose(1, 2).reshape(tensor.shape)
    if transform == "rope_pairs":  # GLM-4, Cohere
        return _rope_pairs_to_halves(tensor, block_of(cfg, piece.param).mixer)
    if transform not in ("neox_qkv", "falcon_qkv"):
        return tensor
    attention = block_of(cfg, piece.param).mixer
    heads, kv_heads, hd = attention.n_head, attention.n_kv_head, attention.head_dim
    if transform == "neox_qkv" or (transform == "falcon_qkv" and not raw.get("new_decoder_architecture")
                                    and not raw.get("multi_query", True)):
        rest = tensor.shape[1:]
        return tensor.reshape(heads, 3, hd, *rest).transpose(0, 1).reshape(3 * heads * hd, *rest)
    if transform == "falcon_qkv" and raw.get("new_decoder_architecture"):
        rest, group = tensor.shape[1:], heads // kv_heads
        grouped = tensor.reshape(kv_heads, group + 2, hd, *rest)
        q = grouped[:, :group].reshape(heads * hd, *rest)
        return torch.cat([q, grouped[:, group].reshape(kv_heads * hd, *rest),
                          grouped[:, group + 1].reshape(kv_heads * hd, *rest)])
    return tensor  # falcon_qkv of a multi-query model is [Q | K | V] already


def _rope_pairs_to_halves(tensor: torch.Tensor, attention) -> torch.Tensor:
    """Q or K rows (heads × head_dim, ...) with the first rope_dim channels of each head rotated in
    interleaved pairs (GLM-4) reordered to tfcalc's halves: channel 2j to j, 2j + 1 to rope_dim/2 + j."""
    hd, r = attention.head_dim, attention.rope_dim  # r = 0 in a NoPE layer: nothing to reorder
    order = torch.cat([torch.arange(0, r, 2), torch.arange(1, max(r, 1), 2), torch.arange(r, hd)])
    heads = tensor.shape[0] // hd
    return tensor.reshape(heads, hd, *tensor.shape[1:])[:, order].reshape(tensor.shape)


def _fill(params: dict[str, torch.Tensor], written: dict[str, int], name: str, piece: Piece, rows, value,
          copy: bool = True) -> None:
    target = params.get(piece.param)
    if target is None:
        raise InputError(f"{shown(name)}: no parameter {piece.param} in the model its config describes")
    where = piece.param
    if piece.expert is not None:  # one expert's slice of a grouped expert tensor (tfcalc.model.experts)
        if not 0 <= piece.expert < target.shape[0]:
            raise InputError(f"{shown(name)}: expert {piece.expert} is past the {target.shape[0]} experts of "
                             f"{piece.param}")
        target, where = target[piece.expert], f"{piece.param}[{piece.expert}]"
    view = target if rows is None else target[rows[0]:rows[1]]
    if tuple(view.shape) != tuple(value.shape):
        raise InputError(f"{shown(name)}: shape {list(value.shape)} does not fit {where}"
                         f"{'' if rows is None else f' rows {rows[0]}:{rows[1]}'} {list(view.shape)}")
    if copy:
        view.copy_(value)
    written[piece.param] = written.get(piece.param, 0) + value.numel()


def _tensors(checkpoint, dry: bool):
    """(file name, tensor name, a function that gives the tensor): read from the file, or (dry) an empty
    tensor on meta of the header's shape, which costs nothing."""
    if dry:
        for info in checkpoint.tensors:
            yield info.file, info.name, lambda info=info: torch.empty(info.shape, device="meta")
        return
    from safetensors import safe_open

    for file in checkpoint.files:
        with safe_open(str(file), framework="pt") as f:
            for name in f.keys():
                yield file.name, name, lambda f=f, name=name: f.get_tensor(name)


def load_weights(model: Transformer, cfg: ModelConfig, folder: Path, raw: dict[str, Any], path: Path,
                 dry: bool = False) -> None:
    """Copy every tensor of the checkpoint at path into model (built from cfg). dry: the same checks on
    the headers' shapes only, nothing read or written (the model may be on meta): load_model runs it
    first, so that a checkpoint that does not fit its config is refused before any memory is taken or
    any tensor read (a 4 GiB tensor of the wrong shape was read whole before)."""
    table = rules(cfg, raw["model_type"])
    params = dict(model.named_parameters())  # a tied parameter appears once, under its first name
    buffers, written = dict(model.named_buffers()), {}
    checkpoint = read_headers(path)
    for file, name, get in _tensors(checkpoint, dry):
        piece = map_name(table, name)
        if piece is None:
            raise InputError(f"{file}: tensor {shown(name)} is not explained by the {raw['model_type']} config")
        if piece == "scales" or (isinstance(piece, Piece) and piece.transform == "mxfp4"):
            raise InputError(f"{file}: {shown(name)} is an MXFP4 tensor: tfcalc's loader reads unquantized "
                             "weights (tfcalc params counts this checkpoint; memory and infer read its format)")
        if piece in ("buffer", "mtp", "vision") or piece.tied:  # the vision tower is not built
            continue
        tensor = get()
        if piece.buffer:  # a buffer of the model that a checkpoint holds (DeepSeek-V3's router bias)
            _fill(buffers, {}, name, piece, None, _layout(cfg, raw, tensor, piece), not dry)
            continue
        value = _layout(cfg, raw, tensor, piece)
        _fill(params, written, name, piece, _rows(cfg, piece), value, not dry)
    missing = [n for n, p in params.items() if written.get(n, 0) != p.numel()]
    if missing:
        names = ", ".join(missing[:4]) + (f" and {len(missing) - 4} more" if len(missing) > 4 else "")
        raise InputError(f"{path}: the checkpoint does not fill {names}")


def load_model(path: str | Path, device: str | torch.device = "cpu", dtype: torch.dtype = torch.float32) -> Transformer:
    """tfcalc's model of the checkpoint at path (a model folder, a .safetensors file beside its
    config.json, or a Hugging Face cache id), with the checkpoint's weights, in eval mode.

    ``model(input_ids)`` returns logits (batch, seq, vocab) (an encoder-decoder: ``model(src_ids,
    tgt_ids)``; without an LM head, hidden states; BertModel's also the pooled first token).

    Checked before anything is allocated: the path names a checkpoint with weights, and every tensor's
    shape in the headers fits the model the config describes (a dry load on meta)."""
    from tfcalc.presets import checkpoint_source

    source = checkpoint_source(str(path))
    if source.folder is None:
        raise InputError(f"{shown(str(path))} names a model config, not a checkpoint: load_model reads a model folder "
                         "(config.json and safetensors weights), a .safetensors file beside its config.json, or "
                         "a Hugging Face id in the local cache")
    if source.weights is None:
        raise InputError(f"{shown(str(path))}: no weights there (no .safetensors file beside config.json); "
                         "load_model needs them (tfcalc params counts a config alone)")
    folder, config_path = source.folder, source.folder / "config.json"
    raw = reading.read_json(config_path, "JSON")  # read (and checked) once already by checkpoint_source
    cfg = source.cfg
    _refuse_unbuilt(raw, config_path, cfg)
    with torch.device("meta"):
        model = Transformer(cfg)
    model.tie_weights()
    load_weights(model, cfg, folder, raw, source.weights, dry=True)  # shapes first, on meta: nothing allocated
    model.to_empty(device="cpu")
    model.tie_weights()
    for stack in model.modules():  # the position tables, which no checkpoint holds
        if hasattr(stack, "register_position_buffers"):
            stack.register_position_buffers()
    with torch.no_grad():
        load_weights(model, cfg, folder, raw, source.weights)
        _fold_t5_output_scale(model, cfg, raw)
    return model.to(device=device, dtype=dtype).eval()


def _fold_t5_output_scale(model: Transformer, cfg: ModelConfig, raw: dict[str, Any]) -> None:
    """T5 (v1.0, tied head) scales the decoder output by d_model^-1/2 before the LM head
    (modeling_t5.py, scale_decoder_outputs): folded into the final norm's weight, which precedes it."""
    scale = raw.get("scale_decoder_outputs", raw.get("tie_word_embeddings", True) is not False)
    if raw["model_type"] == "t5" and cfg.arch == "encoder-decoder" and cfg.lm_head and scale:
        model.final_norm.weight.mul_(cfg.d_model ** -0.5)


__all__ = ["load_model", "load_weights"]
