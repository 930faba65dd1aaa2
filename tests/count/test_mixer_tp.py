"""The new mixers under tensor parallelism in `plan --tp`: each splits by its heads, groups or channels as Megatron-LM
and vLLM split it, and a degree that does not divide them is refused in one line naming the width.

References, per mixer (what one of t ranks holds; by hand below from each preset's published sizes):
- gated DeltaNet (vLLM's Qwen3NextGatedDeltaNet: num_k_heads // tp and num_v_heads // tp, in_proj_qkvz and in_proj_ba
  column-parallel, the convolution by channel, dt_bias and A_log by value head, out_proj row-parallel; the gated
  norm's weight, one head wide, replicated);
- Kimi Delta Attention (vLLM's KimiDeltaAttention: q, k, v, f_b, g_b, b column-parallel, the decay's and gate's
  bottlenecks f_a, g_a replicated, A_log by head, dt_bias by channel, o row-parallel);
- lightning attention (vLLM's MiniMaxText01LinearAttention: tp_heads = total_num_heads // tp);
- Mamba2 (Megatron-LM's megatron/core/ssm/mamba_mixer.py: "nheads must be evenly divisble by tp_size", "ngroups must
  be evenly divisible by tp_size"; in_proj's [z | x | B | C | dt] each split, the convolution, dt_bias, A_log, D and
  the gated norm's weight by rank, out_proj row-parallel);
- Mamba-1 (vLLM's MambaMixer: in_proj column-, x_proj and out_proj row-parallel, the convolution, dt_proj, A_log and D
  by channel);
- LFM2's short convolution (vLLM's ShortConv: in_proj [B | C | x] column-, out_proj row-parallel, the kernel by
  channel);
- DeepSeek-V3.2's lightning indexer (vLLM's deepseek_v2.py Indexer: wq_b, wk and weights_proj ReplicatedLinear, "no
  tensor parallel, just replicated"), beside MLA's per-head W_qb, W_kvb and W_o."""

from __future__ import annotations

import pytest
from conftest import assert_one_line_error

from tfcalc.count.training.shard import tp_local_shape, unit
from tfcalc.presets import load

# llama2-7b's widths as lightning layers (tests/test_minimax.py)
LIGHTNING = ["layer_pattern=(lightning*3, full)*8", "lightning_block_size=128"]


def _mixer_rank_elements(name: str, kind: str, tp: int, overrides=()) -> tuple[int, int]:
    """(elements of one ``kind`` layer's mixer tensors on TP rank 0, all of them): the block's input norm aside."""
    cfg = load(name, list(overrides))
    stack, block = next((s, b) for s, b, _ in cfg.architecture.kinds() if type(b.mixer).__name__ == kind)
    tensors = [t for t in unit(stack, block) if t.name.startswith("attn_")]
    assert (tensors[0].name, tensors[0].tp_split) == ("attn_norm_weight", None)  # the block's input norm: aside
    tensors = tensors[1:]
    local = sum(_numel(tp_local_shape(t, tp)) for t in tensors)
    return local, sum(t.numel for t in tensors)


def _numel(shape) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def test_gated_deltanet_splits_by_key_and_value_heads():
    """Qwen3-Next-80B-A3B (d 2048, 16 key heads and 32 value heads of 128, K 4): per rank at TP 2, 8 key and 16 value
    heads' [q | k | v | z] rows (2048 + 2048 + 4096 + 4096) / 2 of in_proj_qkvz, their β and decay rows 2·32 / 2,
    their channels of the convolution (2048 + 2048 + 4096) / 2 × 4, dt_bias and A_log 16 each, out_proj's 4096 / 2
    columns; the gated norm's 128 weights whole."""
    d, rows = 2048, 2048 + 2048 + 4096
    by_hand = (rows + 4096) // 2 * d + 64 // 2 * d + rows // 2 * 4 + 16 + 16 + 128 + d * 4096 // 2
    local, whole = _mixer_rank_elements("qwen3-next-80b-a3b", "GatedDeltaNet", 2)
    assert local == by_hand and whole - local == by_hand - 128


def test_kimi_delta_attention_splits_by_heads_its_bottlenecks_whole():
    """Kimi-Linear-48B-A3B (d 2304, 32 heads of 128, K 4, bottlenecks 128): per rank at TP 2, q, k, v 3 × 2048 rows,
    their convolutions 3 × 2048 × 4, f_b and g_b 2048 × 128 each, dt_bias 2048, A_log 16, b 16 rows, o's 2048
    columns; f_a and g_a (128 × 2304 each) and the norm's 128 whole."""
    d = 2304
    split = 3 * 2048 * d + 3 * 2048 * 4 + 2 * 2048 * 128 + 2048 + 16 + 16 * d + d * 2048
    local, _ = _mixer_rank_elements("kimi-linear-48b-a3b", "KimiDeltaAttention", 2)
    assert local == split + 2 * 128 * d + 128


def test_lightning_attention_splits_by_heads():
    """llama2-7b's widths as lightning layers (32 heads of 128, d 4096): per rank at TP 2, 16 heads' Q, K, V and gate
    rows 4 × 2048 × 4096, the output norm's 2048 channels and out_proj's 2048 columns."""
    d = 4096
    local, whole = _mixer_rank_elements("llama2-7b", "Lightning", 2, LIGHTNING)
    assert local == 4 * 2048 * d + 2048 + d * 2048 and 2 * local == whole


