"""The chunk compiler: SAGA layers -> typed traces -> rewrites -> the kernels the executor runs."""

from ngra_tf.compiler.kernels import LayerKernels
from ngra_tf.compiler.program import REWRITES, LayerProgram, compile_layer, parse_rewrites

__all__ = ["REWRITES", "LayerKernels", "LayerProgram", "compile_layer", "parse_rewrites"]
