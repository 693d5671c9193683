"""What is compiled as models grow deeper, and whether a dropped model gives it back.

    python tools/bench_compile.py                         # depths 2 and 16, then 20 models in a loop
    python tools/bench_compile.py --depths=2,4,8,16 --models=0
    python tools/bench_compile.py --json=/tmp/compile.json

Depth: a residual GCN (ngra_tf.recipes "resgcn", hidden --hidden, no
dropout or weight decay) in memory at P = --chunks over reddit-small scaled
by --scale, trained --epochs epochs with model.fit, each depth in a process
of its own: the first epoch (tracing, graph building, the first run) apart
from the median of the later ones, and the resident memory the run added
(RSS after training minus RSS before the model was made). Printed with the
ratios to the shallowest depth and the memory per extra graph layer.

Loop: --models GCNs built, fitted --loop_epochs epochs on Cora and dropped
(`del`, keras.backend.clear_session(), gc.collect()) one after another in one
process; the resident memory after each, and its growth from the 2nd to the
last (the first warms TensorFlow up).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from absl import app, flags

from timing import epoch_timer  # tools/, the script's own directory

FLAGS = flags.FLAGS
flags.DEFINE_list("depths", ["2", "16"], "Graph layers of the residual GCN, one run each.")
flags.register_validator("depths", lambda values: all(v.isdigit() and int(v) >= 2 for v in values),
                         message="takes whole numbers >= 2, the residual GCN's graph layers (e.g. 2,4,16)")
flags.DEFINE_float("scale", 0.1, "reddit-small at this scale.", lower_bound=1e-4)
flags.DEFINE_integer("chunks", 4, "P.", lower_bound=1)
flags.DEFINE_integer("hidden", 64, "Hidden units.", lower_bound=1)
flags.DEFINE_integer("epochs", 4, "Epochs per depth (the first reported apart).", lower_bound=2)
flags.DEFINE_integer("models", 20, "Models built, fitted and dropped in the loop (0: no loop).", lower_bound=0)
flags.DEFINE_integer("loop_epochs", 3, "Epochs each model of the loop is fitted.", lower_bound=1)
flags.DEFINE_string("json", None, "Also write the results here.")
flags.DEFINE_string("run", None, "(internal) depth:N or loop: one measurement, printed as JSON.")

MIB = 2.0 ** 20


def resident() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def depth_run(depth: int) -> dict:
    import keras  # noqa: PLC0415  (TensorFlow starts after the flags are read)
    import numpy as np  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.graph import datasets  # noqa: PLC0415

    data = datasets.synthetic("reddit-small", seed=0, scale=FLAGS.scale)
    graph = recipes.prepare_graph("resgcn", data.graph)
    x = data.dense_features(normalize=True).astype(np.float32)
    keras.utils.set_random_seed(0)
    before = resident()
    recipe = recipes.Recipe(FLAGS.hidden, 0.01, FLAGS.epochs, 0.0, 0.0, None)
    model = recipes.build_model("resgcn", graph, int(data.labels.max()) + 1, num_features=x.shape[1], depth=depth,
                                chunks=FLAGS.chunks, recipe=recipe)
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss())
    timer, seconds = epoch_timer()
    model.fit(x, data.labels, sample_weight=data.train_mask, epochs=FLAGS.epochs, verbose=0, callbacks=[timer])
    return {"depth": depth, "first_s": seconds[0], "median_s": statistics.median(seconds[1:]),
            "resident_mib": (resident() - before) / MIB}


def loop_run() -> dict:
    import gc  # noqa: PLC0415

    import keras  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.graph import datasets  # noqa: PLC0415

    data = datasets.cora()
    graph = recipes.prepare_graph("gcn", data.graph)
    x = data.dense_features(normalize=True)
    sizes = []
    for _ in range(FLAGS.models):
        model = recipes.build_model("gcn", graph, 7)
        model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss())
        model.fit(x, data.labels, sample_weight=data.train_mask, epochs=FLAGS.loop_epochs, verbose=0)
        del model
        keras.backend.clear_session()
        gc.collect()
        sizes.append(resident() / MIB)
    return {"resident_mib": sizes, "growth_mib": sizes[-1] - sizes[1] if len(sizes) > 1 else 0.0}


def measure(what: str) -> dict:
    """One measurement in a process of its own (each starts from a fresh TensorFlow)."""
    done = subprocess.run([sys.executable, os.path.abspath(__file__), f"--run={what}",
                           *(f"--{name}={FLAGS[name].serialize().split('=', 1)[1]}" for name in
                             ("scale", "chunks", "hidden", "epochs", "models", "loop_epochs"))],
                          capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    if done.returncode:
        raise SystemExit(f"{what} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv):
    del argv
    if FLAGS.run:
        kind, _, value = FLAGS.run.partition(":")
        print(json.dumps(depth_run(int(value)) if kind == "depth" else loop_run()))
        return
    results = {"depths": [measure(f"depth:{int(d)}") for d in FLAGS.depths]}
    base = results["depths"][0]
    print(f"residual GCN in memory, reddit-small x {FLAGS.scale}, P = {FLAGS.chunks}, hidden {FLAGS.hidden}: "
          f"first epoch (incl. tracing) and the median of {FLAGS.epochs - 1} later ones")
    print(f"{'graph layers':>12s} {'first s':>9s} {'x shallowest':>12s} {'later ms':>9s} {'resident MiB':>13s} "
          f"{'MiB / extra layer':>17s}")
    for row in results["depths"]:
        extra = row["depth"] - base["depth"]
        per_layer = (row["resident_mib"] - base["resident_mib"]) / extra if extra else float("nan")
        print(f"{row['depth']:12d} {row['first_s']:9.2f} {row['first_s'] / base['first_s']:11.2f}x "
              f"{1000 * row['median_s']:9.1f} {row['resident_mib']:13.1f} {per_layer:17.1f}")
    if FLAGS.models:
        results["loop"] = measure("loop")
        sizes = results["loop"]["resident_mib"]
        print(f"{FLAGS.models} Cora GCNs built, fitted {FLAGS.loop_epochs} epochs and dropped in one process: "
              f"resident {sizes[0]:.0f} MiB after the 1st, {sizes[1]:.0f} after the 2nd, {sizes[-1]:.0f} after the "
              f"last: {results['loop']['growth_mib']:+.1f} MiB from the 2nd to the last")
    if FLAGS.json:
        with open(FLAGS.json, "w") as stream:
            json.dump(results, stream, indent=1)


if __name__ == "__main__":
    app.run(main)
