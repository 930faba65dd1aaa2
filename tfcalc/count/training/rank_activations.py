"""Activations of one rank of a training layout: the single-device terms of tfcalc.count.model.activations,
shared out by tensor and sequence parallelism, recompute and the pipeline. Pure arithmetic.

One model for `memory --training` (one GPU) and `plan` (any layout): both ask ``activation_bytes`` for
a Layout, and on one GPU (tp = pp = 1) it is ``Activations.total`` to the byte.

How each per-layer term of tfcalc.count.model.activations is held across t tensor-parallel ranks (Megatron-LM,
Shoeybi et al. 2019, sec. 3: heads and the FFN's hidden width split, the h-wide tensors replicated;
Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, sec. 4.2):

1. split by t -- what is per head or FFN-hidden wide: Q, K, V (and RoPE'd or normed Q and K), the
   log-sum-exp, the attention output, the FFN hidden tensors and a shared expert's, the T×T score terms
   (``SPLIT``). A mixture of experts' hidden tensors and routing stay whole: experts are replicated
   across the TP ranks (no expert parallelism is modelled);
2. whole on every rank -- the h-wide tensors: norms' inputs and statistics, the QKV and FFN inputs,
   the dropout masks of the attention and FFN outputs; sequence parallelism splits these by t too
   (each rank keeps its s/t slice of the sequence, sec. 4.2.2);
3. vocabulary-parallel -- the fp32 log-probabilities, capped logits and the loss gradients over V:
   ⌈V/t⌉ per rank (the cross-entropy of Megatron's vocabulary-parallel head);
4. once per forward, not per token -- the sliding-window mask, T5's position bias, the pooler's output:
   whole (they are not sequence-sharded).
Korthikanti's Table 2, per layer, 16-bit, with dropout, math attention: sbh(10 + 24/t + 5as/(ht))
without sequence parallelism, sbh/t · (34 + 5as/h) with it, sbh·34/t under selective recompute, 2sbh
under full recompute: the terms above reproduce each of these exactly, plus the LayerNorm statistics
the paper leaves out (two norms · 8 bytes per token, split by t under sequence parallelism).

Recompute: "selective" drops the score terms (SCORE_TERMS: rebuilt in the backward pass; under flash
there are none); "full" keeps each block's input, e·h per token per layer (÷ t under sequence
parallelism, which checkpoints the sequence shard), and rebuilds one block at a time: one layer's
activations on the rank are added to the peak.

Pipeline (1F1B, Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters",
sec. 2.2): stage i keeps min(p − i, m) micro-batches in flight, each with its own layers' terms (the
interleaved schedule keeps more, chunk by chunk: tfcalc.count.perf.pipeline, step 2; zero-bubble's
ZB-H1 as many as 1F1B; context parallelism: the terms of the rank's s/C positions); the
first stage holds the embedding's terms, the last the head's (its one micro-batch in flight) and, as
the backward pass begins, the loss gradients. Blocks are numbered over the whole model, an
encoder-decoder's encoder blocks first (``pipeline_blocks``); a stage's blocks are summed kind by kind
(``Activations.kinds_in``, closed form in depth), so layers that differ (a mixture of experts' dense
layers, per-layer widths) are summed each with its own terms.
"""

from __future__ import annotations

from typing import Optional, Union

from tfcalc.config import ModelConfig
from tfcalc.count.model.activations import SCORE_TERMS, Activations, activations
from tfcalc.count.perf.pipeline import chunk_micro_batches, head_stage
from tfcalc.count.training.shard import stage_blocks, stage_ranges  # noqa: F401  (stage_blocks: re-exported)
from tfcalc.workload import Layout, Workload

SPLIT = frozenset({
    "qkv", "rope_qk", "qk_norm", "attn_scores", "softmax_stats", "attn_output", "scores_dropout",
    "ffn_hidden", "shared_expert",
    "cross_qkv", "cross_attn_scores", "cross_softmax_stats", "cross_attn_output",
    # a short convolution's input u and output z (tfcalc.architecture.short_conv.saved): d/t channels a rank
    "conv",
})
EXPERT_TERMS = frozenset({"ffn_hidden"})  # replicated, not split, when the FFN is a mixture of experts
VOCAB = frozenset({"log_probs", "logit_softcap"})
ONCE = frozenset({"window_mask", "position_bias", "pooler_output"})  # not per token: not sequence-sharded
FIRST_STAGE = frozenset({"embedding_norm", "encoder_embedding_norm", "encoder_final_norm", "encoder_output"})
EVERY_STAGE = frozenset({"window_mask", "position_bias", "cross_memory"})
assert SCORE_TERMS <= SPLIT


