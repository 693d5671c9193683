"""NGra Fig. 15 on this machine: streaming and fusion as graphs grow past memory.

    python tools/bench_streaming.py                               # reddit-small x 1, 4, 9, 16 (base scale 0.25)
    python tools/bench_streaming.py --copies=1,4 --base_scale=0.05 --epochs=2   # a quick run
    python tools/bench_streaming.py --plot=docs/results/streaming.png
    python tools/bench_streaming.py --store=/tmp/rm16.store      # the three ways on one existing store

Each size is the reddit-small preset scaled by copies x --base_scale (vertices
and edges; 602 features), converted once into a store under --work_dir with
P chosen by tools/partition_graph.py for --convert_budget (chunks keep their
size as the graph grows, as in NGra), and trained from that store (GCN,
model.fit, no validation) three ways:

    NG-base     chunked, explicit loads and spills, no overlap, no fusion (rewrites off)
    NG-stream   + the next chunk read while the current one computes
    NG          + the compiler's rewrites (fused edge stages, hoisting, narrowing)

Each cell is the median of --epochs fit epochs after a first, untimed one.
Overlap is checked against its bound in the same run: NG-serial (NG without
the read-ahead) reads on the compute thread, so its compute alone is its time
minus its read time, and NG should take at most 1.2 x max(compute, reads). Reads come from the
OS page cache when the store fits there (24 GB here): they stand for PCIe
copies, not for a cold disk.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_list("copies", ["1", "4", "9", "16"], "Sizes: multiples of the base graph.")
flags.DEFINE_float("base_scale", 0.25, "The base graph: reddit-small at this scale.", lower_bound=1e-4)
flags.DEFINE_string("convert_budget", "64MB", "Memory budget the converter picks P for (same chunk size at every "
                    "size).")
flags.DEFINE_string("memory_budget", None, "Training memory budget (default: none; the stores are on disk anyway).")
flags.DEFINE_integer("hidden", 128, "GCN hidden units.", lower_bound=1)
flags.DEFINE_integer("epochs", 3, "Timed epochs per cell (after one untimed).", lower_bound=1)
flags.DEFINE_string("work_dir", "/tmp/ngra-bench-streaming", "Where the stores are written (reused when present).")
flags.DEFINE_string("store", None, "Time an existing store (tools/partition_graph.py --prepare=gcn) instead of "
                    "the scaled presets.")
flags.DEFINE_list("configs", ["NG-base", "NG-stream", "NG", "NG-serial"], "Which configurations to time "
                  "(NG and NG-serial give the overlap check; NG-base the speedups).")
flags.DEFINE_string("spill", "spill", "The spill policy of every configuration (spill or recompute).")
flags.DEFINE_float("selective", 0.0, "Selective scheduling threshold for every configuration (0: off).",
                   lower_bound=0, upper_bound=1)
flags.DEFINE_bool("compare_selective", False, "Also time NG with selective scheduling at 0.5 (and print the bytes "
                  "copied to the device).")
flags.DEFINE_bool("compare_spill", False, "Also time NG with the other spill policy (and print the ratio).")
flags.DEFINE_string("plot", None, "Write a PNG of the speedups over NG-base here (needs matplotlib).")

CONFIGS = {"NG-base": dict(overlap=False, rewrites=False), "NG-stream": dict(overlap=True, rewrites=False),
           "NG": dict(overlap=True, rewrites=True), "NG-serial": dict(overlap=False, rewrites=True)}


def store_for(copies: int) -> str:
    path = os.path.join(FLAGS.work_dir, f"reddit-small-x{copies}-s{FLAGS.base_scale}.store")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        command = [sys.executable, os.path.join(REPO, "tools", "partition_graph.py"), "--preset=reddit-small",
                   f"--scale={FLAGS.base_scale * copies}", "--prepare=gcn", f"--memory_budget={FLAGS.convert_budget}",
                   f"--output={path}", "--overwrite", "--noprogress"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"converting x{copies} failed:\n{done.stderr[-3000:]}")
    return path


def time_config(store, config: dict) -> dict:
    import keras  # noqa: PLC0415  (after absl has parsed the flags)

    import ngra_tf  # noqa: PLC0415

    keras.utils.set_random_seed(0)
    classes = store.num_classes()
    model = ngra_tf.GraphModel(store, [ngra_tf.layers.GCN(FLAGS.hidden, activation="relu"),
                                       ngra_tf.layers.GCN(classes)],
                               memory_budget=FLAGS.memory_budget, overlap=config["overlap"],
                               rewrites=config["rewrites"], spill=config.get("spill", FLAGS.spill),
                               selective=config.get("selective", FLAGS.selective))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    model.build(store.array("features").shape)
    stats = model.streamer().stats
    epochs = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            stats.clear()
            ngra_tf.ops.copy_stats(reset=True)
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self.start
            h2d = sum(n for (kind, _), n in ngra_tf.ops.copy_stats().items() if kind == "h2d")
            epochs.append((seconds, stats["read_s"], stats["read_wait_s"], h2d))

    model.fit(store.array("features"), store.array("labels"), sample_weight=store.array("train_mask"),
              epochs=FLAGS.epochs + 1, verbose=0, callbacks=[EpochTimer()])
    timed = epochs[1:]
    return {"seconds": statistics.median(e[0] for e in timed), "read_s": statistics.median(e[1] for e in timed),
            "wait_s": statistics.median(e[2] for e in timed), "h2d": statistics.median(e[3] for e in timed)}


def main(argv):
    del argv
    try:
        copies = [int(c) for c in FLAGS.copies]
    except ValueError:
        raise app.UsageError(f"--copies must be integers, got {FLAGS.copies}") from None
    if not copies or min(copies) < 1:
        raise app.UsageError("--copies must be positive integers")
    unknown = set(FLAGS.configs) - set(CONFIGS)
    if unknown or not FLAGS.configs:
        raise app.UsageError(f"--configs: choose from {', '.join(CONFIGS)}; got {FLAGS.configs}")
    from ngra_tf.store import memory, open_store  # noqa: PLC0415

    if FLAGS.spill not in ("spill", "recompute"):
        raise app.UsageError(f"--spill must be spill or recompute, got {FLAGS.spill!r}")
    try:
        memory.parse_size(FLAGS.convert_budget)
        if FLAGS.memory_budget:
            memory.parse_size(FLAGS.memory_budget)
    except ValueError as error:
        raise app.UsageError(str(error)) from None
    os.makedirs(FLAGS.work_dir, exist_ok=True)
    rows, speedups = [], {"NG-stream": [], "NG": []}
    print(f"{'graph':>14} {'V':>8} {'E':>10} {'P':>3} | {'NG-base':>8} {'NG-stream':>9} {'NG':>8} (s/epoch) | "
          f"{'stream':>6} {'NG':>6} (x NG-base) | NG-serial: compute reads, NG / max(compute, reads)")
    targets = [("store", FLAGS.store)] if FLAGS.store else [(f"reddit-small x{k}", None) for k in copies]
    for (label, path), k in zip(targets, copies):
        try:
            store = open_store(path or store_for(k))
        except ValueError as error:
            raise app.UsageError(f"--store: {error}") from None
        cells = {name: time_config(store, config) for name, config in CONFIGS.items() if name in FLAGS.configs}
        if "NG" in cells:
            print(f"  NG copies {cells['NG']['h2d'] / 2**20:.1f} MiB host -> device per epoch", flush=True)
        if FLAGS.compare_selective:
            cell = time_config(store, dict(CONFIGS["NG"], selective=0.5))
            ng = cells["NG"]
            print(f"  NG with selective=0.5: {cell['seconds']:.2f} s/epoch ({cell['seconds'] / ng['seconds']:.2f}x), "
                  f"{cell['h2d'] / 2**20:.1f} MiB host -> device ({cell['h2d'] / ng['h2d']:.2f}x)", flush=True)
        if FLAGS.compare_spill:
            other = "recompute" if FLAGS.spill == "spill" else "spill"
            seconds = time_config(store, dict(CONFIGS["NG"], spill=other))["seconds"]
            print(f"  NG with spill={other}: {seconds:.2f} s/epoch, {seconds / cells['NG']['seconds']:.2f}x "
                  f"spill={FLAGS.spill}", flush=True)
        base, stream, fused, serial = (cells[n]["seconds"] if n in cells else float("nan") for n in CONFIGS)
        reads = cells["NG-serial"]["read_s"] if "NG-serial" in cells else float("nan")
        compute = max(serial - reads, 1e-9)
        bound = fused / max(compute, reads)
        speedups["NG-stream"].append(base / stream)
        speedups["NG"].append(base / fused)
        rows.append(label if path is None else os.path.basename(path.rstrip("/")))
        print(f"{rows[-1]:>14} {store.num_vertices:>8} {store.num_edges:>10} {store.num_parts:>3} | {base:8.2f} "
              f"{stream:9.2f} {fused:8.2f}           | {base / stream:5.2f}x {base / fused:5.2f}x             | "
              f"{compute:7.2f} {reads:6.2f}  {bound:.2f}", flush=True)
        if bound > 1.2:
            print(f"  NG takes {bound:.2f}x max(compute, reads): more than the 1.2x overlap goal")
    if FLAGS.plot:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from plots import ratio_chart  # noqa: PLC0415

        ratio_chart(FLAGS.plot, "NGra Fig. 15 here: GCN epoch from a store, speedup over NG-base", rows, speedups,
                    note="NG-base: chunked, explicit copies, no overlap, no fusion; NG-stream: + read-ahead; "
                         "NG: + fused kernels", xlabel="speedup over NG-base (NG-base epoch / this epoch)")


if __name__ == "__main__":
    app.run(main)
