"""Converts a graph into an ngra-tf chunk store (P x P edge chunks, vertex arrays per interval).

    # Cora, prepared for GCN (symmetrised, self loops, GCN edge weights), P = 2; its features stored as CSR
    python tools/partition_graph.py --preset=cora --output=/tmp/cora.store --chunks=2

    # A synthetic preset, P chosen so a step's chunk and three feature intervals fit 256 MB, as HDF5
    python tools/partition_graph.py --preset=reddit-middle --output=/tmp/rm.store --memory_budget=256MB \\
        --format=hdf5

    # Your own graph: a text edge list ("src dst [weight]" per line, # comments) or an .npz with
    # src, dst[, edge_data][, num_vertices]; features from .npy, .npz (scipy.sparse's: stored as CSR) or HDF5;
    # labels from .npy
    python tools/partition_graph.py --edges=edges.txt --features=x.h5 --features_key=feat \\
        --labels=y.npy --output=my.store --memory_budget=1GiB

The conversion works within the memory bound: it reads the edges in blocks
(text is parsed once into binary scratch files), counts degrees and chunk
sizes in streaming passes, writes each edge to its chunk's scratch bucket,
then builds one chunk at a time, and copies each vertex array in row blocks.
The store equals `graph.partition(P)` of the same graph exactly
(ngra_tf.store.open_store reads it). Sizes: 256MB and 2GB are powers of
1000, 256MiB, 1.5GiB and 512M powers of 1024.

It prints each pass as it runs (edges or rows done, the rate, the time
left) and a line per pass when it ends, and before the heavy passes how
much disk they need. Both cores are used where blocks, buckets or slabs of
a chunk are independent.

Exit status 1 with a message on bad input (missing file, malformed line,
ids out of range, wrong feature rows, bad flag values, not enough disk); the
output directory is then removed (or emptied, if it existed and --overwrite
was given). Ctrl-C and SIGTERM do the same (exit status 130 and 143). A
conversion killed outright (kill -9) leaves its output directory marked as
unfinished, without a manifest: running the same command again replaces it.
"""

from __future__ import annotations

import os
import signal
import sys
import time

from absl import app, flags

FLAGS = flags.FLAGS
flags.DEFINE_string("edges", None, "Edge list: a text file (src dst [weight] per line, # comments) or an .npz "
                    "with int arrays src and dst, optionally edge_data and num_vertices.")
flags.DEFINE_string("features", None, "Per-vertex features, one row per vertex: .npy, .npz (key: --features_key, "
                    "default 'features') or HDF5 (--features_key names the dataset).")
flags.DEFINE_string("features_key", None, "The array of --features inside an .npz or HDF5 file.")
flags.DEFINE_string("labels", None, "Per-vertex labels (.npy).")
flags.DEFINE_integer("num_vertices", None, "Vertex count of --edges (default: the file's num_vertices, else the "
                     "features' row count, else 1 + the largest id).", lower_bound=0)
flags.DEFINE_string("preset", None, "A dataset by name instead of --edges: cora, amazon_computers or a synthetic "
                    "NGra preset (reddit-small, reddit-middle, ...; see ngra_tf.graph.datasets.PRESETS).")
flags.DEFINE_float("scale", 1.0, "Multiplies a synthetic preset's vertex and edge counts.", lower_bound=1e-6)
flags.DEFINE_integer("seed", 0, "Seed of a synthetic preset.")
flags.DEFINE_enum("prepare", None, ["gcn", "symmetric", "none"], "Graph preparation as ngra_tf.recipes does it: "
                  "gcn (symmetrised, deduplicated, self loops, GCN edge weights), symmetric (the same without "
                  "edge data: commnet, mpgcn, ggcn, gat) or none. Default: gcn for presets, none for files.")
flags.DEFINE_enum("normalize", "auto", ["auto", "row", "l2", "none"], "A preset's feature normalisation: auto "
                  "as examples/train.py trains (cora row, amazon_computers l2, synthetic none), or row sums, "
                  "Euclidean norms (real graphs), none. Files are stored as given.")
flags.DEFINE_enum("feature_format", "auto", ["auto", "sparse", "dense"], "How a real graph's features are stored: "
                  "CSR (sparse), dense, or auto: CSR when under 10% of the entries are non-zero (cora). A "
                  "scipy.sparse .npz given to --features is stored as CSR.")
flags.DEFINE_string("output", None, "The store directory to write.")
flags.DEFINE_enum("format", "npy", ["npy", "hdf5"], "Store format: one .npy per array, or HDF5 files (read "
                  "through tensorflow-io).")
