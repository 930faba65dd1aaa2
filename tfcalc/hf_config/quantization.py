"""config.json's ``quantization_config``: how a quantized checkpoint stores its matrices, read into the
``stored_quant`` fields (tfcalc.config; bytes in tfcalc.count.model.quant_stored). Every family reads it
(tfcalc.hf_config.config_fields, after the family's own keys); gpt-oss reads its MXFP4 experts itself.

- ``quant_method: fp8`` (transformers' FineGrainedFP8Config; DeepSeek-V3's README_WEIGHTS.md): fp8 values
  (``fmt`` e4m3 or e5m2, or torch's float8_e4m3fn as MiniMax-M2 writes it), one fp32 ``weight_scale_inv``
  per ``weight_block_size`` tile, or one per matrix when it is null; the LM head and ``modules_to_not_convert``
  kept (quantizer_finegrained_fp8.py keeps the output embedding).
- ``quant_method: compressed-tensors`` (vLLM's llm-compressor): one ``config_groups`` scheme targeting
  ``Linear``, its ``weights``: ``num_bits`` and ``type`` (int 4 or 8, float 8), ``strategy`` (tensor,
  channel, group with ``group_size``, block with ``block_structure``), ``symmetric`` (else zero points);
  scales in ``weights.scale_dtype`` or the checkpoint's dtype; the ``ignore`` list kept.
- ``quant_method: awq`` / ``gptq`` (AutoAWQ, AutoGPTQ): int ``bits`` 4 or 8 with fp16 scales and packed
  zero points (``qzeros``: GPTQ stores them even when symmetric) per ``group_size`` (-1: per row); the LM
  head kept unless GPTQ's ``lm_head``; ``modules_to_not_convert`` kept.

A kept-module list is matched as transformers matches it (quantizers_utils.should_convert_module: a prefix
up to a module boundary, a regex with that boundary, or a suffix; compressed-tensors' ``re:`` entries as
regexes from the start) against the Llama/DeepSeek module names of each quantizable matrix
(tfcalc.config_quant.QUANTIZABLE) in every layer that has it. A kind of matrix kept in some of those layers
and not others is refused: tfcalc counts each kind stored one way in every layer. Any other scheme, or a
field out of range, is one line naming it.
"""

from __future__ import annotations

import re
from typing import Any

from tfcalc.config_quant import QUANTIZABLE
from tfcalc.errors import shown
from tfcalc.hf_config.reader import Reader

_BOUNDARY = r"(?:(?<=\.)|(?=\.|$))"  # transformers' quantizers_utils.should_convert_module
_SCALE_DTYPES = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}
_KEY = "'quantization_config'"


def quantization(r: Reader) -> None:
    """The stored_quant fields of r.raw's quantization_config (none without one)."""
    q = r.raw.get("quantization_config")
    if q is None or r.fields.get("expert_format") is not None:  # gpt-oss read its MXFP4 experts itself
        return
    if not isinstance(q, dict):
        raise r.fail(f"{_KEY} must be an object; got {shown(q)}")
    method = q.get("quant_method")
    readers = {"fp8": _fp8, "compressed-tensors": _compressed, "awq": _awq_gptq, "gptq": _awq_gptq}
    if method == "mxfp4":
        raise r.fail(f"{_KEY} quant_method 'mxfp4' is read for gpt-oss's experts only")
    if not isinstance(method, str) or method not in readers:
        raise r.fail(f"{_KEY} quant_method {shown(method)} is not counted: tfcalc reads "
                     f"{', '.join(readers)} and gpt-oss's mxfp4")
    fields, patterns, regex_prefix = readers[method](r, q)
    keep = _kept(r, fields, patterns, regex_prefix)
    fields["stored_quant_keep"] = ",".join(c for c in QUANTIZABLE if c in keep) or None
    r.fields.update(fields)


def _field(r: Reader, q: dict, key: str, kinds: tuple, default: Any = None, where: str = "") -> Any:
    value = q.get(key, default)
    if value is not None and (isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds)):
        raise r.fail(f"{_KEY} {where}{key} must be {' or '.join(k.__name__ for k in kinds)}; got {shown(value)}")
    return value


