"""Speculative decoding run for real (``infer MODEL --draft DRAFT --accept-rate A --measure``): greedy, one
sequence, the target's and the draft's static KV caches on the device (tfcalc.model.cache).

A round (Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding", sec. 2.3,
greedy case): the draft proposes K tokens one decode step each; the target runs one forward over its
pending token and the K proposals (Transformer.extend: K + 1 positions against its cache) and takes its
own greedy token at each; the proposals are accepted while they equal the target's, and the round yields
the accepted prefix plus the target's token after it (n + 1 tokens, n accepted of K; the last round
proposes no more than the generation still needs, so no cache runs past its positions). Both caches then
rewind to the positions kept (StaticCache.rewind); a draft that accepted all K lacks its last proposal,
which it reads with the next round's pending token in one two-token step. The output is the target's
greedy output exactly (each token kept is the target's argmax after the tokens before it) -- as the
verify step computes it. In fp32 that is the plain greedy decoding's too; in bf16 and fp16 a verify step
of K + 1 rows and a decode step of one round differently (another GEMM shape, another kernel), and a near
tie of the argmax can flip. So ``exact`` compares against the target's greedy output produced through the
same kernels: each token from a step of the verify's K + 1 rows (the real token first, K pads, rewound),
over the same bucket of the cache (tfcalc.model.cache); every verify step is K + 1 wide, the last round's
padded. Beside it, ``agreement`` (the share of tokens equal) and ``first_divergence`` (the first index
where they differ, None when none), against that reference and against the plain greedy decoding (which
the run also times).

Weights are random (tfcalc runs no checkpoint): each model is built after ``torch.manual_seed(0)``, so a
draft with the target's configuration has the target's weights and accepts every proposal (the built-in
check of the loop), and any other draft accepts about what chance gives (~1/vocabulary). The measured
acceptance is reported as it is; the prediction is recomputed at it beside the measurement.

Timing: each draft forward and each verify forward between two marks of the device clock
(tfcalc.measure.bench.clock_for: CUDA events, or perf_counter after a synchronize); the rounds as a whole
and the plain decoding after its first token on the host clock, synchronized at both ends. A round reads
its acceptance on the host (one synchronize per round), as every speculative server does.

Windows and chunks (Mistral, Gemma 2 and 3, gpt-oss, Llama 4): each ring is allocated with k spare slots,
W + k (tfcalc.model.attention_state), so that a verify step of k + 1 tokens overwrites nothing its queries
read and a rejection rewinds at most k positions; the draft's rings the same (its widest step is two
tokens, its deepest rewind k - 1). The state bytes each cache allocates are reported beside the count's
(``state_bytes``): a plain decode keeps W slots, a speculative run W + k.

Refused before anything is built: a model whose state cannot rewind (a recurrent state: its capability),
ALiBi or T5 position biases, an encoder-decoder; and a run the estimate says will not fit
(tfcalc.measure.fit).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Optional

import torch

from tfcalc.config import ModelConfig
from tfcalc.count.model import memory as count_memory
from tfcalc.errors import InputError
from tfcalc.measure import bench
from tfcalc.measure.device import resolve_device, torch_dtype
from tfcalc.measure.fit import require_fits
from tfcalc.model import Transformer, build_model, next_token
from tfcalc.model.cache import StaticCache, check_decodable
from tfcalc.workload import Workload


@dataclass(frozen=True, kw_only=True)
class SpeculativePlan:
    target: ModelConfig
    draft: ModelConfig
    device: str
    dtype: str
    seq: int  # prompt tokens
    gen: int  # new tokens, the first from the prefill
    k: int  # draft tokens per round
    warmup: int = 1  # untimed rounds and plain steps first

    @property
    def positions(self) -> int:
        """What each cache holds at most: the prompt and the new tokens (the last round proposes no more than
        the generation still needs, so no round writes past them)."""
        return self.seq + self.gen


@dataclass(frozen=True)
class SpeculativeRun:
    tokens: tuple[int, ...]  # the speculative output, gen tokens
    greedy: tuple[int, ...]  # the target's plain greedy output
    rounds: int
    proposed: int  # draft tokens proposed, K per round
    accepted: int
    produced: int  # tokens the rounds yielded (after the prefill's), the last round's overshoot included
    draft_steps: bench.Timing  # seconds per draft forward
    verify_steps: bench.Timing  # seconds per verify forward (K + 1 tokens)
    speculative_s: float  # wall seconds of the rounds
    plain_s: float  # wall seconds of plain decoding's gen - 1 steps
    same_weights: bool  # the draft is the target (its configuration, so its weights)
    reference: tuple[int, ...] = ()  # the target's greedy output through verify-shaped steps (same kernels)
    state_bytes: tuple[int, int] = (0, 0)  # what the target's and the draft's caches allocate (cache.nbytes)

    @property
    def exact(self) -> bool:
        """The output is the target's greedy output as its verify step computes it (see the docstring)."""
        return self.tokens == (self.reference or self.greedy)

    @property
    def agreement(self) -> float:
        """The share of tokens equal to the same-kernel reference's."""
        return _agreement(self.tokens, self.reference or self.greedy)

    @property
    def first_divergence(self) -> Optional[int]:
        """The first index where the output and the same-kernel reference differ; None where they do not."""
        return _first_difference(self.tokens, self.reference or self.greedy)

    @property
    def plain_agreement(self) -> float:
        """The share of tokens equal to the plain greedy decoding's (one-token steps: other kernels)."""
        return _agreement(self.tokens, self.greedy)

    @property
    def plain_first_divergence(self) -> Optional[int]:
        return _first_difference(self.tokens, self.greedy)

    @property
    def accept_rate(self) -> float:
        return self.accepted / self.proposed

    @property
    def tokens_per_round(self) -> float:
        return self.produced / self.rounds

    @property
    def decode_s_per_token(self) -> float:
        return self.speculative_s / self.produced

    @property
    def plain_s_per_token(self) -> float:
        return self.plain_s / max(1, len(self.greedy) - 1)