def _ceil(n: int, d: int) -> int:
    return -(-n // d)


def share(key: str, value: int, acts: Activations, layout: Layout, moe: Optional[bool] = None) -> int:
    """The bytes of one term (of tfcalc.count.model.activations) that one tensor-parallel rank keeps; ``moe``:
    whether the term's block has a mixture of experts (default: whether any block of the model has)."""
    t, moe = layout.tp, acts.moe if moe is None else moe
    if key in VOCAB or (key in SPLIT and not (moe and key in EXPERT_TERMS)):
        return _ceil(value, t)
    if key in ONCE or not layout.sequence_parallel:
        return value
    return _ceil(value, t)


def layer_bytes(acts: Activations, layout: Layout, terms: dict[str, int], stored: bool = True,
                layer_input: Optional[int] = None) -> int:
    """One layer's terms on one rank, one micro-batch: what is kept (stored) or, with stored=False, the
    whole layer as full recompute rebuilds it. ``layer_input``: the block input's bytes (default: a
    decoder-stack block's)."""
    if stored and layout.recompute in ("full", "op"):
        kept = acts.layer_input if layer_input is None else layer_input
        kept = _ceil(kept, layout.tp if layout.sequence_parallel else 1)
        if layout.recompute == "op":  # and what the policy saves (tfcalc.count.model.op_recompute), shared as they are
            kept += sum(share(key, v, acts, layout, False) for key, v in acts.op_terms[id(terms)].items())
        return kept
    drop = SCORE_TERMS if stored and layout.recompute == "selective" else frozenset()
    moe = "moe_routing" in terms  # a dense layer's FFN hidden tensors are split even when other layers' experts are not
    return sum(share(key, v, acts, layout, moe) for key, v in terms.items() if key not in drop)


def head_parts(acts: Activations, layout: Layout, first: bool, last: bool) -> tuple[int, int, int]:
    """(the first stage's terms, the last stage's, every stage's) of the model's once-per-model terms
    (embedding, head, loss: ``acts.head``), as one rank of a stage that is the first and/or the last holds
    them: for stage_activation_bytes here, and for the search's lower bound
    (tfcalc.count.training.search_bound), which must add the same bytes."""
    out = [0, 0, 0]
    for key, v in acts.head.items():
        where = 2 if key in EVERY_STAGE else 0 if key in FIRST_STAGE else 1
        if where == 2 or (first if where == 0 else last):
            out[where] += share(key, v, acts, layout)
    return out[0], out[1], out[2]


def _head_bytes(acts: Activations, layout: Layout, first: bool, last: bool) -> int:
    return sum(head_parts(acts, layout, first, last))


def _stage_layers(acts: Activations, blocks: range) -> list[tuple[dict[str, int], int, int]]:
    """(terms, count, block input bytes) of each kind of block the stage runs: blocks are numbered over
    the whole model, an encoder-decoder's encoder blocks first, then the output stack's (closed form)."""
    return acts.kinds_in(blocks.start, blocks.stop)


def stage_activation_bytes(acts: Activations, layout: Layout, stage: int, blocks: Union[range, list[range]]) -> int:
    """The activation peak of one rank of pipeline stage ``stage`` holding ``blocks`` (numbered over the
    whole model, encoder first; under the interleaved schedule a range per chunk): stored terms of its
    micro-batches in flight (per chunk: tfcalc.count.perf.pipeline.chunk_micro_batches; the first stage's
    terms with its first chunk, the last stage's with its last), one rebuilt block under full recompute,
    the loss gradients on the last stage (the first rank's under dualpipev: its second chunk is the last)."""
    first, last = stage == 0, stage == head_stage(layout)
    chunks = [blocks] if isinstance(blocks, range) else blocks
    counts = chunk_micro_batches(layout, stage)
    kinds = [_stage_layers(acts, r) for r in chunks]
    stored = sum(c * sum(n * layer_bytes(acts, layout, terms, layer_input=x) for terms, n, x in k)
                 for c, k in zip(counts, kinds, strict=True))
    head_first, head_last, every = head_parts(acts, layout, first, last)
    stored += counts[0] * head_first + counts[-1] * head_last + sum(counts) * every
    rebuilt = 0
    flat = [k for chunk in kinds for k in chunk]
    if layout.recompute in ("full", "op") and flat:  # op: the policy's saved outputs come from its cache
        rebuilt = max(layer_bytes(acts, layout, terms, stored=False) - (sum(
            share(k, v, acts, layout, False) for k, v in acts.op_terms[id(terms)].items())
            if layout.recompute == "op" else 0) for terms, _, _ in flat)
    loss = _ceil(acts.loss_gradients, layout.tp) if last else 0
    return stored + rebuilt + loss


def pipeline_blocks(acts: Activations) -> int:
    """Blocks a pipeline splits: an encoder-decoder's encoder and decoder blocks, else the stack's."""
    return acts.n_encoder_layer + acts.n_layer


def activation_bytes(acts: Activations, layout: Layout) -> int:
    """The largest stage's peak (the rank tfcalc.count.training.rank_memory shows, when states are equal): on
    one GPU, ``acts.total``."""
    return max(stage_activation_bytes(acts, layout, stage,
                                      stage_ranges(pipeline_blocks(acts), layout.pp, stage, layout.virtual_stages,
                                                   layout.stage_split))
               for stage in range(layout.pp))


def micro_batch(layout: Layout, src_seq: Optional[int] = None) -> Workload:
    """One micro-batch of the layout as a workload: a CP rank's s/C positions (tfcalc.count.training.context_parallel);
    an encoder-decoder's src_seq source tokens, default its seq."""
    return Workload(batch=layout.micro_batch, seq=layout.seq // layout.cp, src_seq=src_seq, dtype=layout.dtype)


def training_activations(cfg: ModelConfig, layout: Layout, w: Optional[Workload] = None) -> Activations:
    """The single-device terms of one micro-batch of the layout (its kernel, recompute, dtype, dropout); ``w``,
    when given, the request the layout runs (its source length)."""
    return activations(cfg, micro_batch(layout, w.src_seq if w is not None else None), layout.attention,
                       layout.recompute, layout.dropout)


def korthikanti_bytes(cfg: ModelConfig, batch: int, seq: int) -> int:
    """The paper's figure (Korthikanti et al. 2022, eq. 1), all layers: L · s·b·h·(34 + 5·a·s/h) bytes,
    16-bit, with dropout, scores materialized, h = d_model and a = n_head. Exact integer form."""
    h = cfg.d_model  # the paper's h and a, as published (front-end reads: its formula has one of each)
    return cfg.n_layer * seq * batch * (34 * h + 5 * cfg.n_head * seq)