def _names(r: Reader, q: dict, key: str, where: str = "") -> list[str]:
    value = q.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise r.fail(f"{_KEY} {where}{key} must be a list of module names; got {shown(value)}")
    return value


def _size(r: Reader, value: Any, key: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 2**20:
        raise r.fail(f"{_KEY} {key} must be a whole number 1 .. 1,048,576; got {shown(value)}")
    return value


def _fp8(r: Reader, q: dict) -> tuple[dict, list[str], bool]:
    fmt = _field(r, q, "fmt", (str,), "e4m3")
    # MiniMax-M2 writes torch's dtype names (float8_e4m3fn); transformers' FineGrainedFP8Config reads no fmt at all
    if fmt not in ("e4m3", "e5m2", "float8_e4m3fn", "float8_e5m2"):
        raise r.fail(f"{_KEY} fmt {shown(fmt)} is not an fp8 format (e4m3, e5m2, float8_e4m3fn or float8_e5m2)")
    if _field(r, q, "activation_scheme", (str,), "dynamic") not in ("dynamic", "static"):
        raise r.fail(f"{_KEY} activation_scheme {shown(q.get('activation_scheme'))} is not dynamic or static")
    scale_fmt = _field(r, q, "scale_fmt", (str,))
    if scale_fmt not in (None, "ue8m0"):  # DeepSeek-V3.1: power-of-two values, still fp32 weight_scale_inv tensors
        raise r.fail(f"{_KEY} scale_fmt {shown(scale_fmt)} is not counted (ue8m0 or none)")
    block = q.get("weight_block_size", [128, 128])
    fields: dict[str, Any] = dict(stored_quant="fp8", stored_quant_scale_dtype="fp32")
    if block is None:
        fields["stored_quant_scales"] = "tensor"
    else:
        if not isinstance(block, list) or len(block) != 2:
            raise r.fail(f"{_KEY} weight_block_size must be two sizes [rows, cols]; got {shown(block)}")
        fields.update(stored_quant_scales="block",
                      stored_quant_block=[_size(r, b, "weight_block_size") for b in block])
    return fields, ["lm_head", *_names(r, q, "modules_to_not_convert")], False


def _awq_gptq(r: Reader, q: dict) -> tuple[dict, list[str], bool]:
    method = q["quant_method"]
    bits = _field(r, q, "bits", (int,), 4)
    if bits not in (4, 8):
        raise r.fail(f"{_KEY} bits {shown(bits)} is not counted: {method} int4 or int8")
    group = _field(r, q, "group_size", (int,), 128)
    fields: dict[str, Any] = dict(stored_quant=f"int{bits}", stored_quant_scale_dtype="fp16")
    if group == -1:
        fields["stored_quant_scales"] = "channel"
    else:
        fields.update(stored_quant_scales="group", stored_quant_group=_size(r, group, "group_size"))
    zero = _field(r, q, "zero_point", (bool,), True) if method == "awq" else True
    fields["stored_quant_zero_point"] = bool(zero)
    keep = _names(r, q, "modules_to_not_convert")
    if not (method == "gptq" and _field(r, q, "lm_head", (bool,), False)):
        keep = ["lm_head", *keep]
    return fields, keep, False


def _compressed(r: Reader, q: dict) -> tuple[dict, list[str], bool]:
    status = _field(r, q, "quantization_status", (str,), "compressed")
    if status != "compressed":
        raise r.fail(f"{_KEY} quantization_status {shown(status)}: only a compressed checkpoint stores its "
                     "weights quantized")
    if q.get("sparsity_config"):
        raise r.fail(f"{_KEY} sparsity_config is not counted (a sparse checkpoint)")
    groups = q.get("config_groups")
    if not isinstance(groups, dict) or len(groups) != 1:
        raise r.fail(f"{_KEY} config_groups must hold one scheme; got {shown(groups)}")
    (name, scheme), = groups.items()
    where = f"config_groups.{name}."
    if not isinstance(scheme, dict) or scheme.get("targets") != ["Linear"]:
        raise r.fail(f"{_KEY} {where}targets must be [\"Linear\"]; got "
                     f"{shown(scheme.get('targets') if isinstance(scheme, dict) else scheme)}")
    w = scheme.get("weights")
    if not isinstance(w, dict):
        raise r.fail(f"{_KEY} {where}weights must be an object; got {shown(w)}")
    where += "weights."
    bits, kind = _field(r, w, "num_bits", (int,), where=where), _field(r, w, "type", (str,), "int", where=where)
    dtype = {("int", 4): "int4", ("int", 8): "int8", ("float", 8): "fp8"}.get((kind, bits))
    if dtype is None:
        raise r.fail(f"{_KEY} {where}num_bits {shown(bits)} of type {shown(kind)} is not counted: int 4 or 8, "
                     "float 8")
    fmt = _field(r, q, "format", (str,), where="")
    packed = {"pack-quantized": ("int4", "int8"), "int-quantized": ("int8",), "float-quantized": ("fp8",),
              "naive-quantized": ("int8", "fp8")}
    if fmt is not None and dtype not in packed.get(fmt, ()):
        raise r.fail(f"{_KEY} format {shown(fmt)} is not counted for {dtype} weights")
    scale = _field(r, w, "scale_dtype", (str,), where=where) or r.get("torch_dtype", "bfloat16", aliases=("dtype",))
    if scale not in _SCALE_DTYPES:
        raise r.fail(f"{_KEY} {where}scale_dtype {shown(scale)} is not one of {', '.join(_SCALE_DTYPES)}")
    fields: dict[str, Any] = dict(stored_quant=dtype, stored_quant_scale_dtype=_SCALE_DTYPES[scale],
                                  stored_quant_zero_point=not _field(r, w, "symmetric", (bool,), True, where))
    strategy = _field(r, w, "strategy", (str,), "tensor", where)
    if strategy == "group":
        fields["stored_quant_group"] = _size(r, w.get("group_size"), f"{where}group_size")
    elif strategy == "block":
        block = w.get("block_structure")
        if not isinstance(block, list) or len(block) != 2:
            raise r.fail(f"{_KEY} {where}block_structure must be two sizes [rows, cols]; got {shown(block)}")
        fields["stored_quant_block"] = [_size(r, b, f"{where}block_structure") for b in block]
    elif strategy not in ("tensor", "channel"):
        raise r.fail(f"{_KEY} {where}strategy {shown(strategy)} is not counted: tensor, channel, group or block")
    fields["stored_quant_scales"] = strategy
    return fields, _names(r, q, "ignore"), True


def _kept(r: Reader, fields: dict, patterns: list[str], regex_prefix: bool) -> set[str]:
    """The QUANTIZABLE components the patterns keep in every layer that has them (see the docstring)."""
    matchers = []
    for p in patterns:
        regex = p[3:] if regex_prefix and p.startswith("re:") else None
        try:
            matchers.append(re.compile(regex) if regex is not None else re.compile(rf"(?:{p}){_BOUNDARY}"))
        except re.error:
            raise r.fail(f"{_KEY} names {shown(p)}, which is not a valid pattern") from None
        if regex is None:
            matchers.append(p)  # transformers' suffix rule

    def matched(name: str) -> bool:
        return any(m.match(name) if isinstance(m, re.Pattern) else name.endswith(m) for m in matchers)

    moe = _moe_layers(r)
    out = set()
    for component, leaves in QUANTIZABLE.items():
        if component == "lm_head":
            if matched("lm_head"):
                out.add(component)
            continue
        layers = [i for i, is_moe in enumerate(moe) if is_moe == ("expert" in component) or
                  not component.startswith(("ffn_", "expert_", "shared_"))]
        hits = [i for i in layers if any(matched(f"model.layers.{i}.{leaf}") for leaf in leaves)]
        if hits and len(hits) < len(layers):
            raise r.fail(f"{_KEY} keeps {component.removesuffix('_weight')} ({leaves[0]}) in {len(hits)} of the "
                         f"{len(layers)} layers that have it: tfcalc counts each kind of matrix one way in every layer")
        if hits:
            out.add(component)
    return out


def _moe_layers(r: Reader) -> list[bool]:
    """Whether each layer has experts, from the config the family's keys make (no stored format yet)."""
    from tfcalc.config import from_mapping  # the fields of any registered mixer kind among them

    probe = from_mapping({"name": "probe", **{k: v for k, v in r.fields.items() if not k.startswith("stored_")}})
    return [b.is_moe for b in probe.architecture.output.layers()]