def _agreement(a: tuple[int, ...], b: tuple[int, ...]) -> float:
    return sum(x == y for x, y in zip(a, b, strict=False)) / max(1, len(a), len(b))  # unequal lengths: unequal


def _first_difference(a: tuple[int, ...], b: tuple[int, ...]) -> Optional[int]:
    same = None if len(a) == len(b) else min(len(a), len(b))
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), same)


def check_speculative(cfg: ModelConfig, role: str) -> None:
    """What a measured round needs of a model: a decoder whose cache rewinds, without position biases."""
    if cfg.arch != "decoder" or cfg.cross_attention:
        raise InputError(f"--draft --measure: {role} {cfg.name} is not a decoder-only model; speculative rounds are "
                         "run for decoder-only models")
    if cfg.pos_encoding in ("alibi", "relative"):
        raise InputError(f"--draft --measure: {role} {cfg.name} has {cfg.pos_encoding} position biases; a verify "
                         "step over several tokens is not built for them")
    layers = list(cfg.architecture.output.layers())
    if any(not b.mixer.capabilities.rewind for b in layers):  # declared by the mixer (tfcalc.architecture.mixer)
        raise InputError(f"--draft --measure: {role} {cfg.name} has layers whose state cannot rewind (a recurrent "
                         "state overwrites what a rejected proposal would return to)")


def state_bytes(plan: SpeculativePlan) -> tuple[int, int]:
    """The target's and the draft's generation state as their caches allocate it (the count's fold,
    tfcalc.count.model.memory.kv_cache_bytes): the target's at plan.positions and the verify's padding, the
    draft's at plan.positions, each ring with k spare slots (the module docstring)."""
    room = pad_room(plan.target, plan.positions, plan.k)  # the verify's padding
    return (count_memory.kv_cache_bytes(plan.target, Workload(batch=1, seq=plan.positions + room, dtype=plan.dtype),
                                        spare=plan.k),
            count_memory.kv_cache_bytes(plan.draft, Workload(batch=1, seq=plan.positions, dtype=plan.dtype),
                                        spare=plan.k))


def estimate_bytes(plan: SpeculativePlan) -> int:
    """Both models' weights (one copy when the draft is the target), both caches (``state_bytes``), and the
    larger prefill working set."""
    models = (plan.target,) if plan.draft == plan.target else (plan.target, plan.draft)
    total = sum(count_memory.weights_bytes(cfg, plan.dtype) for cfg in models) + sum(state_bytes(plan))
    return total + max(count_memory.forward_working_set(cfg, Workload(batch=1, seq=plan.seq, dtype=plan.dtype))
                       for cfg in models)


