"""`tfcalc memory` as a document: weights, KV cache, training state and activations, the measured peak,
and the fit against a budget."""

from __future__ import annotations

from tfcalc import units
from tfcalc.cli.render.doc import Column, Doc, Table
from tfcalc.report.memory import MemoryReport

ACTIVATION_LABELS = {
    "lora_adapters": "LoRA: each adapter's A·x", "lora_frozen": "LoRA: inputs frozen weights no longer keep",
    "attn_norm": "attention norm (input; stats)", "qkv_input": "QKV input", "qkv": "Q, K, V",
    "rope_qk": "rotated Q, K (RoPE)", "attn_scores": "softmax scores (s²)", "softmax_stats": "log-sum-exp (fp32)",
    "attn_output": "attention output", "ffn_norm": "FFN norm (input; stats)", "ffn_input": "FFN input",
    "ffn_hidden": "FFN hidden", "dropout": "dropout masks", "final_norm": "final norm",
    "lm_head_input": "LM-head input", "log_probs": "log-probs (fp32)",
    "moe_routing": "MoE: routed inputs, outputs, weights", "cross_attn_norm": "cross-attention norm (input; stats)",
    "cross_q_input": "cross-attention Q input", "cross_qkv": "cross-attention Q; K, V of the source",
    "cross_attn_scores": "cross-attention softmax (T×S)", "cross_softmax_stats": "cross-attention log-sum-exp",
    "cross_attn_output": "cross-attention output",
    "qk_norm": "Q/K norms (per head)", "attn_post_norm": "attention output norm (sandwich)",
    "ffn_post_norm": "FFN output norm (sandwich)", "cross_attn_post_norm": "cross-attention output norm (sandwich)",
    "shared_expert": "MoE: shared expert (hidden, gate)",
    "conv": "short conv: input u, output z (per channel)",
    "ssm_x_proj": "Mamba-1 x_proj out [dt | B | C] (whole per TP rank)",
}


STATE_NOTES = {"sgd": "none (plain SGD)", "muon": "Muon momentum (fp32, hidden matrices); AdamW m, v (the rest)"}


def _inference_rows(t: Table, r: MemoryReport) -> None:
    cfg = r.cfg
    heads = f"{cfg.kv_heads} KV heads of {cfg.n_head}" + (" (GQA)" if 1 < cfg.kv_heads < cfg.n_head else
                                                          " (MQA)" if cfg.kv_heads == 1 < cfg.n_head else "")
    if r.weight_parts is None:
        t.add("Weights", r.weights, f"{r.params:,} params × {r.dtype}")
    else:
        rest = "attention, router, biases, embeddings, norms, head" if "mxfp4_experts" in r.weight_parts else \
            "embeddings, norms, head"
        stored = cfg.stored_quant if cfg.stored_quant and not r.weight_format.quantized else None
        if stored:  # a quantized checkpoint, counted as stored (tfcalc.count.model.quant_stored)
            rest = "embeddings, norms, routers, biases and the matrices it keeps"
        t.add("Weights", r.weights, f"{r.params:,} params, {r.weight_label}")
        quantized = f"block matrices in {stored}, as stored" if stored else f"block matrices in {r.dtype}"
        for key, label in (("quantized", quantized), ("scales", "scales"),
                           ("zero_points", "zero points"),
                           ("mxfp4_experts", "routed experts' matrices, MXFP4 values (4 bits, as stored)"),
                           ("mxfp4_scales", "  their scales (8 bits per 32 values)"),
                           ("unquantized", f"the rest ({rest}) in {r.dtype}")):
            if r.weight_parts.get(key):
                t.add(f"  {label}", r.weight_parts[key], None)
    if cfg.arch == "encoder":
        t.add("KV cache", r.kv_cache, "none: an encoder generates no tokens")
    else:
        window = f"; a sliding window of {cfg.sliding_window:,}" if cfg.sliding_window else (
            f"; chunks of {cfg.attention_chunk_size:,}" if cfg.attention_chunk_size else "")
        if _hybrid(r):
            _hybrid_rows(t, r, heads, window)
        elif r.kv_cache_expanded is None:
            t.add("KV cache", r.kv_cache, f"2·B·T·L·n_kv·d_head in {r.kv_dtype}; {heads}{window}")
        else:  # DeepSeek's latent attention (tfcalc.architecture.latent)
            index = " + d_index" if cfg.index_topk is not None else ""  # DSA's indexer keys beside the latent
            what = "latent (MLA) and indexer keys (DSA)" if index else "latent (MLA)"
            t.add(f"KV cache, {what}", r.kv_cache, f"B·T·L·(c_kv + d_rope{index}) in {r.kv_dtype}, as cached")
            t.add("  as expanded K and V", r.kv_cache_expanded, f"B·T·L·(n_head·(d_qk + d_v){index}), without MLA")
    if r.cross_kv_cache:
        t.add("  of which cross-attention", r.cross_kv_cache, f"2·B·S·L·n_kv·d_head, S = {r.src_seq:,}")
    t.add("Forward working set", r.working_set, "no-grad pass, largest stage, no cache")
    t.add("Inference: weights + KV cache", r.inference_bytes, None, style="bold")


