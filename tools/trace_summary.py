"""Where the time of a profiled run went: a TensorFlow profiler trace summed by event.

    .venv/bin/python examples/train.py --dataset=reddit-small --epochs=6 --profile_dir=/tmp/prof
    .venv/bin/python tools/trace_summary.py --logdir=/tmp/prof --steps=3

Reads the newest `.xplane.pb` under --logdir (what tf.profiler and Keras's
TensorBoard callback write, the file TensorBoard's Profile tab shows) and
prints, per thread and event name, the total time and count divided by
--steps: the ops of the executor threads (NgraFusedGather, _MklMatMul, ...)
and the Python-side events (the train function, iterator creation, tensor
deletion). Events nest (a function call contains its ops), so the rows do not
add up to the wall time. An op inside a loop body is named once, as its loop's
op ("gcn/ForwardChunkSteps/FusedGather/NgraFusedGather"), its bodies' instances
summed (Grappler's "_tfg_inlined_..." suffix dropped).
"""

from __future__ import annotations

import collections
import glob
import os
import re

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("logdir", None, "A profile directory (--profile_dir of examples/train.py).")
flags.DEFINE_integer("steps", 1, "Divide totals by this many profiled steps.", lower_bound=1)
flags.DEFINE_integer("top", 30, "Rows to print.", lower_bound=1)


def newest_trace(logdir: str) -> str:
    traces = glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True)
    if not traces:
        raise FileNotFoundError(f"no .xplane.pb under {logdir}: is it a profiler log directory?")
    return max(traces, key=os.path.getmtime)


_BODY = re.compile(r"/body/_\d+/")
_INLINED = re.compile(r"_tfg_inlined_[^:]*")  # Grappler's suffix on a node it inlined into a loop body


def event_name(name: str) -> str:
    """Folds "L/body/_N/L/op", TensorFlow's name for op in an instance of loop L's body, into "L/op" (and drops
    the suffix Grappler gives a node it inlined there)."""
    name = _INLINED.sub("", name)
    while (found := _BODY.search(name)) is not None:
        loop, inner = name[:found.start()], name[found.end():]
        common = max((n for n in range(1, len(inner) + 1) if loop.endswith(inner[:n]) and
                      (n == len(loop) or loop[-n - 1] == "/")), default=0)
        name = loop + inner[common:] if common else loop + "/" + inner
    return name


def summarise(path: str):
    """{(thread, event): (total milliseconds, count)} over the host planes of a trace."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2  # noqa: PLC0415

    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
        space.ParseFromString(f.read())
    totals = collections.defaultdict(lambda: [0.0, 0])
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            thread = (line.display_name or line.name).split("/")[0]
            for event in line.events:
                entry = totals[(thread, event_name(plane.event_metadata[event.metadata_id].name))]
                entry[0] += event.duration_ps / 1e9
                entry[1] += 1
    return totals


def main(argv):
    del argv
    try:
        path = newest_trace(FLAGS.logdir)
    except FileNotFoundError as error:
        raise app.UsageError(str(error)) from None
    totals = summarise(path)
    print(f"{path}: per step (over {FLAGS.steps})")
    print(f"{'ms':>10s} {'count':>7s}  {'thread':16s} event")
    for (thread, name), (ms, count) in sorted(totals.items(), key=lambda kv: -kv[1][0])[:FLAGS.top]:
        print(f"{ms / FLAGS.steps:10.2f} {count / FLAGS.steps:7.1f}  {thread[:16]:16s} {name[:100]}")


if __name__ == "__main__":
    flags.mark_flag_as_required("logdir")  # here, not at import: tests import event_name without the flags
    app.run(main)