def check_plan(plan: SpeculativePlan) -> None:
    """Every refusal that needs no device."""
    torch_dtype(plan.dtype)
    for cfg, role in ((plan.target, "the target"), (plan.draft, "the draft")):
        check_speculative(cfg, role)
        check_decodable(cfg, plan.positions)


def require_fit(plan: SpeculativePlan) -> None:
    """Refused, before anything is allocated, when both models and caches do not fit (tfcalc.measure.fit)."""
    require_fits(estimate_bytes(plan), plan.device,
                 f"speculative decoding of {plan.target.name} with draft {plan.draft.name} ({plan.seq} + {plan.gen} "
                 f"tokens, {plan.dtype})", "a smaller --seq or --gen")


class _Rounds:
    """The round loop of the module docstring, on one target and one draft with their caches."""

    def __init__(self, target: Transformer, draft: Transformer, k: int, positions: int, clock):
        self.target, self.draft, self.k, self.clock = target, draft, k, clock
        # up to k more positions: the last round's verify padded to k + 1 rows too (the same kernels every round);
        # k spare slots in each ring: a verify of k + 1 tokens, a rewind of k (tfcalc.model.attention_state)
        self.tc = target.new_cache(1, positions + pad_room(target.cfg, positions, k), spare=k)
        self.dc = draft.new_cache(1, positions, spare=k)
        self.draft_marks: list[tuple] = []
        self.verify_marks: list[tuple] = []
        self.rounds = self.proposed = self.accepted = 0

    def start(self, prompt: torch.Tensor) -> list[int]:
        """Prefill both; the sequence so far (prompt and the first token, pending in both caches)."""
        first = next_token(self.target.prefill(prompt, self.tc))
        self.draft.prefill(prompt, self.dc)
        return prompt[0].tolist() + first[0].tolist()

    def _timed(self, marks: list, fn: Callable[[], torch.Tensor]) -> torch.Tensor:
        start = self.clock.mark()
        out = fn()
        marks.append((start, self.clock.mark()))
        return out

    def round(self, seq: list[int], k: int) -> list[int]:
        """One round of k proposals after the sequence seq (its last token pending): the tokens it yields."""
        device = self.tc.k[0].device
        catch = torch.tensor([seq[self.dc.length:]], device=device)  # (1, n): what the draft has not read
        proposals = [catch[:, :0]]  # (1, 0): none yet
        for _ in range(k):
            step = self.draft.extend if catch.shape[1] > 1 else self.draft.decode
            catch = next_token(self._timed(self.draft_marks, lambda f=step, x=catch: f(x, self.dc)))  # (1, 1)
            proposals.append(catch)
        drafted = torch.cat(proposals, dim=1)  # (1, K)
        room = self.tc.max_tokens - (self.tc.length + k + 1)
        pad = drafted.new_zeros(1, min(self.k - k, room))  # the last round's verify padded to k + 1 rows
        verify_in = torch.cat([torch.tensor([[seq[-1]]], device=device), drafted, pad], dim=1)  # (1, k + 1)
        logits = self._timed(self.verify_marks, lambda: self.target.extend(verify_in, self.tc))  # (1, k + 1, V)
        greedy, drafted_ids = logits[0, :k + 1].argmax(dim=-1).tolist(), drafted[0].tolist()  # the round's sync
        n = 0
        while n < k and drafted_ids[n] == greedy[n]:
            n += 1
        kept = len(seq) + n  # positions 0 .. kept - 1 are final; greedy[n] is the new pending token
        self.tc.rewind(kept)
        if self.dc.length > kept:
            self.dc.rewind(kept)
        self.rounds, self.proposed, self.accepted = self.rounds + 1, self.proposed + k, self.accepted + n
        return drafted_ids[:n] + [greedy[n]]


def _speculate(target: Transformer, draft: Transformer, prompt: torch.Tensor, plan: SpeculativePlan, clock,
               on_call: Optional[Callable[[], None]] = None) -> tuple[list[int], _Rounds, float]:
    """The speculative output's new tokens (at least plan.gen), the loop's counts and marks, and the wall
    seconds of its rounds."""
    loop = _Rounds(target, draft, plan.k, plan.positions, clock)
    seq = loop.start(prompt)
    host = bench.HostClock(prompt.device)
    begin = host.mark()
    while len(seq) - plan.seq < plan.gen:
        seq += loop.round(seq, min(plan.k, plan.gen - (len(seq) - plan.seq) - 1))  # no token past plan.gen
        if on_call:
            on_call()
    return seq[plan.seq:], loop, host.seconds(begin, host.mark())