def _hybrid(r: MemoryReport) -> bool:
    """A decoder some of whose layers keep a state that does not grow with the tokens, or no K/V at all."""
    s = r.split
    return s is not None and (s.fixed > 0 or s.growing_layers < s.layers)


def _hybrid_rows(t: Table, r: MemoryReport, heads: str, window: str) -> None:
    """The state split (tfcalc.count.model.memory.StateSplit): the K/V that grows with T, in the layers that keep
    it, and the fixed state each sequence holds, tensor by tensor in its own dtype."""
    s = r.split
    t.add("Generation state (KV cache + fixed)", r.kv_cache,
          f"grows with T in {s.growing_layers} of {s.layers} layers; the rest fixed per sequence")
    if s.growing_layers and s.strides:  # DeepSeek-V4: a window of raw K=V and an entry per m tokens
        every = " or ".join(f"{m:,}" for m in s.strides)
        t.add("  K, V: grows with tokens", s.growing,
              f"the window's K=V and a compressed entry (and index key) per {every} tokens, in {r.kv_dtype}, "
              f"in {s.growing_layers} layers of {s.layers}; {heads}{window}")
    elif s.growing_layers:
        t.add("  K, V: grows with tokens", s.growing,
              f"2·B·T·L_kv·n_kv·d_head in {r.kv_dtype}, L_kv = {s.growing_layers} attention layers of {s.layers}; "
              f"{heads}{window}")
    parts = ", ".join(f"{name} {units.nbytes(nbytes)} in {dtype}" for name, (dtype, nbytes) in s.fixed_parts.items())
    fixed_layers = s.layers - s.growing_layers
    where = f"{fixed_layers} layers" if fixed_layers else "beside the growing state"  # DeepSeek-V4: in every layer
    t.add("  fixed state: per sequence", s.fixed, f"B · {where}, the same at any T: {parts}" if parts else "none")


def _training_rows(t: Table, r: MemoryReport, verbose: bool) -> None:
    a, s = r.activations, r.state
    if a is None or s is None:
        t.add(f"Training: not modelled for {r.dtype} (an inference format)", None, None, style="dim", rule=True)
        return
    if r.lora is not None:
        o = r.options.lora
        if o.base_dtype:
            t.add("QLoRA frozen base", r.lora.base_bytes, "block linears NF4, double-quantized (4.127 bits); the "
                  f"rest in {r.dtype}", rule=True)
        t.add("LoRA adapters (trained)", r.lora.adapter_bytes, f"{r.lora.params:,} params: rank {o.rank} on "
              f"{', '.join(o.targets)}; the base frozen (no gradients, no optimizer state)", rule=not o.base_dtype)
    t.add("Gradients", s.gradients, f"in {r.dtype}" + (", the adapters'" if r.lora is not None else ""),
          rule=r.lora is None)
    if s.master_weights:
        t.add("Master weights", s.master_weights, "fp32")
    t.add("Optimizer state", s.optimizer_state, STATE_NOTES.get(s.optimizer, "Adam moments m, v"))
    stack, role = "decoder " if a.n_encoder_layer else "", r.layer_role
    # a layer of another mixer (a Mamba2 layer, the commonest of a hybrid): its terms under its own labels
    labels = ACTIVATION_LABELS if role is None else {
        **ACTIVATION_LABELS, "attn_norm": f"{role.noun} norm (input; stats)", "qkv_input": f"{role.noun} input",
        **dict(role.terms)}
    kind = f" ({role.noun} layer)" if role is not None else ""
    t.add(f"Activations kept, per {stack}layer{kind}", a.layer, f"{a.attention} attention")
    for key, n in a.per_layer.items() if verbose else ():
        if n:
            t.add(f"  {labels.get(key, key)}", n, None)
    if a.n_encoder_layer:
        t.add("Activations kept, per encoder layer", a.encoder_layer, f"S = {r.src_seq:,}")
    t.add("Activations kept, all layers + head", a.stored,
          f"recompute {a.recompute}" + (": block inputs only" if a.recompute == "full" else ""))
    if r.lora is not None and "qlora_dequantized" in a.head:
        t.add("  QLoRA: a dequantized weight", a.head["qlora_dequantized"], f"the largest linear's, in {r.dtype}")
    for key in ("lora_first_block", "lora_head") if r.lora is not None else ():
        t.add(f"  LoRA: {'first block, frozen prefix' if key == 'lora_first_block' else 'frozen head'}",
              a.head[key], "ahead of the first adapter: no gradient" if key == "lora_first_block"
              else "LM head's input, final norm's x̂")
    if a.recompute_extra:
        t.add("  + one block rebuilt in backward", a.recompute_extra, None)
    t.add("  + loss gradients at backward start", a.loss_gradients, "fp32 log-probs and logits")
    t.add("Activation peak", a.total, None, style="bold")
    t.add("  Korthikanti et al. 2022, eq. 1", r.korthikanti, "L·sbh(34 + 5as/h), 16-bit, no flash")
    if s.step_temporaries > a.total:
        t.add("Optimizer step temporaries", s.step_temporaries, "exceed the activations: set the peak")
    t.add(f"Training total ({s.optimizer})", r.training_bytes, f"{s.bytes_per_param:.4g} bytes/param + activations",
          style="bold")


