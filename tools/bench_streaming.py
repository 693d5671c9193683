"""NGra Fig. 15 and Fig. 14 on this machine: training from a chunk store, and its schedules.

    python tools/bench_streaming.py                               # reddit-small x 1, 4, 9, 16 (base scale 0.25)
    python tools/bench_streaming.py --copies=1,4 --base_scale=0.05 --epochs=2   # a quick run
    python tools/bench_streaming.py --plot=docs/results/streaming.png --json=/tmp/fig15.json
    python tools/bench_streaming.py --store=/tmp/rm16.store      # the configurations on one existing store
    python tools/bench_streaming.py --schedules --store=/tmp/rm16.store --memory_budget=352MiB   # Fig. 14
    python tools/bench_streaming.py --neugraph --store=/tmp/rm16.store   # NeuGraph's step order, if expressible

Each size is the reddit-small preset scaled by copies x --base_scale (vertices
and edges; 602 features), converted once into a store under --work_dir at P = --base_chunks x
sqrt(copies), rounded (chunks keep their size as the graph grows, as in
NGra).

Fig. 15 (the default): GCN (model.fit, no validation) from each store in
these configurations (--configs), or with --model a functional recipe
(resgcn with --depth graph layers, appnp with --k steps, jknet) built as
ngra_tf.recipes builds it, without dropout or weight decay:

    python tools/bench_streaming.py --store=/tmp/rm16.store --model=resgcn --depth=16 --hidden=64 --configs=NG,in-memory

    NG-base     chunked, explicit loads and spills, no overlap, no fusion (rewrites off)
    NG-stream   + a loop's next step (its reads) may start while the current one computes
    NG          + the compiler's rewrites (fused edge stages, hoisting, narrowing)
    in-memory   the same model (NG's rewrites) over the same graph held in memory, at the same P
    NG-serial   NG without the overlap (optional: NG-serial / NG is what the overlap gains with fusion on)

Store-backed training runs through the same compiled executor as in-memory
training: chunk reads and spills are TF ops inside the traced graph, so
there is no per-read timing; the overlap shows only as whole-epoch times.
The in-memory graph is rebuilt from the store's own chunks (original vertex
ids and edge order, its edge data), so both run the same graph; the tool
checks that its partition at P equals the store's.

Every cell reports the first epoch apart (tracing and graph building, and a
cold page cache for the first cell of a store) and the MEDIAN of the
--epochs later ones (the steady state; the first is never averaged in).
The ratios: NG-stream and NG speedups over NG-base, and NG / in-memory at
the same P (the goal: at most 1.3x).

--schedules (NGra Fig. 14, from a store under --memory_budget): NG with each
schedule of ngra_tf.runtime.plan.tables (ngra, stage, dest-order) on one store
(--store, else the first --copies size): steady-state median and first
epoch, and the bytes moved per steady epoch (medians): copy_h2d / copy_d2h
bytes as the copy ops count them (ngra_tf.ops.copy_stats: none where the
device is the host), the bytes the file ops read and wrote
(ngra_tf.ops.file_stats: store reads, spills) beside the least a training
step must read of the chunks at that budget (the chunk cache's plan), and
the process's own I/O from /proc/self/io deltas around each epoch -- rchar /
wchar (bytes through read/write system calls, page-cache hits included) and
read_bytes / write_bytes (bytes that reached or were sent to the block
device); /proc/self/io covers the whole process, so it includes any other
I/O in the epoch.

--neugraph: NeuGraph walks a layer's chunks column by column forward and row
by row backward. The tool derives each schedule's forward and backward order
from the step tables (plan.tables.forward_table / backward_table on the store's
partition) and times a comparison only if the schedules express both that
order and a different backward order; otherwise it says the variant is not
implemented.

Reads come from the OS page cache when the store fits there: they stand for
PCIe copies, not for a cold disk. --json=PATH writes every printed result
(a dict of cells) as JSON.
"""

from __future__ import annotations

