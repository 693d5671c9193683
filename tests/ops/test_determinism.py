"""Bitwise determinism of outputs and gradients, across repeated runs and
intra-op thread counts (which TF fixes per process, hence the subprocesses)."""

import io
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from ngra_testlib import subprocess_env

WORKER = pathlib.Path(__file__).with_name("determinism_worker.py")
# One thread against three (blocks that do not split evenly); repeated runs in the three-thread worker.
THREADS = (1, 3)
REPEATED = 3


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{threads: {file name: bytes}} from one worker per thread count, run side by side."""
    dirs = {t: tmp_path_factory.mktemp(f"threads{t}") for t in THREADS}
    # Repeated runs in one process are checked at one thread count; the others run once.
    workers = {t: subprocess.Popen([sys.executable, str(WORKER), str(t), str(d), "2" if t == REPEATED else "1"],
                                   env=subprocess_env(),
                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for t, d in dirs.items()}
    for t, worker in workers.items():
        output, _ = worker.communicate(timeout=300)
        assert worker.returncode == 0, f"worker with {t} threads failed:\n{output[-3000:]}"
    return {t: {p.name: p.read_bytes() for p in d.iterdir()} for t, d in dirs.items()}


def first_run(files):
    return {name: data for name, data in files.items() if ".again" not in name}


def test_results_cover_every_program_and_reduce(runs):
    names = first_run(runs[1]).keys()
    assert len(names) >= 9 * 4 + 4  # forward results alone
    assert "gate_relu-min.npy" in names and "type_select-max.npy" in names and "gather-mean.npy" in names


def test_repeated_runs_are_bitwise_identical(runs):
    files = runs[REPEATED]
    for name in first_run(files):
        assert files[name] == files[name.replace(".npy", ".again.npy")], name


@pytest.mark.parametrize("threads", [t for t in THREADS if t != 1])
def test_thread_counts_give_bitwise_identical_results(runs, threads):
    one, other = first_run(runs[1]), first_run(runs[threads])
    assert other.keys() == one.keys()
    differing = [name for name in one if other[name] != one[name]]
    assert not differing


def test_every_gradient_was_computed(runs):
    """The worker records a gradient that raised instead of crashing; there must be none."""
    failed = sorted(n for n in runs[1] if "-error" in n and ".again" not in n)
    if failed:
        message = np.load(io.BytesIO(runs[1][failed[0]]))
        pytest.fail(f"{len(failed)} gradients raised, e.g. {failed[0]}: {message}")
