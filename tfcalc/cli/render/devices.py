"""`tfcalc devices` as a document: the datasheet table, one row per device, sources below."""

from __future__ import annotations

from tfcalc import devices, units
from tfcalc.cli.render.doc import Column, Doc
from tfcalc.report.devices import DevicesReport


def document(reports: list[DevicesReport], verbose: bool = False) -> Doc:
    doc = Doc()
    for report in reports:
        t = doc.table("Devices tfcalc knows (dense datasheet rates; interconnect per GPU, one direction)",
                      Column("key"), Column("device"), Column("bf16", "flop_rate"),
                      Column("fp8", "flop_rate", priority=2),
                      Column("fp32", "flop_rate", priority=3), Column("memory", "bytes"),
                      Column("bandwidth", "byte_rate"), Column("ridge bf16", "intensity", priority=1),
                      Column("in node", "byte_rate", priority=2), Column("network", "byte_rate", priority=3),
                      Column("GPUs/node", "int", priority=3),
                      Column("host/node", "bytes", priority=3), name="devices")
        for s in report.specs:
            t.add(s.key, s.name, s.peak("bf16"), s.peak("fp8"), s.peak("fp32"), devices.driver_bytes(s),
                  s.bandwidth_bytes_per_s, s.ridge("bf16"), s.intra_node_bytes_per_s, s.inter_node_bytes_per_s,
                  s.gpus_per_node, s.host_memory_bytes)
        doc.note("Memory: what the driver reports (an H100's 80 GB on the datasheet is 79.19 GiB to torch); `plan` "
                 f"and `infer` use it less the CUDA context ({units.nbytes(devices.CUDA_CONTEXT_BYTES)}) and, on "
                 f"several GPUs, NCCL's buffers ({units.nbytes(devices.COMM_BUFFER_BYTES)}).")
        for s in report.specs:
            doc.note(f"{s.key}: {s.source}. Node: {s.node}; host memory: {s.host_memory_source}.", "dim")
        doc.note("Your own device: --device-spec my-gpu.yaml with the fields of `tfcalc devices --json` "
                 "(name, peak_flops {dtype: FLOP/s}, bandwidth_bytes_per_s, memory_bytes: what the "
                 "driver reports; the rest optional, host_memory_bytes among them: a node's CPU memory, what plan's "
                 "offload fills).")
    return doc