import gc
import json
import math
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
flags.DEFINE_integer("base_chunks", 2, "P of the base graph; a graph of c copies is cut into base_chunks x "
                     "sqrt(c) intervals (rounded), so chunks hold about as many edges at every size.", lower_bound=1)
flags.DEFINE_string("memory_budget", None, "Training memory budget of the store-backed configurations (default: "
                    "none; the stores are on disk anyway). A budget too small for the host tier spills to disk.")
flags.DEFINE_integer("hidden", 128, "Hidden units.", lower_bound=1)
flags.DEFINE_enum("model", "gcn", ["gcn", "gat", "resgcn", "appnp", "jknet"], "The model: NGra's 2-layer GCN, or a functional "
                  "recipe of ngra_tf.recipes (built with --hidden, --depth and --k, without dropout or weight decay).")
flags.DEFINE_integer("depth", 16, "With --model=resgcn or jknet: graph layers.", lower_bound=2)
flags.DEFINE_integer("k", 10, "With --model=appnp: propagation steps.", lower_bound=1)
flags.DEFINE_integer("epochs", 3, "Timed epochs per cell, after the first (reported apart).", lower_bound=1)
flags.DEFINE_string("work_dir", "/tmp/ngra-bench-streaming", "Where the stores are written (reused when present).")
flags.DEFINE_string("store", None, "Time an existing store (tools/partition_graph.py --prepare=gcn) instead of "
                    "the scaled presets.")
flags.DEFINE_list("configs", ["NG-base", "NG-stream", "NG", "in-memory"], "Which Fig. 15 configurations to time: "
                  "NG-base, NG-stream, NG, in-memory, NG-serial (NG-base gives the speedups, in-memory NG's "
                  "distance from in-memory training).")
flags.DEFINE_string("spill", "spill", "The spill policy of every store-backed configuration (spill or recompute).")
flags.DEFINE_float("selective", 0.0, "Selective scheduling threshold for every store-backed configuration "
                   "(0: off).", lower_bound=0, upper_bound=1)
flags.DEFINE_bool("compare_selective", False, "Also time NG with selective scheduling at 0.5 (and print the bytes "
                  "copied to the device).")
flags.DEFINE_bool("compare_spill", False, "Also time NG with the other spill policy (and print the ratio).")
flags.DEFINE_bool("schedules", False, "NGra Fig. 14 instead of Fig. 15: NG with each of --schedule_list on one "
                  "store (--store, else the first --copies size) under --memory_budget: times and bytes moved.")
flags.DEFINE_list("schedule_list", ["ngra", "stage", "dest-order"], "The schedules --schedules times (ratios are "
                  "against the first).")
flags.DEFINE_bool("neugraph", False, "Compare NeuGraph's step order (forward column by column, backward row by "
                  "row) with the other orders the schedules express, on one store; says so when no schedule "
                  "expresses the comparison.")
flags.DEFINE_string("plot", None, "Write a PNG of the Fig. 15 speedups over NG-base here (needs matplotlib).")
flags.DEFINE_string("json", None, "Also write every result printed, as a dict of cells, to this JSON file.")

CONFIGS = {"NG-base": dict(overlap=False, rewrites=False), "NG-stream": dict(overlap=True, rewrites=False),
           "NG": dict(overlap=True, rewrites=True), "in-memory": dict(memory=True, rewrites=True),
           "NG-serial": dict(overlap=False, rewrites=True)}
IO_FIELDS = ("rchar", "wchar", "read_bytes", "write_bytes", "cancelled_write_bytes")
MIB = 2.0 ** 20
GOAL_VS_MEMORY = 1.3  # NG's steady epoch over in-memory training's at the same P


# ---- measuring ----

def process_io() -> dict | None:
    """This process's I/O counters (/proc/self/io, all threads), or None where the kernel does not give them."""
    try:
        with open("/proc/self/io") as stream:
            fields = dict(line.split(":", 1) for line in stream if ":" in line)
        return {name: int(fields[name]) for name in IO_FIELDS if name in fields}
    except (OSError, ValueError):
        return None


