"""Soak: does resident memory stay flat over a long run, from a store and in memory?

    python tools/soak.py                                  # reddit-small x 0.25, P = 8, 200 epochs, both modes
    python tools/soak.py --epochs=60 --store=/tmp/rs.store --modes=store
    MALLOC_ARENA_MAX=2 python tools/soak.py ...           # the children inherit the environment

The same model (a train.py recipe, --model, with its dropout and weight decay) trains --epochs epochs with
validation, once from the store under --memory_budget (default: the smallest budget the model accepts, as
train.py names it, so the host tier spills to disk) and once with the store's graph in memory at the same P.
Each mode runs in its own subprocess, so they share no memory. A Keras callback samples the process's
resident memory (VmRSS) and glibc's heap bytes in use (mallinfo2: what a leak grows, without the allocator's
noise) at the end of every epoch, before fit's own callback hands freed pages back to the OS.

Per mode it prints RSS after epochs 1, 10, 50, 100, 200 (those run), the growth from epoch 10 to the end
(the rise of the least-squares line through epochs 10..end: one sample swings by several MiB) in MiB and as a
share of the budget (the store run's; the in-memory run is measured against the same number), that line's
slope in MiB per epoch, the heap's bytes in use from epoch 10 to the end, and PASS / FAIL against the goal:
growth after the first 10 epochs <= 2% of the budget. Epoch times: the first epoch apart, the median of the
later ones. --json writes every sample.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from absl import app, flags

FLAGS = flags.FLAGS
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
flags.DEFINE_string("store", None, "The store to train from (default: reddit-small at --scale, --chunks, converted "
                    "under --work_dir once).")
flags.DEFINE_float("scale", 0.25, "Without --store: reddit-small at this scale.", lower_bound=1e-4)
flags.DEFINE_integer("chunks", 8, "Without --store: P of the converted store.", lower_bound=1)
flags.DEFINE_enum("format", "npy", ["npy", "hdf5"], "Without --store: the converted store's format.")
flags.DEFINE_string("work_dir", "/tmp/ngra-soak", "Where a converted store is kept.")
flags.DEFINE_integer("epochs", 200, "Epochs per mode.", lower_bound=11)
flags.DEFINE_list("modes", ["store", "memory"], "Which runs: store, memory.")
flags.DEFINE_string("model", "gcn", "A recipe of ngra_tf.recipes (train.py's defaults).")
flags.DEFINE_string("memory_budget", None, "The store run's budget (default: the smallest the model accepts).")
flags.DEFINE_enum("spill", "spill", ["spill", "recompute"], "The store run's spill policy.")
flags.DEFINE_bool("validation", True, "Fit with validation data, as train.py does.")
flags.DEFINE_bool("release_free_memory", True, "As a store-backed fit does, hand freed heap pages back to the OS "
                  "after every epoch; --norelease_free_memory keeps them (the behaviour before, for comparison).")
flags.DEFINE_float("goal", 0.02, "Allowed growth after the first 10 epochs, as a share of the budget.")
flags.DEFINE_string("json", None, "Also write every sample and summary here.")
flags.DEFINE_string("child", None, "(internal) run one mode in this process and write its samples to --child_out.")
flags.DEFINE_string("child_out", None, "(internal)")

MIB = 2.0 ** 20
WARMUP = 10  # epochs before the flatness goal applies
MARKS = (1, 10, 50, 100, 200)


def store_path() -> str:
    if FLAGS.store:
        return FLAGS.store
    path = os.path.join(FLAGS.work_dir, f"reddit-small-s{FLAGS.scale}-p{FLAGS.chunks}-{FLAGS.format}.store")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        command = [sys.executable, os.path.join(REPO, "tools", "partition_graph.py"), "--preset=reddit-small",
                   f"--scale={FLAGS.scale}", "--prepare=gcn", f"--chunks={FLAGS.chunks}", f"--format={FLAGS.format}",
                   f"--output={path}", "--overwrite", "--noprogress"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"converting the store failed:\n{done.stderr[-3000:]}")
    return path


# ---- one mode, in a child process ----

def heap_bytes():
    """(in use, free) bytes of glibc's malloc heap, all arenas and mmapped blocks (mallinfo2), or None elsewhere.
    In-use bytes that grow are a leak; free bytes (returned pages included) are what the allocator holds."""
    import ctypes  # noqa: PLC0415

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                         "fsmblks", "uordblks", "fordblks", "keepcost")]

    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return None
    mallinfo2.restype = MallInfo2
    info = mallinfo2()
    return info.uordblks + info.hblkhd, info.fordblks


def run_child(mode: str, path: str) -> dict:
    import keras  # noqa: PLC0415  (after absl has parsed the flags)

    import ngra_tf  # noqa: PLC0415
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.runtime import resident  # noqa: PLC0415
    from ngra_tf.store import open_store  # noqa: PLC0415
    from ngra_tf.store.memory import parse_size  # noqa: PLC0415

    if not FLAGS.release_free_memory:
        resident.release_free_memory = lambda: False  # what GraphModel.fit calls after every epoch
    store = open_store(path)
    arrays = {name: store.array(name) for name in ("features", "labels", "train_mask", "val_mask")}

    def build(graph, **options):
        keras.utils.set_random_seed(0)
        model = recipes.build_model(FLAGS.model, graph, store.num_classes(), **options)
        model.compile(optimizer=keras.optimizers.Adam(recipes.RECIPES[FLAGS.model].learning_rate),
                      loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
        return model

    # The budget: the given one, else the smallest a store-backed model accepts (its working set).
    if FLAGS.memory_budget:
        budget = parse_size(FLAGS.memory_budget)
    else:
        probe = build(store)
        probe.build(arrays["features"].shape)
        budget = probe.memory_plan().working_set
        del probe
    if mode == "store":
        model = build(store, memory_budget=budget, spill=FLAGS.spill)
    else:
        from ngra_tf.store.convert import read_graph  # noqa: PLC0415

        model = build(read_graph(store), chunks=store.num_parts)
        arrays = {name: array.read() for name, array in arrays.items()}

    class Sampler(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.rss, self.seconds, self.heap, self.file = [], [], [], []

        def on_epoch_begin(self, epoch, logs=None):
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            self.seconds.append(time.perf_counter() - self._start)
            self.rss.append(resident.resident_bytes())
            self.heap.append(heap_bytes())
            self.file.append(resident.resident_bytes("RssFile"))

    sampler = Sampler()
    validation = (arrays["features"], arrays["labels"], arrays["val_mask"]) if FLAGS.validation else None
    model.fit(arrays["features"], arrays["labels"], sample_weight=arrays["train_mask"], epochs=FLAGS.epochs,
              validation_data=validation, callbacks=[sampler], verbose=0)
    return {"mode": mode, "budget": budget, "rss": sampler.rss, "seconds": sampler.seconds, "heap": sampler.heap,
            "file_backed": sampler.file,
            "num_parts": store.num_parts, "num_vertices": store.num_vertices, "num_edges": store.num_edges}


# ---- the parent: one subprocess per mode, then the table ----

def slope(values: list) -> float:
    """Least-squares slope of values against their index."""
    n = len(values)
    mean_x, mean_y = (n - 1) / 2, sum(values) / n
    num = sum((x - mean_x) * (y - mean_y) for x, y in enumerate(values))
    return num / sum((x - mean_x) ** 2 for x in range(n))


def summarize(run: dict, budget: int) -> dict:
    rss = run["rss"]
    after = rss[WARMUP - 1:]  # epochs 10 .. end
    # One sample swings by several MiB (which freed blocks the allocator still holds), so the growth is the
    # least-squares trend's rise over epochs 10..end, not the last sample minus the tenth.
    per_epoch = slope(after)
    growth = per_epoch * (len(after) - 1)
    heap = [h[0] for h in run["heap"][WARMUP - 1:]] if all(run["heap"]) else None
    return {"marks": {k: rss[k - 1] for k in MARKS if k <= len(rss)}, "growth_bytes": growth,
            "growth_share": growth / budget, "slope_bytes_per_epoch": per_epoch,
            "last_minus_tenth_bytes": rss[-1] - rss[WARMUP - 1],
            "heap_in_use_growth_bytes": None if heap is None else heap[-1] - heap[0],
            "first_epoch_s": run["seconds"][0], "median_epoch_s": statistics.median(run["seconds"][1:]),
            "passed": growth <= FLAGS.goal * budget}


def run_mode(mode: str, path: str) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "run.json")
        argv = [a for a in sys.argv[1:] if not a.startswith(("--store=", "--modes=", "--json="))]
        command = [sys.executable, os.path.abspath(__file__), *argv, f"--store={path}", f"--child={mode}",
                   f"--child_out={out}"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"the {mode} run failed:\n{done.stderr[-3000:]}")
        with open(out) as stream:
            return json.load(stream)


def main(argv):
    del argv
    unknown = set(FLAGS.modes) - {"store", "memory"}
    if unknown:
        raise app.UsageError(f"--modes: unknown {sorted(unknown)}; choose from store, memory")
    path = store_path()
    if FLAGS.child:
        result = run_child(FLAGS.child, path)
        with open(FLAGS.child_out, "w") as stream:
            json.dump(result, stream)
        return
    runs = {mode: run_mode(mode, path) for mode in FLAGS.modes}
    budget = next(iter(runs.values()))["budget"]
    first = next(iter(runs.values()))
    malloc = {k: v for k, v in os.environ.items() if k.startswith("MALLOC_")}
    print(f"soak: {FLAGS.model} on {path} (V={first['num_vertices']}, E={first['num_edges']}, P={first['num_parts']}), "
          f"{FLAGS.epochs} epochs{' with validation' if FLAGS.validation else ''}; store run under "
          f"--memory_budget={budget / MIB:.1f} MiB (spill={FLAGS.spill})"
          + (f"; {' '.join(f'{k}={v}' for k, v in malloc.items())}" if malloc else ""))
    marks = [k for k in MARKS if k <= FLAGS.epochs]
    head = " ".join(f"{'RSS@' + str(k):>7}" for k in marks)
    print(f"| {'mode':<6} | {head} | growth 10..end | % budget | MiB/epoch | heap in use 10..end | "
          f"epoch s: median (first) | goal |")
    summaries = {}
    for mode, run in runs.items():
        cell = summaries[mode] = summarize(run, budget)
        body = " ".join(f"{cell['marks'][k] / MIB:>7.1f}" for k in marks)
        heap = cell["heap_in_use_growth_bytes"]
        heap = "n/a" if heap is None else f"{heap / MIB:+.2f} MiB"
        print(f"| {mode:<6} | {body} | {cell['growth_bytes'] / MIB:>+10.1f} MiB | {100 * cell['growth_share']:>7.2f}% "
              f"| {cell['slope_bytes_per_epoch'] / MIB:>+9.3f} | {heap:>19} | "
              f"{cell['median_epoch_s']:>14.3f} ({cell['first_epoch_s']:.2f}) | "
              f"{'PASS' if cell['passed'] else 'FAIL'} |")
    print("RSS in MiB after the epoch named; growth: the least-squares trend over epochs 10..end; heap in use: "
          "glibc's allocated bytes (mallinfo2), epoch 10 to the end")
    for mode, cell in summaries.items():
        verdict = "PASS" if cell["passed"] else "FAIL"
        print(f"{mode}: {verdict}: RSS grew {cell['growth_bytes'] / MIB:.1f} MiB from epoch {WARMUP} to "
              f"{FLAGS.epochs}, {100 * cell['growth_share']:.2f}% of the {budget / MIB:.1f} MiB budget "
              f"(goal <= {100 * FLAGS.goal:g}%)")
    if FLAGS.json:
        with open(FLAGS.json, "w") as stream:
            json.dump({"runs": runs, "summaries": summaries, "budget": budget, "env": malloc}, stream)


if __name__ == "__main__":
    app.run(main)
