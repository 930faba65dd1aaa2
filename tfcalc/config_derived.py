"""Sizes a ModelConfig derives from its fields (depths per stack, biases, expert counts, rotary width):
properties of a mixin, so each is computed from the fields on every read and can never go stale. Kept
apart from tfcalc.config, which holds the fields. Pure Python: no torch, typer or rich here."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Optional

from tfcalc.config_rules import REL_POS_BUCKETS, REL_POS_MAX_DISTANCE


class DerivedSizes:
    """Mixed into ModelConfig (a frozen dataclass): reads its fields by attribute."""

    @property
    def encoder_layers(self) -> int:
        """Depth of the bidirectional stack: 0 for a decoder, n_layer for an encoder."""
        if self.arch == "encoder-decoder":
            return self.n_encoder_layer if self.n_encoder_layer is not None else self.n_layer
        return self.n_layer if self.arch == "encoder" else 0

    @property
    def decoder_layers(self) -> int:
        """Depth of the causal stack: 0 for an encoder."""
        return 0 if self.arch == "encoder" else self.n_layer

    @property
    def cross_attention_layers(self) -> int:
        """Blocks with cross-attention: an encoder-decoder's decoder, or a stack with cross_attention."""
        return self.n_layer if self.arch == "encoder-decoder" or self.cross_attention else 0

    @property
    def norm_has_bias(self) -> bool:
        """Whether the norms have a bias: norm_bias where given, else as the norm defines it: a LayerNorm
        has one (Ba et al. 2016, its gain and bias), an RMSNorm none (Zhang & Sennrich 2019, eq. 4: a gain
        only). So `norm: rmsnorm` alone is a whole config, and `--set norm=rmsnorm` needs no second key."""
        return self.norm != "rmsnorm" if self.norm_bias is None else self.norm_bias

    @property
    def o_bias(self) -> bool:
        """Whether the attention output projection has a bias (attn_out_bias, else attn_bias)."""
        return self.attn_bias if self.attn_out_bias is None else self.attn_out_bias

    def expert_capacity(self, tokens: int) -> Optional[int]:
        """Rows each expert's buffer holds for a batch of ``tokens`` tokens: ceil(factor · k · tokens / E)
        (Switch Transformers, eq. 3, with k experts per token as GShard routes); None when dropless."""
        if self.expert_capacity_factor is None:
            return None
        factor = Fraction(str(self.expert_capacity_factor))  # 1.25 exactly, not its binary neighbour
        return math.ceil(factor * self.experts_active * tokens / self.experts)

    @property
    def rope_dim(self) -> int:
        """Channels of each head that RoPE rotates: int(d_head · rope_fraction) (GPT-NeoX's rotary_ndims)."""
        if self.kv_lora_rank is not None:
            return self.qk_rope_head_dim
        return int(self.head_dim * self.rope_fraction) if self.pos_encoding == "rope" else 0

    @property
    def rel_buckets(self) -> int:
        return self.rel_pos_buckets if self.rel_pos_buckets is not None else REL_POS_BUCKETS

    @property
    def rel_max_distance(self) -> int:
        return self.rel_pos_max_distance if self.rel_pos_max_distance is not None else REL_POS_MAX_DISTANCE

    @property
    def norms_per_block(self) -> int:
        """Norms around attention and FFN: 2; sandwich 4; a parallel block with one shared norm 1."""
        if self.parallel_block == "shared_norm":
            return 1
        return 4 if self.norm_placement == "sandwich" else 2  # output (OLMo 2): attention's and FFN's

    @property
    def experts(self) -> int:
        """FFNs per block: 1 when dense."""
        return self.n_expert or 1

    @property
    def experts_active(self) -> int:
        """FFNs each token runs per block: 1 when dense."""
        return self.n_expert_active or 1