def copied_bytes() -> dict:
    """{"h2d": bytes, "d2h": bytes, "d2d": bytes} since the last reset (all devices), or {} without the op library."""
    from ngra_tf.ops._loader import library  # noqa: PLC0415
    from ngra_tf.ops.copy import copy_stats  # noqa: PLC0415

    totals = {}
    for (kind, _), count in copy_stats().items():
        totals[kind] = totals.get(kind, 0) + count
    if not totals and library() is None:
        return {}
    return {kind: totals.get(kind, 0) for kind in ("h2d", "d2h", "d2d")}


def make_timer():
    import keras  # noqa: PLC0415  (after absl has parsed the flags)

    import ngra_tf  # noqa: PLC0415

    class EpochTimer(keras.callbacks.Callback):
        """Per epoch: wall seconds (counters read and reset outside the timed span), bytes copied, process I/O,
        training loss."""

        def __init__(self):
            super().__init__()
            self.epochs = []

        def on_epoch_begin(self, epoch, logs=None):
            ngra_tf.ops.copy_stats(reset=True)
            ngra_tf.ops.file_stats(reset=True)
            self._io = process_io()
            self._start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds = time.perf_counter() - self._start
            after = process_io()
            io = None if after is None or self._io is None else {k: after[k] - self._io[k] for k in after}
            self.epochs.append({"seconds": seconds, "copied": copied_bytes(), "io": io,
                                "files": ngra_tf.ops.file_stats(), "loss": float((logs or {}).get("loss", math.nan))})

    return EpochTimer()


def summarize(epochs: list) -> dict:
    """The first epoch apart; medians of the later ones (the steady state)."""
    later = epochs[1:]

    def median(values):
        values = [v for v in values if v is not None]
        return statistics.median(values) if values else None

    cell = {"first_s": epochs[0]["seconds"], "median_s": median(e["seconds"] for e in later),
            "timed_epochs": len(later), "epoch_s": [e["seconds"] for e in epochs],
            "loss": [e["loss"] for e in epochs]}
    if later and later[0]["copied"]:
        cell["copied"] = {k: median(e["copied"].get(k) for e in later) for k in later[0]["copied"]}
    else:
        cell["copied"] = None
    if later and later[0]["io"] is not None:
        cell["io"] = {k: median(e["io"].get(k) for e in later) for k in later[0]["io"]}
    else:
        cell["io"] = None
    cell["files"] = {k: median(e["files"][k] for e in later) for k in ("read", "written")} if later else None
    return cell


# ---- the runs ----

def store_for(copies: int) -> str:
    chunks = max(1, round(FLAGS.base_chunks * copies ** 0.5))
    path = os.path.join(FLAGS.work_dir, f"reddit-small-x{copies}-s{FLAGS.base_scale}-p{chunks}.store")
    if not os.path.exists(os.path.join(path, "manifest.json")):
        command = [sys.executable, os.path.join(REPO, "tools", "partition_graph.py"), "--preset=reddit-small",
                   f"--scale={FLAGS.base_scale * copies}", "--prepare=gcn", f"--chunks={chunks}",
                   f"--output={path}", "--overwrite", "--noprogress"]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise SystemExit(f"converting x{copies} failed:\n{done.stderr[-3000:]}")
    return path


def graph_in_memory(store):
    """The store's graph, rebuilt in memory from its chunks: original vertex ids, the user's edge order (edge_ids)
    and its edge data (the GCN weights the conversion computed)."""
    import numpy as np  # noqa: PLC0415

    from ngra_tf.store.convert import read_graph  # noqa: PLC0415

    P = store.num_parts
    graph = read_graph(store)
    partition = graph.partition(P)
    same = (np.array_equal(partition.edge_counts, store.edge_counts) and np.array_equal(partition.order, store.order))
    if not same:
        print("  note: the in-memory graph's partition at P differs from the store's (same graph, other chunks)")
    return graph


