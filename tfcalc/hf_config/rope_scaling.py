"""RoPE scaling in a config.json, for every family with RoPE but DeepSeek's (tfcalc.hf_config.deepseek reads its
own): ``rope_scaling`` (transformers 4) or ``rope_parameters`` (5), flat or nested by layer type, read into the
fields of tfcalc.config_rope, as transformers 5.24 standardizes them (modeling_rope_utils.py,
RotaryEmbeddingConfigMixin.standardize_rope_params):

- a flat dict applies to every RoPE layer; ``rope_type`` (or the older ``type``), default "default";
- Gemma 3 and OLMo 3 nest it by layer type (configuration_gemma3.py, configuration_olmo3.py,
  convert_rope_params_to_dict): a top-level ``rope_scaling`` updates full_attention's only, so the global
  layers are scaled and the sliding ones are not (``rope_scaling_layers: full``);
- gpt-oss and Apertus fill in a scaling when the file names none (GptOssConfig: YaRN ×32 from 4,096,
  beta 32 / 1, truncate false; ApertusConfig: llama3 ×8 from 8,192, low 1, high 4);
- ``original_max_position_embeddings`` left out is max_position_embeddings (standardize_rope_params);
- the vision-language types (gemma3, llama4) read their ``text_config``;
- Phi-3's older names "su" and "yarn" are longrope (Phi3Config.convert_rope_params_to_dict).

Built: yarn, linear, llama3, longrope, proportional (tfcalc.architecture.rope; longrope: short_factor and
long_factor, the original length as ORIGINAL_DEFAULT below says, factor as given, else max_position_embeddings /
original; proportional, Gemma 4's global layers: factor and partial_rotary_factor, the share of the whole head that
turns, rope_proportion, both 1 where left out, and rope_fraction 1: transformers' proportional tables span the whole
head). Dynamic (NTK) leaves the base as it is within max_position_embeddings, all the positions tfcalc's model
covers: no field, run as the default. Any other rope_type is refused here in one line, as transformers refuses it
(ROPE_INIT_FUNCTIONS has no entry).
"""

from __future__ import annotations

from typing import Any

from tfcalc.errors import shown
from tfcalc.hf_config.reader import Reader

BUILT = ("yarn", "linear", "llama3", "longrope", "proportional")
KNOWN = ("default", *BUILT, "dynamic", "longrope")  # transformers' ROPE_INIT_FUNCTIONS and default
BY_LAYER_TYPE = ("gemma3_text", "olmo3", "gemma4_text")  # config classes that nest rope_parameters by layer type
TEXT_CONFIG = {"gemma3": "gemma3_text", "llama4": "llama4_text", "gemma4": "gemma4_text"}
FILLED_IN = {  # the config class's own scaling when the file names none
    "gpt_oss": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": False,
                "original_max_position_embeddings": 4096},
    "apertus": {"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0},
}
LAYER_TYPES = ("full_attention", "sliding_attention", "chunked_attention")
# HF key -> tfcalc field, per kind (factor is every kind's rope_scaling_factor)
KEYS = {
    "yarn": (("beta_fast", "yarn_beta_fast"), ("beta_slow", "yarn_beta_slow"), ("mscale", "yarn_mscale"),
             ("mscale_all_dim", "yarn_mscale_all_dim"), ("attention_factor", "yarn_attention_factor"),
             ("truncate", "yarn_truncate")),
    "linear": (),
    "llama3": (("low_freq_factor", "rope_low_freq_factor"), ("high_freq_factor", "rope_high_freq_factor")),
    "longrope": (("short_factor", "rope_short_factor"), ("long_factor", "rope_long_factor")),
    "proportional": (),  # its partial_rotary_factor is read apart (_fields): the proportion of the head that turns
}
# standardize_rope_params: a config class's own original_max_position_embeddings field (the file's top-level key,
# else its default) outranks the dict's; Phi3Config has one (default 4,096); a class without (LlamaConfig) reads
# the dict's, else max_position_embeddings (a top-level key is not yet an attribute when it runs)
ORIGINAL_DEFAULT = {"phi3": 4096}


RENAMED = {"phi3": {"su": "longrope", "yarn": "longrope"}}  # Phi3Config.convert_rope_params_to_dict: older names


def kind_of(scaling: Any, model_type: str = "") -> Any:
    """A scaling dict's rope_type (or the older ``type``), as the model type's config class names it."""
    kind = scaling.get("rope_type", scaling.get("type", "default")) if isinstance(scaling, dict) else None
    return RENAMED.get(model_type, {}).get(kind, kind) if isinstance(kind, str) else kind


def scalings(raw: dict[str, Any], model_type: str) -> dict[str, Any]:
    """{layer type or "all": its scaling dict} as transformers would apply it (module docstring)."""
    top, params = raw.get("rope_scaling"), raw.get("rope_parameters")
    if top is not None:
        return {"full_attention" if model_type in BY_LAYER_TYPE else "all": top}
    if isinstance(params, dict) and any(key in params for key in LAYER_TYPES):
        return {key: value for key, value in params.items() if key in LAYER_TYPES and value is not None}
    if params is not None:
        return {"all": params}
    return {"all": FILLED_IN[model_type]} if model_type in FILLED_IN else {}