def test_mamba2_splits_by_heads_and_groups():
    """Nemotron-3-Nano-30B-A3B (d 2688, 64 heads of 64, 8 groups of state 128, K 4): per rank at TP 2 in_proj's
    [z | x | B | C | dt] halves (4096 + 4096 + 1024 + 1024 + 64) / 2 rows, the convolution's x, B, C channels
    (4096 + 2048) / 2 with bias, dt_bias, A_log, D 32 each, the gated norm's 2048, out_proj's 2048 columns."""
    d = 2688
    by_hand = 5152 * d + 3072 * 4 + 3072 + 3 * 32 + 2048 + d * 2048
    local, whole = _mixer_rank_elements("nemotron-3-nano-30b-a3b", "Mamba2", 2)
    assert local == by_hand and 2 * local == whole


def test_mamba1_splits_by_channels_its_x_proj_rows_whole():
    """Falcon-Mamba-7B (d 4096, I 8192, R 256, N 16, K 4): per rank at TP 2 in_proj 8192 rows, the convolution and
    its bias 4096 channels, x_proj's 4096 columns of its 288 rows ([dt | B | C] summed over the ranks), dt_proj's and
    its bias's 4096 rows, A_log 4096 × 16, D 4096, out_proj's 4096 columns."""
    d = 4096
    by_hand = 8192 * d + 4096 * 4 + 4096 + 288 * 4096 + 4096 * 256 + 4096 + 4096 * 16 + 4096 + d * 4096
    local, whole = _mixer_rank_elements("falcon-mamba-7b", "Mamba1", 2)
    assert local == by_hand and 2 * local == whole


def test_short_conv_splits_by_channels():
    """LFM2-1.2B (d 2048, K 3): per rank at TP 2 in_proj's [B | C | x] 3 × 1024 rows, the kernel's 1024 channels,
    out_proj's 1024 columns."""
    d = 2048
    local, whole = _mixer_rank_elements("lfm2-1.2b", "ShortConv", 2)
    assert local == 3 * 1024 * d + 1024 * 3 + d * 1024 and 2 * local == whole


def test_dsa_indexer_is_replicated_beside_mlas_heads():
    """DeepSeek-V3.2 (d 7168, 128 heads, c_q 1536, c 512; indexer 64 heads of 128): per rank at TP 2 W_qb's and
    W_kvb's rows and W_o's columns halved (64 heads), the compressions and their norms whole, and the whole indexer:
    wq_b 8192 × 1536, wk 128 × 7168, its K LayerNorm 2 × 128, weights_proj 64 × 7168."""
    d = 7168
    heads = 24576 * 1536 // 2 + 32768 * 512 // 2 + d * 16384 // 2
    compressions = 1536 * d + 1536 + 576 * d + 512
    indexer = 8192 * 1536 + 128 * d + 2 * 128 + 64 * d
    local, _ = _mixer_rank_elements("deepseek-v3.2", "SparseLatentAttention", 2)
    assert local == heads + compressions + indexer


@pytest.mark.parametrize("name, tp, overrides, width", [
    ("qwen3-next-80b-a3b", 3, [], "linear_key_heads (16)"),
    ("kimi-linear-48b-a3b", 3, [], "kda_heads (32)"),
    ("llama2-7b", 64, LIGHTNING, "n_head (lightning heads) (32)"),
    ("nemotron-3-nano-30b-a3b", 3, [], "ssm_heads (64)"),
    ("codestral-mamba-7b", 16, [], "ssm_groups (8)"),  # 128 heads divide, 8 groups do not (Megatron's assert)
    ("falcon-mamba-7b", 3, [], "ssm_inner (8192)"),
    ("lfm2-1.2b", 3, [], "d_model (short conv channels) (2048)"),
    ("deepseek-v3.2", 3, [], "n_head (128)"),
])
def test_a_degree_that_splits_no_whole_heads_is_one_line(cli, name, tp, overrides, width):
    sets = [a for o in overrides for a in ("--set", o)]
    r = cli("plan", name, *sets, "--tp", str(tp), "--gpus", str(tp))
    assert_one_line_error(r, f"tp {tp} does not divide {width} of {name}")


@pytest.mark.parametrize("name, overrides", [
    ("qwen3-next-80b-a3b", []), ("kimi-linear-48b-a3b", []), ("llama2-7b", LIGHTNING),
    ("nemotron-3-nano-30b-a3b", []), ("falcon-mamba-7b", []), ("lfm2-1.2b", []), ("deepseek-v3.2", []),
])
def test_plan_at_tp_2_runs(cli, name, overrides):
    """`plan --tp 2` on each new mixer's preset: accepted, each rank's weights under the whole model's."""
    sets = [a for o in overrides for a in ("--set", o)]
    r = cli("plan", name, *sets, "--tp", "2", "--gpus", "2", "--json")
    assert r.code == 0, r.err
    rank = r.json()["per_rank"]["weights_bytes"]
    one = cli("plan", name, *sets, "--tp", "1", "--gpus", "1", "--json").json()["per_rank"]["weights_bytes"]
    assert one / 2 <= rank < one