def time_config(store, config: dict, memory_inputs=None) -> dict:
    import keras  # noqa: PLC0415  (after absl has parsed the flags)

    import ngra_tf  # noqa: PLC0415

    keras.backend.clear_session()
    gc.collect()
    keras.utils.set_random_seed(0)
    schedule = config.get("schedule", "ngra")
    if config.get("memory"):
        graph, features, labels, mask = memory_inputs()
        model = make_model(store, graph, chunks=store.num_parts, schedule=schedule, rewrites=config["rewrites"])
    else:
        model = make_model(store, store, schedule=schedule, memory_budget=FLAGS.memory_budget,
                                   overlap=config["overlap"], rewrites=config["rewrites"],
                                   spill=config.get("spill", FLAGS.spill),
                                   selective=config.get("selective", FLAGS.selective))
        features, labels, mask = store.array("features"), store.array("labels"), store.array("train_mask")
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    timer = make_timer()
    model.fit(features, labels, sample_weight=mask, epochs=FLAGS.epochs + 1, verbose=0, callbacks=[timer])
    cell = summarize(timer.epochs)
    if model.store is not None:
        plan = model.memory_plan()
        cell["host_tier"], cell["smallest_budget"] = plan.host, plan.working_set
        chunks = sum(plan.chunk_bytes.values())
        cell["chunks_bytes"] = chunks
        # The chunk and feature bytes a training step must read: the cache plan's minimum, or all at every pass.
        cell["chunk_reads_min"] = plan.cache.reads_steady if plan.cache is not None else None
        cell["chunk_cache"] = plan.cache.capacity if plan.cache is not None else 0
    return cell


def make_model(store, source, **options):
    """--model over `source` (the store, or its graph in memory)."""
    import dataclasses  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415
    from ngra_tf import recipes  # noqa: PLC0415

    if FLAGS.model == "gcn":
        layers = [ngra_tf.layers.GCN(FLAGS.hidden, activation="relu"), ngra_tf.layers.GCN(store.num_classes())]
        return ngra_tf.GraphModel(source, layers, **options)
    recipe = dataclasses.replace(recipes.RECIPES[FLAGS.model], dropout=0.0, weight_decay=0.0)
    width = int(math.prod(store.vertex_spec("features")[0]))
    return recipes.build_model(FLAGS.model, source, store.num_classes(), hidden=FLAGS.hidden, recipe=recipe,
                               num_features=width, depth=FLAGS.depth, k=FLAGS.k, **options)


def model_label() -> str:
    if FLAGS.model == "gcn":
        return f"GCN ({FLAGS.hidden} hidden)"
    if FLAGS.model == "gat":
        return f"GAT (8 heads x {FLAGS.hidden}, fused attention)"
    shape = f"K={FLAGS.k}" if FLAGS.model == "appnp" else f"{FLAGS.depth} graph layers"
    return f"{FLAGS.model} ({shape}, {FLAGS.hidden} hidden)"


def memory_loader(store):
    """A function giving (graph, features, labels, train mask) in memory, made on first use and then kept."""
    held = {}

    def load():
        if not held:
            held["inputs"] = (graph_in_memory(store), store.array("features").read(), store.array("labels").read(),
                              store.array("train_mask").read())
        return held["inputs"]

    return load


# ---- printing ----

def fmt_s(seconds) -> str:
    return "-" if seconds is None or not math.isfinite(seconds) else f"{seconds:.4f}"


def ratio(a, b):
    return a / b if a is not None and b and math.isfinite(a) and math.isfinite(b) else None


def fmt_x(value) -> str:
    return "-" if value is None else f"{value:.2f}x"


def fmt_mib(count) -> str:
    return "n/a" if count is None else f"{count / MIB:.2f}"


