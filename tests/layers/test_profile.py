"""--profile_dir writes a profiler trace in which the four SAGA-NN stages can
be told apart.

SAGALayer.call wraps each stage in tf.name_scope ("Scatter", "ApplyEdge",
"Gather", "ApplyVertex"). Keras's fit runs the model in a tf.function, so the
scopes become part of the graph's node names, and the profiler names each op
event after its node ("StatefulPartitionedCall/gcn_1/gcn_1/Gather/NgraGather:NgraGather").
"""

import subprocess
import sys

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


def test_profile_trace_has_the_stage_names(tmp_path):
    done = subprocess.run([sys.executable, str(lc.ROOT / "examples" / "train.py"), "--model=gcn", "--dataset=cora",
                           "--epochs=6", f"--profile_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=180, env=lc.subprocess_env(), cwd=lc.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test accuracy" in done.stdout and f"profile written under {tmp_path}" in done.stdout
    traces = sorted(tmp_path.glob("**/*.xplane.pb"))
    assert traces, sorted(str(p) for p in tmp_path.rglob("*"))
    found, names = event_names(traces[0])
    if names is None:
        assert found == set(STAGES)
        return
    for stage in STAGES:
        assert any(f"/{stage}/" in name for name in names), (stage, sorted(names)[:50])
    # The kernels themselves sit in their stage: forward Scatter and Gather ops.
    assert any("/ApplyEdge/Scatter/NgraScatter" in name for name in names)
    assert any("/Gather/NgraGather" in name and "gradient_tape" not in name for name in names)
    # and the backward pass keeps the scopes too.
    assert any("gradient_tape" in name and "/ApplyVertex/" in name for name in names)