def rope_scaling(r: Reader) -> None:
    """The scaling fields of a RoPE model (module docstring); nothing for a model without RoPE or DeepSeek's."""
    if r.fields.get("pos_encoding") != "rope" or r.fields.get("kv_lora_rank") is not None or \
            r.model_type == "deepseek_v4":  # DeepSeek-V4's compressed layers' own (tfcalc.hf_config.deepseek_v4)
        return
    raw, model_type, where = r.raw, r.model_type, r.where
    if model_type in TEXT_CONFIG:
        raw, model_type, where = raw.get("text_config") or {}, TEXT_CONFIG[model_type], f"{where} (text_config)"
    found = scalings(raw, model_type)
    for key, scaling in found.items():
        if not isinstance(scaling, dict):
            raise r.fail(f"'rope_scaling' {'' if key == 'all' else key + ' '}must be an object; got {shown(scaling)}")
        kind = kind_of(scaling, model_type)
        if kind not in KNOWN:
            raise r.fail(f"'rope_scaling' type {shown(kind)} is not a RoPE scaling transformers knows "
                         f"(known: {', '.join(KNOWN)})")
    scaled = {key: s for key, s in found.items() if kind_of(s, model_type) != "default"}
    if not scaled:
        return
    if model_type in BY_LAYER_TYPE and "all" in scaled:
        raise r.fail("'rope_parameters' must be nested by layer type (full_attention, sliding_attention) in a "
                     f"{model_type} config: transformers applies a flat one to no layer")
    layers = None
    if "all" not in scaled:
        drop_theta = [{k: v for k, v in s.items() if k != "rope_theta"} for s in scaled.values()]
        if set(scaled) == {"full_attention"}:
            layers = "full"
        elif any(d != drop_theta[0] for d in drop_theta) or set(scaled) != set(found):
            raise r.fail(f"'rope_parameters' scales the layer types {', '.join(sorted(scaled))} differently: tfcalc "
                         "builds one scaling on every RoPE layer, or on the full_attention layers only")
    scaling = next(iter(scaled.values()))
    if "all" not in found:  # _compute_yarn_parameters reads truncate from the top of rope_parameters: a nested
        scaling = {k: v for k, v in scaling.items() if k != "truncate"}  # dict's own is never read (default true)
    _fields(r, scaling, layers, where, model_type)


def _fields(r: Reader, scaling: dict[str, Any], layers: Any, where: str, model_type: str) -> None:
    kind = kind_of(scaling, model_type)
    if kind not in BUILT:  # counted as is; tfcalc.model.load refuses to run it
        return
    sub = Reader({"model_type": r.model_type, **scaling}, f"{where}: 'rope_scaling'")
    if kind == "longrope":
        _longrope(r, sub, scaling, model_type)
    elif kind == "proportional":  # _compute_proportional_rope_parameters: factor and proportion default to 1
        sub.fields["rope_scaling_factor"] = sub.positive("factor", 1.0)
        sub.fields["rope_proportion"] = sub.positive("partial_rotary_factor", 1.0)
        r.fields["rope_fraction"] = 1.0  # the whole head in rotate-half (the proportion turns), not partial rotary
    else:
        sub.take("factor", "rope_scaling_factor", required=True)
    if kind not in ("linear", "longrope", "proportional"):
        sub.take("original_max_position_embeddings", "rope_original_max_seq_len",
                 r.fields.get("max_seq_len"))
    for key, field in KEYS[kind]:
        sub.take(key, field, required=kind in ("llama3", "longrope"))
    r.fields.update({k: v for k, v in sub.fields.items() if v is not None}, rope_scaling=kind)
    if layers is not None:
        r.fields["rope_scaling_layers"] = layers


def _longrope(r: Reader, sub: Reader, scaling: dict[str, Any], model_type: str) -> None:
    """_compute_longrope_parameters' inputs: the original length (the module docstring says which), factor as given
    or max_position_embeddings / original; a stated attention_factor is refused (tfcalc computes the default)."""
    if scaling.get("attention_factor") is not None:
        raise sub.fail("'attention_factor' with longrope is not built by tfcalc (it uses sqrt(1 + ln(factor) / "
                       "ln(original)))")
    if model_type in ORIGINAL_DEFAULT:  # the class's own field: the file's top-level key, else its default
        original = r.raw.get("original_max_position_embeddings", ORIGINAL_DEFAULT[model_type])
    else:
        original = sub.take("original_max_position_embeddings", "rope_original_max_seq_len",
                            r.fields.get("max_seq_len"))
    if not isinstance(original, int) or original < 2:
        raise sub.fail(f"'original_max_position_embeddings' must be an integer of at least 2; got {shown(original)}")
    sub.fields["rope_original_max_seq_len"] = original
    if sub.get("factor") is not None:
        sub.take("factor", "rope_scaling_factor")
    else:
        sub.fields["rope_scaling_factor"] = r.fields.get("max_seq_len") / original
