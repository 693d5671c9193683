"""The chunk compiler: SAGA layers -> typed traces -> rewrites -> chunk plans."""

from ngra_tf.compiler.plan import SCHEDULES, schedule_steps
from ngra_tf.compiler.program import REWRITES, LayerProgram, compile_layer, parse_rewrites

__all__ = ["REWRITES", "SCHEDULES", "LayerProgram", "compile_layer", "parse_rewrites", "schedule_steps"]