def open_or_usage(path):
    from ngra_tf.store import open_store  # noqa: PLC0415

    try:
        return open_store(path)
    except ValueError as error:
        raise app.UsageError(f"--store: {error}") from None


def run_cell(store, config, memory_inputs=None):
    from ngra_tf.runtime.plan.budget import MemoryBudgetError  # noqa: PLC0415

    try:
        return time_config(store, config, memory_inputs)
    except MemoryBudgetError as error:
        raise app.UsageError(f"--memory_budget: {error}") from None


def fig15(copies, results):
    configs = [name for name in CONFIGS if name in FLAGS.configs]
    timed = [name for name in ("NG-base", "NG-stream", "NG", "in-memory", "NG-serial") if name in configs]
    print(f"NGra Fig. 15: {model_label()} per epoch in seconds: the median of {FLAGS.epochs} epoch(s) "
          f"after the first, and [the first epoch, incl. tracing and graph building]", flush=True)
    head = " ".join(f"{name:>18}" for name in timed)
    print(f"{'graph':>18} {'V':>8} {'E':>10} {'P':>3} | {head} | {'stream/base':>11} {'NG/base':>8} "
          f"{'NG/in-memory':>12}", flush=True)
    rows, speedups = [], {"NG-stream": [], "NG": []}
    if "in-memory" in configs:
        speedups["in-memory"] = []
    targets = [(None, FLAGS.store)] if FLAGS.store else [(k, None) for k in copies]
    section = results.setdefault("fig15", {})
    for k, path in targets:
        store = open_or_usage(path or store_for(k))
        label = f"reddit-small x{k}" if path is None else os.path.basename(path.rstrip("/"))
        load = memory_loader(store)
        cells = {name: run_cell(store, CONFIGS[name], load) for name in configs}
        extra = {}
        if FLAGS.compare_selective:
            extra["NG selective=0.5"] = run_cell(store, dict(CONFIGS["NG"], selective=0.5))
        if FLAGS.compare_spill:
            other = "recompute" if FLAGS.spill == "spill" else "spill"
            extra[f"NG spill={other}"] = run_cell(store, dict(CONFIGS["NG"], spill=other))
        median = {name: cells[name]["median_s"] if name in cells else None for name in CONFIGS}
        stream_x, ng_x = ratio(median["NG-base"], median["NG-stream"]), ratio(median["NG-base"], median["NG"])
        vs_memory = ratio(median["NG"], median["in-memory"])
        rows.append(label)
        speedups["NG-stream"].append(stream_x)
        speedups["NG"].append(ng_x)
        if "in-memory" in speedups:
            speedups["in-memory"].append(ratio(median["NG-base"], median["in-memory"]))
        body = " ".join(f"{fmt_s(cells[n]['median_s']) + ' [' + fmt_s(cells[n]['first_s']) + ']':>18}" for n in timed)
        print(f"{label:>18} {store.num_vertices:>8} {store.num_edges:>10} {store.num_parts:>3} | {body} | "
              f"{fmt_x(stream_x):>11} {fmt_x(ng_x):>8} {fmt_x(vs_memory):>12}", flush=True)
        for name in timed:
            cell = cells[name]
            copied, io = cell["copied"] or {}, cell["io"] or {}
            print(f"  {name}: per steady epoch h2d {fmt_mib(copied.get('h2d'))} MiB, d2h {fmt_mib(copied.get('d2h'))}"
                  f" MiB; process read() {fmt_mib(io.get('rchar'))} MiB, write() {fmt_mib(io.get('wchar'))} MiB, "
                  f"disk read {fmt_mib(io.get('read_bytes'))} MiB, disk write {fmt_mib(io.get('write_bytes'))} MiB"
                  + (f"; host tier {cell['host_tier']}, smallest budget {fmt_mib(cell['smallest_budget'])} MiB"
                     if "host_tier" in cell else "")
                  + f"; final loss {cell['loss'][-1]:.4f}", flush=True)
            if cell.get("files") is not None and "host_tier" in cell:
                floor = cell.get("chunk_reads_min")
                print(f"    file ops per steady epoch: read {fmt_mib(cell['files']['read'])} MiB, wrote "
                      f"{fmt_mib(cell['files']['written'])} MiB (spilled); chunk cache {fmt_mib(cell['chunk_cache'])} "
                      f"MiB of the store's {fmt_mib(cell['chunks_bytes'])} MiB of chunks: a training step reads "
                      + ("every chunk and feature tile at every pass" if floor is None else
                         f"at least {fmt_mib(floor)} MiB of chunks and features"),
                      flush=True)
        if vs_memory is not None:
            verdict = "within" if vs_memory <= GOAL_VS_MEMORY else "MORE than"
            print(f"  NG / in-memory at P={store.num_parts}: {vs_memory:.2f}x, {verdict} the {GOAL_VS_MEMORY}x goal",
                  flush=True)
        if "NG-serial" in cells and "NG" in cells:
            print(f"  overlap with fusion on: NG-serial / NG {fmt_x(ratio(median['NG-serial'], median['NG']))}",
                  flush=True)
        for name, cell in extra.items():
            line = f"  {name}: {fmt_s(cell['median_s'])} s/epoch [{fmt_s(cell['first_s'])}], " \
                   f"{fmt_x(ratio(cell['median_s'], median['NG']))} NG"
            if cell["copied"] and "NG" in cells and cells["NG"]["copied"]:
                h2d, base_h2d = cell["copied"]["h2d"], cells["NG"]["copied"]["h2d"]
                line += f"; h2d {fmt_mib(h2d)} MiB ({fmt_x(ratio(h2d, base_h2d))} NG)"
            print(line, flush=True)
        section[label] = {"num_vertices": store.num_vertices, "num_edges": store.num_edges,
                          "num_parts": store.num_parts, "store": store.path, "cells": {**cells, **extra},
                          "ratios": {"NG-stream/NG-base speedup": stream_x, "NG/NG-base speedup": ng_x,
                                     "NG/in-memory": vs_memory}}
    if FLAGS.plot:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from plots import ratio_chart  # noqa: PLC0415

        ratio_chart(FLAGS.plot, "NGra Fig. 15 here: GCN epoch from a store, speedup over NG-base", rows, speedups,
                    note="NG-base: chunked, explicit copies, no overlap or fusion; NG-stream: + overlap; "
                         "NG: + fused kernels; in-memory: NG's model, graph in memory, same P",
                    xlabel="speedup over NG-base (NG-base steady epoch / this steady epoch)")


