"""--profile_dir writes a profiler trace in which the four SAGA-NN stages can
be told apart.

The kernels wrap each stage in tf.name_scope ("Scatter", "ApplyEdge",
"Gather", "ApplyVertex"). A graph layer's forward and backward are functions
traced once per signature, whose ops are named under the signature's name,
so the profiler names each op event after its node
("GCN_1433_16_forward/ForwardChunkSteps/.../FusedGather/NgraFusedGather:NgraFusedGather").
"""

import collections
import subprocess
import sys

import pytest

import layer_checks as lc

STAGES = ("Scatter", "ApplyEdge", "Gather", "ApplyVertex")


def events(path):
    """{name: count} of the events recorded in an .xplane.pb (op events only, not metadata left unused);
    None without a parser."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415
    except ImportError:
        return None
    space = xplane_pb2.XSpace()
    space.ParseFromString(path.read_bytes())
    counts = collections.Counter()
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                counts[plane.event_metadata[event.metadata_id].name] += 1
    return counts


def event_names(path):
    """(stages found by a raw byte search, None) without a parser, else (None, event names)."""
    counts = events(path)
    if counts is None:
        text = path.read_bytes().decode("latin-1")
        return {stage for stage in STAGES if f"/{stage}/" in text}, None
    return None, set(counts)


def trace(tmp_path, *args):
    done = subprocess.run([sys.executable, str(lc.ROOT / "examples" / "train.py"), "--dataset=cora", "--epochs=6",
                           f"--profile_dir={tmp_path}", *args],
                          capture_output=True, text=True, timeout=180, env=lc.subprocess_env(), cwd=lc.ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "test accuracy" in done.stdout and f"profile written under {tmp_path}" in done.stdout
    traces = sorted(tmp_path.glob("**/*.xplane.pb"))
    assert traces, sorted(str(p) for p in tmp_path.rglob("*"))
    return traces[0]


def profile(tmp_path, *args):
    return event_names(trace(tmp_path, *args))


def profile_events(tmp_path, *args):
    return events(trace(tmp_path, *args))


def test_profile_trace_has_the_stage_names(tmp_path):
    """GAT without fusion (`--rewrites=hoist`): all four stages appear."""
    found, names = profile(tmp_path, "--model=gat", "--rewrites=hoist")
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
    """GCN fuses: a layer's chunk steps are the iterations of one loop (ForwardChunkSteps in its signature's
    forward function, BackwardChunkSteps in its backward), each step one fused gather, P x P of them per pass.
    ApplyVertex runs in the layer's own scope, its gradient TensorFlow's, not again in the backward function."""
    counts = profile_events(tmp_path, "--model=gcn", "--chunks=2")
    if counts is None:
        pytest.skip("no xplane parser in this TensorFlow")
    for signature in ("GCN_1433_16", "GCN_16_7"):  # Cora's 1433 features -> 16 hidden -> 7 classes
        forward = sum(n for name, n in counts.items()
                      if name.startswith(f"{signature}_forward/ForwardChunkSteps/") and "FusedGather/NgraFusedGather"
                      in name and name.endswith(":NgraFusedGather"))
        backward = sum(n for name, n in counts.items()
                       if name.startswith(f"{signature}_backward/BackwardChunkSteps/")
                       and name.endswith(":NgraFusedGatherGrad"))
        assert forward and forward % 4 == 0, (signature, forward)
        assert backward and backward % 4 == 0, (signature, backward)
        assert not any(f"{signature}_backward/ApplyVertex/" in name and "/Hoisted/" not in name
                       for name in counts), signature
    for layer in ("gcn", "gcn_1"):
        assert any(f"/{layer}/ApplyVertex/" in name and "gradient_tape" not in name for name in counts), layer
        assert any("gradient_tape/" in name and f"/{layer}/ApplyVertex/" in name for name in counts), layer


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


def test_trace_summary_folds_loop_bodies_into_their_loop():
    sys.path.insert(0, str(lc.ROOT / "tools"))
    import trace_summary  # noqa: PLC0415  (tools/ is not a package)

    body = "Call/m/gcn/ForwardChunkSteps/body/_39/m/gcn/ForwardChunkSteps/FusedGather/NgraFusedGather:NgraFusedGather"
    assert trace_summary.event_name(body) == "Call/m/gcn/ForwardChunkSteps/FusedGather/NgraFusedGather:NgraFusedGather"
    nested = "Call/Rows/body/_3/Rows/Lane0/body/_8/Rows/Lane0/op:Op"
    assert trace_summary.event_name(nested) == "Call/Rows/Lane0/op:Op"
    assert trace_summary.event_name("Call/m/ApplyVertex/Relu:Relu") == "Call/m/ApplyVertex/Relu:Relu"
    inlined = ("GCN_16_7_forward/ForwardChunkSteps/body/_1/GCN_16_7_forward/ForwardChunkSteps/FusedGather/"
               "NgraFusedGather_tfg_inlined_GCN_16_7_forward/ForwardChunkSteps_1:NgraFusedGather")
    assert trace_summary.event_name(inlined) == \
        "GCN_16_7_forward/ForwardChunkSteps/FusedGather/NgraFusedGather:NgraFusedGather"