flags.DEFINE_integer("chunks", None, "Vertex intervals P (P x P chunks).", lower_bound=1)
flags.DEFINE_string("memory_budget", None, "Memory to train in (e.g. 256MB, 4GB): the smallest P under which "
                    "examples/train.py --memory_budget accepts the store for --models is chosen, by the trainer's "
                    "own estimate; the conversion also stays within it. With --chunks, it only bounds the "
                    "conversion.")
flags.DEFINE_list("models", ["gcn"], "The models (ngra_tf.recipes names) whose training --memory_budget sizes the "
                  "chunks for: P fits the one that needs the most.")
flags.DEFINE_integer("hidden", None, "Hidden units of --models, as examples/train.py --hidden (default: each "
                     "recipe's).", lower_bound=1)
flags.DEFINE_bool("reencode", True, "Re-encode vertex ids to balance chunk sizes (as Graph.partition).")
flags.DEFINE_bool("overwrite", False, "Replace the contents of a non-empty --output.")
flags.DEFINE_string("scratch_dir", None, "Where temporary files go (default: inside --output).")
flags.DEFINE_bool("progress", True, "Show each pass as it runs (done, rate, time left); without it, only a line "
                  "per pass when it ends.")


class _Progress:
    """Each pass of the conversion as it runs (done, rate, time left) and a line when it ends.

    On a terminal the running line is redrawn in place a few times a second;
    otherwise only the end-of-pass lines are printed (and one every minute).
    """

    _REDRAW_S = 0.25

    def __init__(self, show_running: bool = True, baseline=None):
        from ngra_tf.store import sources  # noqa: PLC0415

        self._unit_of = sources.stage_unit
        self._terminal = sys.stdout.isatty() and show_running
        self._interval = self._REDRAW_S if self._terminal else 60.0
        self._show_running = show_running
        self._baseline = baseline  # (resident.mark(): each pass's end line gives the peak resident so far)
        self._stage = None
        self._last = time.perf_counter()  # a pass starts where the one before it ended

    def __call__(self, stage, done, total):
        now = time.perf_counter()
        if stage != self._stage:
            self.close()
            self._stage, self._start, self._shown = stage, self._last, now
        self._done, self._total, self._last = done, total, now
        if self._show_running and now - self._shown >= self._interval:
            self._shown = now
            self._print(self._line(now), final=False)

    def note(self, line: str) -> None:
        self._print(line, final=True)

    def close(self):
        """Ends the current pass with its summary line."""
        if self._stage is not None:
            self._print(self._line(self._last, ended=True), final=True)
        self._stage = None

    def _line(self, now: float, ended: bool = False) -> str:
        seconds = max(now - self._start, 1e-9)
        unit = self._unit_of(self._stage)
        count = f"{self._done:,}" if self._total is None else f"{self._done:,}/{self._total:,}"
        line = f"{self._stage}: {count} {unit} in {seconds:.1f} s ({_rate(self._done / seconds)} {unit}/s)"
        if not ended and self._total and self._done:
            line += f", {seconds * (self._total - self._done) / self._done:.0f} s left"
        if ended and self._baseline is not None:
            line += f"; peak resident so far {_format_bytes(self._baseline.peak().peak_resident_bytes)}"
        return line

    def _print(self, line: str, final: bool) -> None:
        if self._terminal:
            print(f"\r\033[K{line}", end="\n" if final else "", flush=True)
        elif final or self._show_running:
            print(line, flush=True)


def _format_bytes(count: int) -> str:
    from ngra_tf.store import memory  # noqa: PLC0415

    return memory.format_bytes(count)


def _rate(per_second: float) -> str:
    for scale, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if per_second >= scale:
            return f"{per_second / scale:.1f}{suffix}"
    return f"{per_second:.0f}"


def _interrupt_on_sigterm():
    """SIGTERM unwinds like Ctrl-C, so that the conversion removes what it wrote."""
    def interrupt(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, interrupt)