def one_store(copies):
    return open_or_usage(FLAGS.store or store_for(copies[0]))


def schedules_mode(copies, results):
    store = one_store(copies)
    budget = FLAGS.memory_budget or "none"
    print(f"NGra Fig. 14 from a store: NG (overlap, rewrites) with each schedule on {store.path} "
          f"(V={store.num_vertices}, E={store.num_edges}, P={store.num_parts}), memory budget {budget}; "
          f"seconds: median of {FLAGS.epochs} epoch(s) after the first, [first]; MiB per steady epoch "
          f"(medians): copy ops h2d/d2h, file ops read/written beside the least a step reads of the chunks and "
          f"features at this budget, process read()/write() (rchar/wchar) and disk (read_bytes/write_bytes)",
          flush=True)
    print(f"{'schedule':>10} | {'steady s':>9} {'first s':>8} | {'h2d':>8} {'d2h':>8} | {'file rd':>8} "
          f"{'file wr':>8} {'least rd':>8} | {'read()':>8} {'write()':>8} {'disk rd':>8} {'disk wr':>8} | "
          f"{'host':>6} | {'time/ngra':>9} {'file rd/ngra':>12} {'h2d/ngra':>8}", flush=True)
    cells = {}
    for schedule in FLAGS.schedule_list:
        cells[schedule] = cell = run_cell(store, dict(CONFIGS["NG"], schedule=schedule))
        copied, io, files = cell["copied"] or {}, cell["io"] or {}, cell["files"] or {}
        first = cells[FLAGS.schedule_list[0]]
        cell["vs_first"] = {"time": ratio(cell["median_s"], first["median_s"]),
                            "file_read": ratio(files.get("read"), (first["files"] or {}).get("read")),
                            "h2d": ratio(copied.get("h2d"), (first["copied"] or {}).get("h2d"))}
        v = cell["vs_first"]
        least = cell["chunk_reads_min"]
        print(f"{schedule:>10} | {fmt_s(cell['median_s']):>9} {fmt_s(cell['first_s']):>8} | "
              f"{fmt_mib(copied.get('h2d')):>8} {fmt_mib(copied.get('d2h')):>8} | {fmt_mib(files.get('read')):>8} "
              f"{fmt_mib(files.get('written')):>8} {fmt_mib(least) if least is not None else 'all':>8} | "
              f"{fmt_mib(io.get('rchar')):>8} {fmt_mib(io.get('wchar')):>8} {fmt_mib(io.get('read_bytes')):>8} "
              f"{fmt_mib(io.get('write_bytes')):>8} | {cell['host_tier']:>6} | {fmt_x(v['time']):>9} "
              f"{fmt_x(v['file_read']):>12} {fmt_x(v['h2d']):>8}", flush=True)
    if FLAGS.schedule_list[0] != "ngra":
        print(f"  (ratios are against {FLAGS.schedule_list[0]}, the first of --schedule_list)")
    print("  h2d / d2h: 0 and h2d/ngra '-' where the device is the host (nothing is copied there); file rd: the "
          "chunks, feature tiles and spills the file ops read; least rd: the chunk and feature bytes a training "
          "step must read with this budget's cache ('all': no cache, every chunk at every pass)", flush=True)
    print("  disk rd / disk wr: bytes the block device served / pages newly dirtied for it; 0 when the page cache "
          "served the reads and absorbed the writes (read() / write() count them either way)", flush=True)
    results["schedules"] = {"store": store.path, "num_parts": store.num_parts, "memory_budget": FLAGS.memory_budget,
                            "against": FLAGS.schedule_list[0], "cells": cells}


