"""How a mixture of experts' router picks and weighs a token's experts beyond Mixtral's top-k softmax:
DeepSeek's grouped routing, sigmoid scores, correction bias and routed scaling.

1. scores over the E experts: softmax of the router logits (DeepSeek-V2), or their sigmoid (DeepSeek-V3,
   arXiv 2412.19437, sec. 2.1.2, eq. 15), or sqrt(softplus) (DeepSeek-V4, transformers' ACT2FN "sqrtsoftplus");
2. grouped ("device-limited") routing: the experts are cut into ``n_group`` groups of E / n_group; each
   token keeps the ``topk_group`` best groups and picks its top-k experts among them. A group's score is
   its best expert's (DeepSeek-V2's group_limited_greedy, arXiv 2405.04434, sec. 2.2.2), or with the
   correction bias the sum of its two best (DeepSeek-V3's noaux_tc, modeling_deepseek_v3.py,
   DeepseekV3TopkRouter);
3. the correction bias (V3, sec. 2.1.2, "auxiliary-loss-free load balancing"): one value per expert added
   to the scores for choosing only, never to the weights. transformers keeps it as a buffer
   (``e_score_correction_bias``, nn.Buffer): no parameter, so no part of the parameter count; checkpoints
   store it (E values per MoE layer);
4. the chosen scores, renormalized to sum 1 when the MoE says so (norm_topk_prob), times
   ``scaling`` (routed_scaling_factor: 2.5 in DeepSeek-V3).

No matmul beyond the router's d -> E; the counts see only ``bias_buffer``. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tfcalc.errors import InputError

Scoring = Literal["softmax", "sigmoid", "sqrtsoftplus"]


@dataclass(frozen=True)
class Routing:
    scoring: Scoring = "softmax"
    n_group: int = 1
    topk_group: int = 1
    scaling: float = 1.0
    bias_buffer: bool = False  # the correction bias (step 3)

    def __post_init__(self) -> None:
        if self.scoring not in ("softmax", "sigmoid", "sqrtsoftplus"):
            raise InputError(f"router scoring must be softmax, sigmoid or sqrtsoftplus; got {self.scoring!r}")
        if self.n_group < 1 or self.topk_group < 1 or self.topk_group > self.n_group:
            raise InputError(f"grouped routing keeps topk_group ({self.topk_group}) of n_group ({self.n_group}) "
                             "groups: both at least 1, topk_group at most n_group")
        if not self.scaling > 0:
            raise InputError(f"routed_scaling_factor must be positive; got {self.scaling}")

    @property
    def is_default(self) -> bool:
        """Mixtral's routing (a softmax, one group, no bias, no scaling)."""
        return self == Routing()

    @property
    def group_score(self) -> Literal["max", "top2_sum"]:
        """How a group is scored (step 2): the sum of its two best with the correction bias, else its best."""
        return "top2_sum" if self.bias_buffer else "max"

    def check(self, n_expert: int, top_k: int) -> None:
        """The groups against the experts: whole groups, and enough experts in the groups kept."""
        if n_expert % self.n_group:
            raise InputError(f"n_group ({self.n_group}) must divide the experts ({n_expert}) into equal groups")
        per_group = n_expert // self.n_group
        if self.topk_group * per_group < top_k:
            raise InputError(f"the topk_group ({self.topk_group}) groups kept hold {self.topk_group * per_group} "
                             f"experts, fewer than the {top_k} each token runs")
        if self.group_score == "top2_sum" and self.n_group > 1 and per_group < 2:
            raise InputError("grouped routing with the correction bias scores a group by its two best experts: "
                             "each group needs at least 2")