def _inputs():
    from ngra_tf.store import presets, sources  # noqa: PLC0415

    if FLAGS.preset is not None:
        if FLAGS.edges or FLAGS.features or FLAGS.labels or FLAGS.num_vertices is not None:
            raise ValueError("--preset brings its own edges and vertex data: drop --edges, --features, --labels "
                             "and --num_vertices")
        if FLAGS.preset not in presets.NAMES:
            raise ValueError(f"--preset must be one of {', '.join(presets.NAMES)}; got {FLAGS.preset!r}")
        edges, rows, description = presets.preset_inputs(FLAGS.preset, FLAGS.seed, FLAGS.scale,
                                                         FLAGS.normalize, FLAGS.feature_format)
        return edges, rows, description, FLAGS.prepare or "gcn"
    if not FLAGS.edges:
        raise ValueError("give --edges=FILE or --preset=NAME")
    for name in ("normalize", "feature_format"):
        if FLAGS[name].present:
            raise ValueError(f"--{name} applies to presets; prepare file features before converting (a "
                             f"scipy.sparse .npz is stored as CSR)")
    rows = {}
    if FLAGS.features:
        rows["features"] = sources.rows_from_file(FLAGS.features, FLAGS.features_key)
    if FLAGS.labels:
        rows["labels"] = sources.rows_from_file(FLAGS.labels)
    edges = sources.edges_from_file(FLAGS.edges, FLAGS.num_vertices)
    if edges.num_vertices is None and rows:  # neither the flag nor the file says: the vertex arrays decide
        edges = sources.edges_from_file(FLAGS.edges, next(iter(rows.values())).num_rows)
    description = {"edges": os.path.abspath(FLAGS.edges)}
    if "labels" in rows:  # (what a model's output width is: the trainer's estimate needs it)
        description["num_classes"] = 1 + max(int(block.max(initial=-1)) for block in rows["labels"].blocks(1 << 20))
    description.update({name: row.label for name, row in rows.items()})
    return edges, rows, description, FLAGS.prepare or "none"


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS.output:
        raise app.UsageError("--output is required")
    if FLAGS.chunks is None and FLAGS.memory_budget is None:
        raise app.UsageError("give --chunks=P or --memory_budget=SIZE")
    from ngra_tf.runtime import resident  # noqa: PLC0415  (loads TensorFlow: after the flags)
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.store import convert, memory

    baseline = resident.mark()  # TensorFlow is loaded: what follows is the conversion's
    start = time.perf_counter()
    _interrupt_on_sigterm()
    progress = _Progress(show_running=FLAGS.progress, baseline=baseline)
    try:
        if FLAGS.memory_budget is not None:
            memory.parse_size(FLAGS.memory_budget)
        training = recipes.TrainingMemory(FLAGS.models, FLAGS.hidden)
        edges, rows, description, prepare = _inputs()
        progress = _Progress(show_running=FLAGS.progress, baseline=baseline)  # (its first pass starts here)
        if FLAGS.chunks is None and not ("num_classes" in description and "features" in rows):
            raise ValueError("--memory_budget chooses P for training --models, which needs the features and "
                             "labels (--features and --labels, or a preset); without them give --chunks=P")
        store = convert.convert(FLAGS.output, edges, rows, num_parts=FLAGS.chunks,
                                memory_budget=FLAGS.memory_budget, working_set=training, format=FLAGS.format,
                                reencode=FLAGS.reencode,
                                prepare=prepare, overwrite=FLAGS.overwrite, scratch_dir=FLAGS.scratch_dir,
                                progress=progress, source=description)
        progress.close()
    except (ValueError, OSError) as error:
        progress.close()
        print(f"partition_graph.py: error: {error}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt as interrupt:
        progress.close()
        sigterm = str(interrupt) == f"signal {int(signal.SIGTERM)}"
        print(f"partition_graph.py: interrupted ({'SIGTERM' if sigterm else 'Ctrl-C'}): removed what was written "
              f"to {FLAGS.output}; run the same command again to convert", file=sys.stderr)
        sys.exit(143 if sigterm else 130)
    seconds = time.perf_counter() - start
    size = sum(entry["bytes"] for entry in store.manifest["files"].values())
    balance = store.partition().balance()
    print(f"wrote {store.path}: {store.format}, {store.num_vertices} vertices, {store.num_edges} edges, "
          f"P={store.num_parts} (chunk imbalance {balance['before']:.2f} -> {balance['after']:.2f}), "
          f"vertex arrays {', '.join(store.vertex_names) or 'none'}")
    print(f"store size {resident.format_bytes(size)} ({size} bytes)")
    if "num_classes" in store.manifest["source"] and "features" in store.vertex_names:
        print(f"training (the trainer's estimate): {training(store)[1]}")
    peak = baseline.peak()
    print(f"converted in {seconds:.1f} s; {peak} ({peak.above_baseline_bytes} bytes above the baseline)")


if __name__ == "__main__":
    app.run(main)