def table_order(table) -> str:
    """How a step table walks the chunks: 'column' (by destination interval j), 'row' (by source interval i),
    'either' (both, e.g. P = 1 or a diagonal graph) or 'other'."""
    from ngra_tf.runtime.plan import tables as sched  # noqa: PLC0415

    steps = [(int(r[sched.I]), int(r[sched.J])) for r in table if r[sched.PASS] == sched.MESSAGES]
    by_column = steps == sorted(steps, key=lambda s: (s[1], s[0]))
    by_row = steps == sorted(steps)
    return "either" if by_column and by_row else "column" if by_column else "row" if by_row else "other"


def neugraph_mode(copies, results):
    from ngra_tf.runtime.plan import tables as sched  # noqa: PLC0415

    store = one_store(copies)
    partition = store.partition()
    print(f"NeuGraph's step order (forward column by column, backward row by row) on {store.path} "
          f"(P={store.num_parts}), GCN (no column-wide softmax, so no marker passes):", flush=True)
    orders = {}
    for schedule in sched.SCHEDULES:
        forward = table_order(sched.forward_table(partition, schedule, 0, False))
        backward = table_order(sched.backward_table(partition, 0))
        orders[schedule] = {"forward": forward, "backward": backward}
        words = {"column": "column by column", "row": "row by row", "either": "column and row order alike",
                 "other": "in another order"}
        print(f"  {schedule:>10}: forward {words[forward]}, backward {words[backward]}", flush=True)
    section = results.setdefault("neugraph", {"store": store.path, "num_parts": store.num_parts, "orders": orders})
    if all(o["forward"] == "either" for o in orders.values()):
        print(f"  at P={store.num_parts} every order walks the same steps: use a store with P >= 2", flush=True)
        section["comparison"] = "not measurable at this P"
        return

    def matches(order, want):
        return order in (want, "either")

    neugraph = [s for s, o in orders.items() if matches(o["forward"], "column") and matches(o["backward"], "row")]
    other = [s for s, o in orders.items() if matches(o["forward"], "column") and o["backward"] in ("column", "other")]
    if neugraph:
        print(f"  NeuGraph's order is what {', '.join(neugraph)} already run{'s' if len(neugraph) == 1 else ''}: "
              f"NGra's own schedule walks backward row by row too", flush=True)
    if not neugraph or not other:
        print("  NOT IMPLEMENTED: no schedule walks the same forward with another backward order "
              "(schedule.backward_table takes no schedule: every schedule's backward is row by row), so there "
              "is nothing to time NeuGraph's order against; nothing timed (the forward orders alone: --schedules)",
              flush=True)
        section["comparison"] = "not implemented: every schedule shares the row-by-row backward"
        return
    cells = {s: run_cell(store, dict(CONFIGS["NG"], schedule=s)) for s in neugraph[:1] + other[:1]}
    for s, cell in cells.items():
        print(f"  {s}: {fmt_s(cell['median_s'])} s/epoch [{fmt_s(cell['first_s'])}]", flush=True)
    section["cells"] = cells


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    try:
        copies = [int(c) for c in FLAGS.copies]
    except ValueError:
        raise app.UsageError(f"--copies must be integers, got {FLAGS.copies}") from None
    if not copies or min(copies) < 1:
        raise app.UsageError("--copies must be positive integers")
    unknown = [c for c in FLAGS.configs if c not in CONFIGS]
    if unknown or not FLAGS.configs:
        raise app.UsageError(f"--configs: choose from {', '.join(CONFIGS)}; got {FLAGS.configs}")
    if FLAGS.spill not in ("spill", "recompute"):
        raise app.UsageError(f"--spill must be spill or recompute, got {FLAGS.spill!r}")
    if FLAGS.compare_selective and "NG" not in FLAGS.configs:
        raise app.UsageError("--compare_selective compares against NG: include NG in --configs")
    if FLAGS.compare_spill and "NG" not in FLAGS.configs:
        raise app.UsageError("--compare_spill compares against NG: include NG in --configs")
    if FLAGS.json:
        folder = os.path.dirname(os.path.abspath(FLAGS.json))
        if not os.path.isdir(folder):
            raise app.UsageError(f"--json: no directory {folder}")
    from ngra_tf.runtime.plan.tables import SCHEDULES  # noqa: PLC0415  (loads TensorFlow: after the flags)
    from ngra_tf.store import memory  # noqa: PLC0415

    bad = [s for s in FLAGS.schedule_list if s not in SCHEDULES]
    if bad or not FLAGS.schedule_list:
        raise app.UsageError(f"--schedule_list: choose from {', '.join(SCHEDULES)}; got {FLAGS.schedule_list}")
    try:
        if FLAGS.memory_budget:
            memory.parse_size(FLAGS.memory_budget)
    except ValueError as error:
        raise app.UsageError(f"--memory_budget: {error}") from None
    if FLAGS.store is None:
        os.makedirs(FLAGS.work_dir, exist_ok=True)
    results = {"flags": {name: FLAGS[name].value for name in ("copies", "base_scale", "base_chunks",
                                                              "memory_budget", "hidden", "epochs", "store",
                                                              "spill", "selective")}}
    try:
        if FLAGS.schedules:
            schedules_mode(copies, results)
        if FLAGS.neugraph:
            neugraph_mode(copies, results)
        if not (FLAGS.schedules or FLAGS.neugraph):
            fig15(copies, results)
    finally:
        if FLAGS.json:
            with open(FLAGS.json, "w") as stream:
                json.dump(results, stream, indent=1, default=str)
            print(f"wrote {FLAGS.json}")


if __name__ == "__main__":
    app.run(main)
