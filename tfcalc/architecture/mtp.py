"""DeepSeek-V3's multi-token prediction (MTP) modules (arXiv 2412.19437, sec. 2.2, Figure 3), counted beside
the model, never in its total: Hugging Face's DeepseekV3ForCausalLM leaves them out (modeling_deepseek_v3.py,
``_keys_to_ignore_on_load_unexpected = [r"model\\.layers\\.61.*"]``), and the published sizes name them apart
(the model card: 671B of main model weights and 14B of MTP module weights, 685B on Hugging Face).

The tensors of module k, stored after the main layers as ``model.layers.{n_layer + k}.*`` (the checkpoint's
README_WEIGHTS.md, "MTP modules"): ``enorm`` and ``hnorm`` (RMSNorms over the token's embedding and the previous
depth's hidden state), ``eh_proj`` (2d -> d, the projection of their concatenation), one full decoder layer
(the kind of the layer after the main stack: a mixture of experts in DeepSeek-V3), and ``shared_head.norm``.
Its embedding and output head are the main model's (sec. 2.2: "shared"), stored once more in the checkpoint
(``embed_tokens``, ``shared_head.head``): ``stored_total`` counts those copies too. Pure Python.
"""

from __future__ import annotations

from dataclasses import dataclass

from tfcalc.architecture.block import Block
from tfcalc.architecture.norm import Norm
from tfcalc.architecture.tensors import Weight


@dataclass(frozen=True)
class MTP:
    block: Block  # each module's decoder layer
    depth: int  # modules (num_nextn_predict_layers): DeepSeek-V3 1
    norm: Norm  # the kind of enorm, hnorm and shared_head.norm
    vocab_size: int

    @property
    def d_model(self) -> int:
        return self.norm.width

    def weights(self) -> list[Weight]:
        """One module's own tensors, in checkpoint order (its shared embedding and head left out)."""
        d = self.d_model
        out = self.norm.weights("mtp_enorm", "MTP embedding norm") + self.norm.weights("mtp_hnorm", "MTP hidden norm")
        out.append(Weight("mtp_eh_proj", (d, 2 * d), "attention", "MTP projection [embedding | hidden]"))
        out += [w.named("mtp_") for w in self.block.weights()]
        return out + self.norm.weights("mtp_head_norm", "MTP head norm")

    @property
    def total(self) -> int:
        """Parameters of all the modules, without the embedding and head they share with the model."""
        return self.depth * sum(w.numel for w in self.weights())

    @property
    def active(self) -> int:
        """Parameters one token runs through in them: the routed experts' top-k of E."""
        per = sum(w.numel // w.copies * (w.experts_active or w.copies) for w in self.weights())
        return self.depth * per

    @property
    def shared_copies(self) -> int:
        """The stored copies of the embedding and the output head: V·d each per module."""
        return self.depth * 2 * self.vocab_size * self.d_model

    @property
    def buffers(self) -> int:
        """The router's correction bias of each module's mixture of experts (a buffer: E values)."""
        ffn = self.block.ffn
        routing = getattr(ffn, "routing", None)
        return self.depth * ffn.n_expert if routing is not None and routing.bias_buffer else 0

    @property
    def stored_total(self) -> int:
        """Elements the checkpoint stores for the modules (the copies of the embedding and head, and the
        routers' correction biases, included)."""
        return self.total + self.shared_copies + self.buffers
