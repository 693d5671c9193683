"""The converter under faults: a conversion stopped by SIGTERM removes what it wrote, one killed outright
(SIGKILL) is replaced when the same command runs again, and not enough disk is refused before the heavy
passes, in one line naming the directory and the bytes needed and free."""

import json
import os
import pathlib
import re
import signal
import subprocess
import sys
import types

import numpy as np
import pytest

from ngra_tf import recipes
from ngra_tf.graph import Graph
from ngra_tf.store import convert, open_store, prepare, sources
from store_checks import assert_store_matches

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "partition_graph.py"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
# A small synthetic preset whose conversion takes a few seconds after its first pass.
COMMAND = ["--preset=reddit-small", "--scale=0.05", "--chunks=3", "--memory_budget=64MB", "--noprogress"]


def start_tool(*args):
    return subprocess.Popen([sys.executable, str(TOOL), *COMMAND, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=ENV, cwd=ROOT)


def stop_after_first_pass(process, signum) -> list:
    """Sends signum once the first pass's end line is printed; returns the lines printed before."""
    lines = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("symmetrise edges:"):
            process.send_signal(signum)
            break
    process.wait(timeout=300)
    return lines


def test_sigterm_removes_the_output_and_says_what_to_do(tmp_path):
    process = start_tool(f"--output={tmp_path / 'store'}")
    lines = stop_after_first_pass(process, signal.SIGTERM)
    assert process.returncode == 143, process.stderr.read()[-2000:]
    assert any("edges/s" in line for line in lines), lines  # each pass's line has a rate
    assert "interrupted (SIGTERM)" in process.stderr.read()
    assert not (tmp_path / "store").exists()


def test_a_conversion_killed_outright_is_replaced_by_running_it_again(tmp_path):
    output, scratch = tmp_path / "store", tmp_path / "scratch"
    scratch.mkdir()
    process = start_tool(f"--output={output}", f"--scratch_dir={scratch}")
    stop_after_first_pass(process, signal.SIGKILL)
    assert process.returncode == -signal.SIGKILL
    assert (output / convert.MARKER).exists() and not (output / "manifest.json").exists()
    assert list(scratch.iterdir()), "the killed conversion left its scratch files"
    with pytest.raises(ValueError, match="incomplete store"):
        open_store(output)
    again = subprocess.run([sys.executable, str(TOOL), *COMMAND, f"--output={output}", f"--scratch_dir={scratch}"],
                           capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=300)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "replacing the unfinished conversion" in again.stdout
    assert not (output / convert.MARKER).exists() and not list(scratch.iterdir())
    open_store(output).verify()


def tiny_graph():
    rng = np.random.default_rng(1)
    return Graph.from_edges(rng.integers(0, 60, 500), rng.integers(0, 60, 500), 60)


def test_not_enough_disk_is_refused_before_the_first_pass(tmp_path, monkeypatch):
    free = 1000
    monkeypatch.setattr(convert.shutil, "disk_usage", lambda path: types.SimpleNamespace(free=free))
    with pytest.raises(ValueError, match=rf"not enough disk space for the first pass in {tmp_path}.*: needs "
                                         rf".* \(\d+ bytes\), .* \({free} bytes\) free"):
        convert.convert(tmp_path / "store", sources.GraphEdges(tiny_graph()), num_parts=2, prepare="gcn",
                        scratch_dir=tmp_path)
    assert not (tmp_path / "store").exists() and not list(tmp_path.iterdir())


def test_not_enough_disk_for_the_store_exits_1_in_one_line(tmp_path):
    # The tool's own process, its filesystem reported full after the first check (before the first pass):
    # the check before bucketing refuses, in one line on stderr, status 1, nothing left.
    driver = f"""
import itertools, runpy, shutil, sys, types
real, calls = shutil.disk_usage, itertools.count()
shutil.disk_usage = lambda path: real(path) if next(calls) == 0 else types.SimpleNamespace(free=4096)
sys.argv = [{str(TOOL)!r}] + {COMMAND!r} + ["--output={tmp_path / 'store'}"]
runpy.run_path({str(TOOL)!r}, run_name="__main__")
"""
    done = subprocess.run([sys.executable, "-c", driver], capture_output=True, text=True, env=ENV, cwd=ROOT,
                          timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("partition_graph.py: error:")]
    assert len(errors) == 1 and "not enough disk space for bucketing the edges in " in errors[0], done.stderr
    assert "(4096 bytes) free" in errors[0]
    assert not (tmp_path / "store").exists()


def test_a_missing_scratch_directory_is_named(tmp_path):
    with pytest.raises(ValueError, match=r"scratch directory .*nowhere does not exist"):
        convert.convert(tmp_path / "store", sources.GraphEdges(tiny_graph()), num_parts=2,
                        scratch_dir=tmp_path / "nowhere")
    assert not (tmp_path / "store").exists()


def test_records_too_wide_for_one_number_are_sorted_as_pairs(tmp_path, monkeypatch):
    # (Graphs with billions of vertices and edges: forced here by allowing 16 bits a record and 4 buckets.)
    monkeypatch.setattr(prepare, "_PACKED_BITS", 16)
    monkeypatch.setattr(prepare, "_MAX_BUCKETS", 4)
    graph = tiny_graph()
    assert not prepare._PairRecords(60, 1000, 1).packed
    store = convert.convert(tmp_path / "store", sources.GraphEdges(graph), num_parts=2, prepare="gcn",
                            memory_budget="64KB")
    assert_store_matches(store, recipes.prepare_graph("gcn", graph), 2)
    assert json.loads((tmp_path / "store" / "manifest.json").read_text())["num_parts"] == 2


def test_chunks_too_large_for_the_budget_are_named_with_what_would_do(tmp_path):
    class Notes(list):
        def __call__(self, stage, done, total):
            pass

        def note(self, line):
            self.append(line)

    notes = Notes()
    convert.convert(tmp_path / "store", sources.GraphEdges(tiny_graph()), num_parts=1, memory_budget=8000,
                    progress=notes)
    assert any(re.match(r"warning: num_parts \(--chunks\) 1 makes a chunk of 500 edges, whose build needs about "
                        r".*, more than the memory budget .*: give about 2 or more parts", line) for line in notes)
