"""PyTorch's ring attention on C gloo ranks of the CPU, measured for tests/count/test_torchtitan_ring.py (issue 31;
tfcalc.count.training.context_parallel, step 7): `python tests/ring_ranks.py C OUT` writes OUT.<rank> (JSON) per
rank -- the bytes each functional collective of the forward and of the backward is handed (what the rank sends:
an all-gather's input goes to each of the C − 1 others, a permute's whole input to one), the query and key lengths
and causal flag of every attention kernel, and the shapes the ring ran on. torch's own _templated_ring_attention
and its backward, with the CPU's flash kernel as the op (the CUDA flash kernel's arguments: out, log-sum-exp)."""

from __future__ import annotations

import json
import os
import socket
import sys

import torch
import torch.distributed as dist
from torch.utils._python_dispatch import TorchDispatchMode

B, H, D, PER_RANK = 1, 4, 16, 32  # (B, nh, T, hs): T = PER_RANK positions a rank
WAIT = "_c10d_functional::wait_tensor"
WRAP = "_c10d_functional::_wrap_tensor_autograd"  # eager's async wrapper of a result: no transfer


class Count(TorchDispatchMode):
    """Bytes handed to each functional collective, and each attention kernel's (queries, keys, causal)."""

    def __init__(self):
        super().__init__()
        self.sent: dict[str, int] = {}
        self.kernels: list[tuple[int, int, bool]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = func._schema.name
        if name.startswith("_c10d_functional::") and name not in (WAIT, WRAP) and isinstance(args[0], torch.Tensor):
            self.sent[name] = self.sent.get(name, 0) + args[0].numel() * args[0].element_size()
        if "scaled_dot_product_flash_attention_for_cpu" in name:
            # the positional arguments given, the trailing defaults left out: strict=False
            named = {a.name: v for a, v in zip(func._schema.arguments, args, strict=False)} | kwargs
            self.kernels.append((named["query"].shape[2], named["key"].shape[2], bool(named.get("is_causal"))))
        return func(*args, **kwargs)


def traced_order(attention, group, q, k, v) -> list[str]:
    """The aten ops of the forward ring as make_fx traces it (as torch.compile does)."""
    from torch.fx.experimental.proxy_tensor import make_fx

    fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    gm = make_fx(lambda q, k, v: attention._templated_ring_attention(group, 2, fwd, q, k, v, is_causal=True)[:2])(
        q, k, v)
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def rank_main(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    from torch.distributed.tensor.experimental._context_parallel import _attention as A

    torch.manual_seed(rank)
    q, k, v = (torch.randn(B, H, PER_RANK, D, dtype=torch.bfloat16) for _ in range(3))
    group = dist.group.WORLD
    fwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default
    bwd = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default
    with Count() as f:
        o, lse = A._templated_ring_attention(group, 2, fwd, q, k, v, is_causal=True)[:2]
    with Count() as b:
        A._templated_ring_attention_backward(group, 2, bwd, torch.randn_like(o), "grad_out", q, k, v, o, lse, True,
                                             dropout_p=0.0)
    result = dict(forward=f.sent, forward_kernels=f.kernels, backward=b.sent, backward_kernels=b.kernels,
                  kv_bytes=(k.numel() + v.numel()) * k.element_size(), shape=[B, H, PER_RANK, D],
                  load_balance=A._cp_options.enable_load_balance, traced=traced_order(A, group, q, k, v))
    with open(f"{out}.{rank}", "w") as fh:
        json.dump(result, fh)
    dist.destroy_process_group()


if __name__ == "__main__":
    import torch.multiprocessing as mp

    world, out = int(sys.argv[1]), sys.argv[2]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(world, port, out), nprocs=world)
