"""Propagation and data-movement ops: compiled kernels with pure-TF fallbacks."""

from ngra_tf.ops import gradients  # noqa: F401  (registers the ops' gradients)
from ngra_tf.ops._loader import library, library_path
from ngra_tf.ops.copy import copy_d2d, copy_d2h, copy_h2d, copy_stats
from ngra_tf.ops.cache import cache_stats
from ngra_tf.ops.fileio import file_stats, read_file, write_file
from ngra_tf.ops.propagation import PROGRAMS, REDUCES, fused_gather, gather, scatter

__all__ = [
    "PROGRAMS",
    "REDUCES",
    "copy_d2d",
    "copy_d2h",
    "copy_h2d",
    "cache_stats",
    "copy_stats",
    "file_stats",
    "fused_gather",
    "gather",
    "library",
    "library_path",
    "read_file",
    "scatter",
    "write_file",
]
