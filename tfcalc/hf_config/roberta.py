"""RoBERTa config.json files (FacebookAI/roberta-base, modeling_roberta.py): BERT's keys (tfcalc.hf_config.bert),
with positions counted from pad_token_id + 1 (create_position_ids_from_input_ids, for input without padding): a table
of max_position_embeddings rows of which max_position_embeddings - pad_token_id - 1 are usable, tfcalc's
position_offset. RobertaModel (pooler), RobertaForMaskedLM, or RobertaForCausalLM (is_decoder).
"""

from __future__ import annotations

from tfcalc.architecture import Architecture
from tfcalc.hf_config.bert import bert, checkpoint_names as bert_names
from tfcalc.hf_config.names import Rule, tied_head
from tfcalc.hf_config.reader import Reader

_ROBERTA_HEADS = {"RobertaModel": "base", "RobertaForMaskedLM": "masked", "RobertaForCausalLM": "masked"}


def roberta(r: Reader) -> None:
    bert(r, heads=_ROBERTA_HEADS, default="RobertaModel")
    pad = r.number("pad_token_id", 1, integer=True)
    rows = r.fields["max_seq_len"]
    if pad is None or pad < 0 or pad + 1 >= rows:
        raise r.fail(f"'pad_token_id' {pad} must be at least 0 and below max_position_embeddings - 1 ({rows - 1}): "
                     "RoBERTa's positions start after it")
    r.fields.update(position_offset=pad + 1, max_seq_len=rows - pad - 1)


def checkpoint_names(arch: Architecture, model_type: str) -> list[Rule]:
    """BERT's names under ``roberta.``, and RobertaLMHead's (modeling_roberta.py): dense, layer_norm, decoder
    (the tied word embeddings) and its bias, stored twice (lm_head.bias, lm_head.decoder.bias)."""
    return bert_names(arch, model_type) + [
        (r"lm_head\.dense\.(weight|bias)", "head_dense.{0}"),
        (r"lm_head\.layer_norm\.(weight|bias)", "head_norm.{0}"),
        (r"lm_head\.decoder\.weight", tied_head(arch)),
        (r"lm_head\.bias", "lm_head.bias"),
        (r"lm_head\.decoder\.bias", "tied:lm_head.bias"),
    ]