def _measured_rows(t: Table, r: MemoryReport) -> None:
    m, a = r.measured, r.activations
    t.add(f"Estimate of this run ({'training step' if r.training else 'forward pass'})", r.run_estimate, None,
          rule=True)
    t.add(f"Measured peak on {m.device}", m.peak_bytes, f"{r.ratio:.3f} × estimate; {m.method}", style="bold")
    if m.saved_activation_bytes is not None and a is not None:
        t.add("Activations saved by autograd, measured", m.saved_activation_bytes,
              f"{m.saved_activation_bytes / a.stored:.4f} × estimate")


def _fit_rows(t: Table, r: MemoryReport) -> None:
    fit, target = r.fit, ("training state + activations" if r.training else "weights + KV cache")
    verdict = "fits" if r.fits else "does not fit"
    t.add(f"Budget: {target}: batch {r.batch}, seq {r.seq:,} {verdict}", fit.budget, None,
          style="bold" if r.fits else "bold red", rule=True)
    if not fit.weights_fit:
        what = "the training state" if r.training else "the weights"
        t.add(f"  {what} alone do not fit", fit.fixed_bytes, None, style="red")
        return
    beyond = f" (past the context, {r.cfg.max_seq_len:,})" if fit.max_seq > r.cfg.max_seq_len else ""
    capped = " (the search stops there: this budget holds more than any run)"
    seq_text = f"{fit.max_seq:,} tokens{beyond}" if fit.max_seq else "0: not even 1 token"
    batch_text = f"{fit.max_batch:,}" if fit.max_batch else "0: not even batch 1"  # the JSON's max_batch, 0
    if fit.seq_capped:
        seq_text = f"at least {fit.max_seq:,} tokens{capped}"
    if fit.batch_capped:
        batch_text = f"at least {fit.max_batch:,}{capped}"
    # the answers sit in the row's label, the one column never hidden
    t.add(f"  largest context at batch {r.batch}: {seq_text}", None, None)
    t.add(f"  largest batch at seq {r.seq:,}: {batch_text}", None, None)
    if not r.training and _hybrid(r):  # what the search adds per sequence: the fixed state once, K/V per token
        per_seq = r.split.fixed // r.batch
        t.add(f"  each sequence: {units.nbytes(per_seq)} of fixed state once, then K/V per token", None, None)


def _one(doc: Doc, r: MemoryReport, verbose: bool) -> None:
    quantized = r.cfg.stored_quant and not r.weight_format.quantized  # a quantized checkpoint, counted as stored
    stored = f" (weights {r.cfg.stored_quant} as stored)" if quantized else ""
    title = f"{r.model.label}: memory in {r.dtype}{stored}, batch {r.batch}, seq {r.seq:,}"
    t = doc.table(title, Column("Memory"), Column("Bytes", "bytes"), Column("How", priority=1),
                  caption="KiB, MiB, GiB = 2¹⁰, 2²⁰, 2³⁰ bytes; --exact for whole bytes", name="memory")
    _inference_rows(t, r)
    _training_rows(t, r, verbose)
    if r.measured is not None:
        _measured_rows(t, r)
    if r.fit is not None:
        _fit_rows(t, r)


def document(reports: list[MemoryReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for r in reports:
        doc.separate()
        _one(doc, r, verbose)
    if not verbose and any(r.activations is not None for r in reports):
        doc.note("Activations tensor by tensor: --verbose.", "dim")
    if len(reports) > 1:
        doc.separate()
        t = doc.table("Summary", Column("Model"), Column("Weights", "bytes"), Column("KV cache", "bytes"),
                      Column("Activations", "bytes"), Column("Training", "bytes"),
                      Column("Measured", "bytes", priority=1), name="summary")
        for r in reports:
            t.add(r.model.label, r.weights, r.kv_cache, r.activations and r.activations.total, r.training_bytes,
                  r.measured and r.measured.peak_bytes)
    return doc

