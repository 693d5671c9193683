"""Randomized malformed inputs to the raw ops (see fuzz_worker.py), run in a
subprocess so that a crash fails this test instead of killing pytest."""

import pathlib
import resource
import subprocess
import sys

import pytest

from ngra_testlib import subprocess_env

WORKER = pathlib.Path(__file__).with_name("fuzz_worker.py")
MAX_EXAMPLES = 1500


def test_raw_ops_never_crash_on_malformed_input():
    result = subprocess.run([sys.executable, str(WORKER), str(MAX_EXAMPLES)], env=subprocess_env(),
                            capture_output=True, text=True, timeout=300)
    log = result.stdout[-3000:] + result.stderr[-6000:]
    assert result.returncode == 0, f"the fuzz worker exited with {result.returncode} (negative: a signal):\n{log}"
    counts = dict(item.split("=") for item in result.stdout.split() if "=" in item)
    assert int(counts["cases"]) >= 500, log
    # Both kinds of case really happened: rejected inputs, and valid ones
    # whose fused gather matched the oracle.
    assert int(counts["rejected"]) >= 100 and int(counts["ok"]) >= 100, log
    assert int(counts.get("checked", 0)) >= 20, log


# Inputs whose output would be absurdly large, made of tensors with no (or one)
# element: the op must fail cleanly, with an InvalidArgumentError (or a
# ResourceExhaustedError from the allocator), never crash the process. Each
# runs in its own subprocess, all side by side.
E32 = "tf.zeros([0], tf.int32)"
NO_FLOATS = "tf.zeros([0])"
HUGE = {
    # indptr[-1] claims 2**40 edges; with empty edge_ids nothing else bounds it.
    "edges-scatter": "lib.ngra_scatter(tf.ones([1, 1]), INDPTR, EMPTY)",
    "edges-gather": "lib.ngra_gather(tf.ones([1, 1]), INDPTR, EMPTY, tf.zeros([0]), reduce='max')",
    "edges-gather_grad_arg": "lib.ngra_gather_grad_arg(tf.ones([1, 1]), tf.constant([[-1]], tf.int64), INDPTR, EMPTY)",
    "edges-fused_gather": f"lib.ngra_fused_gather(tf.ones([1, 1]), {NO_FLOATS}, {NO_FLOATS}, {E32}, INDPTR, "
                          "tf.zeros([1], tf.int64), tf.constant([0, 1], tf.int64), tf.zeros([1], tf.int64), "
                          "tf.zeros([1], tf.int64), tf.zeros([0]), tf.zeros([0], tf.int8), program='copy_src', reduce='sum')",
    # Zero rows of 2**80 (or 2**62) features: an empty tensor, but the output has rows.
    "shape-gather": f"lib.ngra_gather(tf.zeros([0, 2**40, 2**40]), tf.constant([0, 0]), {E32}, {NO_FLOATS}, "
                    "reduce='sum')",
    "shape-fused_gather": f"lib.ngra_fused_gather(tf.zeros([0, 2**62]), {NO_FLOATS}, {NO_FLOATS}, {E32}, "
                          f"tf.constant([0, 0, 0]), {E32}, tf.constant([0]), {E32}, {E32}, {NO_FLOATS}, "
                          "tf.zeros([0], tf.int8), program='copy_src', reduce='sum')",
    "shape-fused_gather_grad": f"lib.ngra_fused_gather_grad(tf.zeros([1]), {E32}, tf.zeros([0, 2**62]), {NO_FLOATS}, "
                               f"{NO_FLOATS}, {E32}, tf.constant([0, 0, 0]), {E32}, tf.constant([0]), {E32}, {E32}, "
                               "tf.zeros([0], tf.int8), program='copy_src', reduce='sum', wrt='x_src')",
}

SCRIPT = """
import tensorflow as tf
import ngra_tf
lib = ngra_tf.ops.library()
INDPTR, EMPTY = tf.constant([0, 2**40], tf.int64), tf.zeros([0], tf.int64)
try:
    {call}
    print("succeeded")
except (tf.errors.InvalidArgumentError, tf.errors.ResourceExhaustedError) as error:
    print("clean", type(error).__name__)
"""


def limit_address_space():
    """Where the kernel overcommits memory freely, an 8 TiB allocation must still fail, not swap."""
    resource.setrlimit(resource.RLIMIT_AS, (64 << 30, 64 << 30))


@pytest.fixture(scope="module")
def huge_results():
    processes = {
        case: subprocess.Popen([sys.executable, "-c", SCRIPT.format(call=call)],
                               env=subprocess_env(CUDA_VISIBLE_DEVICES=""), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=limit_address_space)
        for case, call in HUGE.items()
    }
    return {case: (p, *p.communicate(timeout=300)) for case, p in processes.items()}


@pytest.mark.parametrize("case", list(HUGE))
def test_absurd_sizes_fail_cleanly(huge_results, case):
    process, stdout, stderr = huge_results[case]
    assert process.returncode == 0, f"crashed with {process.returncode}:\n{stderr[-3000:]}"
    assert stdout.startswith("clean"), stdout
