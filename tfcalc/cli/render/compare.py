"""`tfcalc compare` as a document: one column per model, differences from the first highlighted."""

from __future__ import annotations

from tfcalc.cli.render.doc import Cell, Column, Doc
from tfcalc.report.compare import CompareReport

# (key, label, unit): each row one figure, in one unit across the models
ROWS = [
    ("n_layer", "layers", "int"), ("d_model", "d_model", "int"), ("n_head", "query heads", "int"),
    ("n_kv_head", "KV heads", "int"), ("d_head", "d_head", "int"), ("d_ff", "d_ff", "int"),
    ("vocab_size", "vocab", "int"), ("max_seq_len", "context", "int"), ("pos_encoding", "positions", "text"),
    ("norm", "norm", "text"), ("ffn", "FFN", "text"), ("tie_embeddings", "tied head", "text"),
    ("params", "parameters", "params"), ("weights_bytes", "weights", "bytes"),
    ("forward_flops_per_token", "forward FLOPs / token", "flop"),
    ("training_flops_per_token", "training FLOPs / token", "flop"),
    ("kv_cache_bytes_per_token", "KV cache / token", "bytes"),
    ("kv_layers", "layers caching K/V", "int"),
    ("fixed_state_bytes_per_sequence", "fixed state / sequence", "bytes"),
    ("state_bytes_at_seq", "state / sequence at T", "bytes"),
    ("attention_param_share", "attention share of params", "share"),
    ("ffn_param_share", "FFN share of params", "share"),
    ("attention_flop_share", "attention share of FLOPs", "share"),
    ("ffn_flop_share", "FFN share of FLOPs", "share"),
]


def document(reports: list[CompareReport], verbose: bool = False) -> Doc:
    from tfcalc.units import format_cell

    doc = Doc()
    for report in reports:
        rows, first = report.rows, report.rows[0]
        t = doc.table(f"Compared at T = {report.seq:,} tokens, bytes in {report.dtype}",
                      Column(""), *(Column(r["label"], "text") for r in rows), name="compare")
        # a hybrid among them: its "attention" shares are its whole token-mixer sub-layer's (the JSON's keys as before)
        roles = {r["noun"] for row in rows for r in row.get("mixer_roles", ())}
        mixers = f"token-mixer (attention, {', '.join(sorted(roles))})" if roles else "attention"
        for key, label, unit in ROWS:
            label = label.replace("attention", mixers) if key.startswith("attention_") else label
            cells = []
            for i, r in enumerate(rows):
                value = ("yes" if r[key] else "no") if key == "tie_embeddings" else r[key]
                text = format_cell(value, unit)
                cells.append(Cell(text, "" if i == 0 or r[key] == first[key] else "bold yellow", raw=value))
            t.add(label, *cells)
        doc.note("Highlighted: differs from the first model. Per-token FLOPs at the length above (the shortest "
                 "context by default, --seq to choose). KV cache / token: the K/V of the layers caching it; a "
                 "hybrid's other layers hold a fixed state per sequence that does not grow with T; state at T: "
                 "both, for one sequence of T tokens.", "dim")
    return doc
