"""--profile_dir writes a profiler trace in which the four SAGA-NN stages can
be told apart.

SAGALayer.call wraps each stage in tf.name_scope ("Scatter", "ApplyEdge",
"Gather", "ApplyVertex"). Keras's fit runs the model in a tf.function, so the
scopes become part of the graph's node names, and the profiler names each op
event after its node ("StatefulPartitionedCall/gcn_1/gcn_1/Gather/NgraGather:NgraGather").
"""

import subprocess
import sys

import pytest

import layer_checks as lc

STAGES = ("Scatter", "ApplyEdge", "Gather", "ApplyVertex")


def event_names(path):
    """Names of the events recorded in an .xplane.pb (op events only, not metadata left unused)."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415
    except ImportError:  # no parser: search the raw bytes instead
        text = path.read_bytes().decode("latin-1")
        return {stage for stage in STAGES if f"/{stage}/" in text}, None
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    names = set()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                names.add(plane.event_metadata[event.metadata_id].name)
    return None, names


def profile(tmp_path, *args):
    done = subprocess.run([sys.executable, str(lc.ROOT / "examples" / "train.py"), "--dataset=cora", "--epochs=6",
                           f"--profile_dir={tmp_path}", *args],
                          capture_output=True, text=True, timeout=180, env=lc.subprocess_env(), cwd=lc.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test accuracy" in done.stdout and f"profile written under {tmp_path}" in done.stdout
    traces = sorted(tmp_path.glob("**/*.xplane.pb"))
    assert traces, sorted(str(p) for p in tmp_path.rglob("*"))
    return event_names(traces[0])


def test_profile_trace_has_the_stage_names(tmp_path):
    """GAT's edge stage has a softmax, so it runs unfused: all four stages appear."""
    found, names = profile(tmp_path, "--model=gat")
    if names is None:
        assert found == set(STAGES)
        return
    for stage in STAGES:
        assert any(f"/{stage}/" in name for name in names), (stage, sorted(names)[:50])
    # The kernels themselves sit in their stage: forward Scatter and Gather ops,
    assert any("/Scatter/NgraScatter" in name for name in names)
    assert any("/Gather/NgraGather" in name and "gradient_tape" not in name for name in names)
    # the hoisted part of ApplyEdge has a scope of its own,
    assert any("/ApplyEdge/Hoisted/" in name for name in names)
    # and the backward pass keeps the scopes too.
    assert any("gradient_tape" in name and "/ApplyVertex/" in name for name in names)


def test_profile_trace_shows_chunks_and_fused_gathers(tmp_path):
    """GCN fuses: each chunk step C{i}_{j} is one fused gather; ApplyVertex per interval V{j}."""
    _, names = profile(tmp_path, "--model=gcn", "--chunks=2")
    if names is None:
        pytest.skip("no xplane parser in this TensorFlow")
    for i in range(2):
        for j in range(2):
            assert any(f"/C{i}_{j}/FusedGather/NgraFusedGather" in name for name in names), (i, j)
        assert any(f"/V{i}/ApplyVertex/" in name for name in names), i


def test_trace_summary_reads_the_profile(tmp_path):
    """tools/trace_summary.py sums the trace train.py wrote: the fused kernels are among its rows."""
    _, names = profile(tmp_path, "--model=gcn")
    if names is None:
        pytest.skip("no xplane parser in this TensorFlow")
    done = subprocess.run([sys.executable, str(lc.ROOT / "tools" / "trace_summary.py"), f"--logdir={tmp_path}",
                           "--steps=3", "--top=200"], capture_output=True, text=True, timeout=120,
                          env=lc.subprocess_env(), cwd=lc.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line.split(None, 3) for line in done.stdout.splitlines()[2:]]
    fused = [row for row in rows if row[3].endswith("NgraFusedGather")]
    assert fused and all(float(ms) > 0 and float(count) > 0 for ms, count, _, _ in fused), done.stdout
    times = [float(row[0]) for row in rows]
    assert times == sorted(times, reverse=True)


def test_trace_summary_names_a_bad_logdir(tmp_path):
    done = subprocess.run([sys.executable, str(lc.ROOT / "tools" / "trace_summary.py"), f"--logdir={tmp_path}"],
                          capture_output=True, text=True, timeout=120, env=lc.subprocess_env(), cwd=lc.ROOT)
    assert done.returncode != 0 and f"no .xplane.pb under {tmp_path}" in done.stderr
