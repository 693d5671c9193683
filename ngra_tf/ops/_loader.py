"""Loads the compiled op library once, lazily.

If it is missing or fails to load, says why once and returns None; callers
then run the pure-TF references (ngra_tf.ops.reference).
"""

import functools
import os
import warnings

import tensorflow as tf

LIBRARY_ENV = "NGRA_TF_OPS_LIBRARY"
_DEFAULT_PATH = os.path.join(os.path.dirname(__file__), "_ngra_ops.so")


@functools.lru_cache(maxsize=None)
def library():
    """The loaded op module, or None."""
    path = os.environ.get(LIBRARY_ENV) or _DEFAULT_PATH
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


def library_path():
    """The path of the loaded library, or None."""
    return (os.environ.get(LIBRARY_ENV) or _DEFAULT_PATH) if library() is not None else None