def _plain(target: Transformer, prompt: torch.Tensor, gen: int,
           on_call: Optional[Callable[[], None]] = None) -> tuple[list[int], float]:
    """The target's greedy tokens, one decode step each, and the wall seconds of the steps after the first."""
    cache: StaticCache = target.new_cache(1, prompt.shape[1] + gen)
    token = next_token(target.prefill(prompt, cache))
    out = [token]
    host = bench.HostClock(prompt.device)
    begin = host.mark()
    for _ in range(gen - 1):
        token = next_token(target.decode(token, cache))
        out.append(token)
        if on_call:
            on_call()
    seconds = host.seconds(begin, host.mark())
    return torch.cat(out, dim=1)[0].tolist(), seconds


def pad_room(cfg: ModelConfig, positions: int, k: int) -> int:
    """Positions past ``positions`` a verify step may pad into: k, or fewer where the model's position
    table ends (there the last rounds' steps are narrower, and may round otherwise in bf16)."""
    limit = cfg.max_seq_len if cfg.pos_encoding in ("learned", "rope", "sinusoidal") else positions + k
    return max(0, min(k, limit - positions))


def same_kernel_greedy(target: Transformer, prompt: torch.Tensor, gen: int, k: int) -> list[int]:
    """The target's greedy tokens, each from a step of k + 1 rows as a verify step runs them (the real token
    first, then k pads whose positions are rewound), over a cache of the rounds' size, so the same buckets:
    the same kernels as the speculative rounds' verify steps, so the same rounding (module docstring)."""
    positions = prompt.shape[1] + gen
    cache = target.new_cache(1, positions + pad_room(target.cfg, positions, k), spare=k)
    token = next_token(target.prefill(prompt, cache))
    out = [token]
    for _ in range(gen - 1):
        kept = cache.length + 1
        pads = token.new_zeros(1, min(k, cache.max_tokens - kept))
        token = next_token(target.extend(torch.cat([token, pads], dim=1), cache)[:, :1])
        cache.rewind(kept)
        out.append(token)
    return torch.cat(out, dim=1)[0].tolist()


def calls(plan: SpeculativePlan) -> int:
    """Progress calls: the plain steps and at most one round per token."""
    return 2 * (plan.gen - 1)


def run_speculative(plan: SpeculativePlan, on_call: Optional[Callable[[], None]] = None) -> SpeculativeRun:
    """Refuse what cannot run or fit, build both models, warm up, then the plain and the speculative run."""
    check_plan(plan)
    require_fit(plan)
    dev, dtype = resolve_device(plan.device).torch(), torch_dtype(plan.dtype)
    torch.manual_seed(0)
    target = build_model(plan.target, dev, dtype).eval()
    same = plan.draft == plan.target
    if not same:
        torch.manual_seed(0)  # as the target's: a draft of the same configuration would have its weights
    draft = target if same else build_model(plan.draft, dev, dtype).eval()
    prompt = torch.randint(0, plan.target.vocab_size, (1, plan.seq), device=dev,
                           generator=torch.Generator(device=dev).manual_seed(1))
    clock = bench.clock_for(dev)
    with torch.inference_mode():
        if plan.warmup:  # kernels chosen and caches allocated for every shape the timed runs take
            _plain(target, prompt, min(plan.gen, 3))
            _speculate(target, draft, prompt, replace(plan, gen=min(plan.gen, 2)), bench.HostClock(dev))
        greedy, plain_s = _plain(target, prompt, plan.gen, on_call)
        tokens, loop, spec_s = _speculate(target, draft, prompt, plan, clock, on_call)
        reference = same_kernel_greedy(target, prompt, plan.gen, plan.k)
    clock.sync()
    return SpeculativeRun(
        tuple(tokens[:plan.gen]), tuple(greedy), loop.rounds, loop.proposed, loop.accepted, len(tokens) - 1,
        bench.Timing(tuple(clock.seconds(a, b) for a, b in loop.draft_marks)),
        bench.Timing(tuple(clock.seconds(a, b) for a, b in loop.verify_marks)), spec_s, plain_s, same,
        tuple(reference), (loop.tc.nbytes, loop.dc.nbytes))
