"""The mixer protocol (tfcalc.architecture.mixer) of a component that holds a softmax attention (``attention``) and a
Mamba2 mixer (``ssm``) in one slot, where the answer is the union of the two parts': Falcon-H1's attention beside
Mamba2 (tfcalc.architecture.parallel_hybrid) and Zamba2's shared block before its Mamba2
(tfcalc.architecture.zamba2). Written once here; each family adds what it runs between the parts (its names, its
multipliers or its shared block's MLP) in its own module. Pure Python: no torch, typer or rich here."""

from __future__ import annotations

from typing import Optional

from tfcalc.architecture.mixer import Capabilities, EagerOp, Elementwise, StateTensor


class AttentionSsmParts:
    """What such a component answers from its ``attention`` and ``ssm`` alone: the attention's kernel and mask (the
    Mamba2 part has no T×T scores), both parts' non-matmul work, saved activations (summed where they share a
    name), working set, eager ops, generation state (the attention's K and V, which grow with the context, beside
    the Mamba2 part's fixed conv ring and SSM state) and TP widths; the state split by KV head; no rewind (the
    recurrent part holds no earlier position) and no ring over context-parallel ranks."""

    def elementwise(self, queries: int, keys: int, step: bool = False) -> list[Elementwise]:
        return self.attention.elementwise(queries, keys) + self.ssm.elementwise(queries, keys)

    def kernel(self, explicit_mask: bool) -> str:
        return self.attention.kernel(explicit_mask)

    def mask_span(self, length: int) -> tuple[Optional[int], Optional[int]]:
        return self.attention.mask_span(length)

    def saved(self, batch: int, seq: int, e: int, kernel: str, dropout: bool,
              sources: Optional[int] = None) -> dict[str, int]:
        out = dict(self.attention.saved(batch, seq, e, kernel, dropout))
        for term, value in self.ssm.saved(batch, seq, e, kernel, dropout).items():
            out[term] = out.get(term, 0) + value
        return out

    def working_set(self, kernel: str, length: int, sources: Optional[int] = None) -> int:
        """Both parts' at once (the attention's output is alive while the Mamba2 part runs)."""
        return self.attention.working_set(kernel, length) + self.ssm.working_set(kernel, length)

    def eager_ops(self, tokens: int, step: bool = False) -> list[EagerOp]:
        return self.attention.eager_ops(tokens) + self.ssm.eager_ops(tokens)

    def state(self) -> list[StateTensor]:
        return self.attention.state() + self.ssm.state()

    def expanded_state(self) -> list[StateTensor]:
        return self.attention.expanded_state() + self.ssm.expanded_state()

    def tp_widths(self) -> list[tuple[str, int]]:
        return self.attention.tp_widths() + self.ssm.tp_widths()

    def tp_state_heads(self) -> Optional[int]:
        """The growing K and V split by KV head (the Mamba2 state by its heads, which TP divides: tp_widths)."""
        return self.attention.tp_state_heads()

    @property
    def capabilities(self) -> Capabilities:
        # TP planned as Megatron splits attention (by heads) and Mamba2 (by heads and groups)
        return Capabilities(rewind=False, tensor_parallel=True, context_parallel=False, training_kernels="fused",
                            op_recompute=self.ssm.capabilities.op_recompute)
