"""Real checkpoints: safetensors files read by their headers only (``files``), their tensor names mapped
onto tfcalc's model (``names``), and counted against the config (``count``). Loading the weights into
tfcalc's own model is tfcalc.model.load (it needs torch; this package does not)."""

from tfcalc.checkpoint.count import CheckpointCount, count_checkpoint
from tfcalc.checkpoint.files import CheckpointFiles, TensorInfo, is_checkpoint, read_headers

__all__ = ["CheckpointCount", "CheckpointFiles", "TensorInfo", "count_checkpoint", "is_checkpoint", "read_headers"]
