"""No re-derivation from flat fields (issue 19): every count folds over ``cfg.architecture``. The widths,
head counts and layer counts of tfcalc.config's flat front end are read in tfcalc/count/ only where a
published formula or a note about the flat fields themselves asks for them, each listed here with why."""

from __future__ import annotations

import ast
from pathlib import Path

import tfcalc

FLAT = {"n_head", "head_dim", "d_head", "d_ff", "ffn_dim", "n_kv_head", "kv_heads", "q_dim", "kv_dim", "d_model",
        "n_expert", "n_expert_active", "vocab_size", "gated_ffn", "shared_expert_d_ff", "v_head_dim", "dense_d_ff",
        "kv_lora_rank", "n_layer", "window", "attn_softcap", "qk_norm", "pos_encoding", "logit_softcap",
        # what the description's head, embeddings, MoE and blocks hold (Head.lm_head, .tied, .pooler;
        # Embeddings.shared_with; MoE.weight_format; Architecture.has_cross_attention)
        "lm_head", "tie_embeddings", "tie_encoder_embedding", "pooler", "expert_format", "cross_attention",
        "encoder_layers", "decoder_layers", "cross_attention_layers", "activation"}
# read in tfcalc/report/ too only where a report shows the flat field as the config gives it (JSON keys users read)
REPORT_FLAT = {"lm_head", "pooler", "expert_format", "cross_attention", "tie_encoder_embedding", "pos_encoding"}
ALLOWED = {
    # the published formulas, each as its source writes it (one d, d_ff, head count and depth)
    ("formulas.py", "standard_formulas"), ("rank_activations.py", "korthikanti_bytes"),
    # the note on n_head·d_head != d_model is about the flat fields as given (GPT-3's Table 2.1)
    ("params.py", "width_note"),
    # the plan's search bounds pp by the layers (issue 20's lane: count/training/layout.py's candidate_layouts)
    ("layout.py", "candidate_layouts"),
}


def _flat_reads(folder: str = "count", fields: set[str] = FLAT) -> set[tuple[str, str]]:
    root = Path(tfcalc.__file__).parent / folder
    found = set()
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text())
        bodies = tree.body + [n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body]
        for func in (n for n in bodies if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(func):
                if (isinstance(node, ast.Attribute) and node.attr in fields and isinstance(node.value, ast.Name)
                        and node.value.id == "cfg") or (isinstance(node, ast.Attribute) and node.attr in fields
                                                        and isinstance(node.value, ast.Attribute)
                                                        and node.value.attr == "cfg"):  # self.cfg.<field>
                    found.add((path.name, func.name))  # a nested function is its outer function's
    return found


def test_count_reads_widths_only_through_the_description():
    assert _flat_reads() <= ALLOWED, _flat_reads() - ALLOWED


def test_the_scan_finds_a_flat_read():
    """The scan itself can fail: it finds each allowed read (so a new one would show up too)."""
    assert _flat_reads() == ALLOWED


def test_reports_read_the_head_and_blocks_through_the_description():
    """Whether a model has an LM head, a pooler, cross-attention, experts stored in MXFP4: the description says
    (issue 29); the reports ask it, as the counts do."""
    assert _flat_reads("report", REPORT_FLAT) == set()


def test_the_report_scan_finds_a_flat_read():
    assert ("params.py", "to_json") in _flat_reads("report", {"tie_embeddings"})  # the JSON's tied_embeddings
