"""Loads the compiled op library once, lazily.

If it is missing, fails to load, or was built with -march=native for a CPU
with instructions this one lacks (it would stop the process on the first
one), says why once and returns None; callers then run the pure-TF
references (ngra_tf.ops.reference).
"""

import functools
import json
import os
import warnings

import tensorflow as tf

from ngra_tf.ops import cpu

LIBRARY_ENV = "NGRA_TF_OPS_LIBRARY"
_DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "_ngra_ops.so")


@functools.lru_cache(maxsize=None)
def library():
    """The loaded op module, or None."""
    path = os.environ.get(LIBRARY_ENV) or _DEFAULT_PATH
    missing = _missing_instruction_sets(path)
    if missing:
        warnings.warn(
            f"ngra_tf: the op library {path} was built with -march=native on a CPU with instructions this one "
            f"lacks ({', '.join(missing[:6])}{', ...' if len(missing) > 6 else ''}): it would stop the process "
            "here. Falling back to the pure-TensorFlow reference ops, which are correct but slower. Rebuild it "
            "on this machine (`make` or `pip install .`), or with NGRA_TF_PORTABLE=1 for machines of several "
            "kinds.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    try:
        module = tf.load_op_library(path)
    except (tf.errors.NotFoundError, OSError) as error:
        warnings.warn(
            f"ngra_tf: the op library {path} could not be loaded ({error}). Falling back to the "
            "pure-TensorFlow reference ops, which are correct but slower. Build it with `make` "
            "or `pip install .`.",
            RuntimeWarning,
            stacklevel=3,
        )
        return None
    return module  # ngra_tf.ops registers the gradients (ngra_tf.ops.gradients) when it is imported


def _missing_instruction_sets(path):
    """The instruction sets that the CPU the library at `path` was built for had and this one lacks, from the
    record beside it (setup.py); [] where there is no record, or Linux does not say what this CPU has."""
    try:
        with open(os.path.splitext(path)[0] + ".json") as f:
            built_for = json.load(f).get("instruction_sets") or []
    except (OSError, ValueError, AttributeError):
        return []
    here = cpu.instruction_sets()
    return sorted(set(built_for) - here) if here else []


def library_path():
    """The path of the loaded library, or None."""
    return (os.environ.get(LIBRARY_ENV) or _DEFAULT_PATH) if library() is not None else None
