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

Exit status 1 with a message on bad input (missing file, malformed line,
ids out of range, wrong feature rows, bad flag values); the output directory
is then removed (or emptied, if it existed and --overwrite was given).
"""

from __future__ import annotations

import os
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
flags.DEFINE_string("memory_budget", None, "Memory for one training step (e.g. 256MB, 2GiB): the smallest P whose "
                    "largest chunk plus 3 intervals of vertex rows fit is chosen; the conversion also sizes its "
                    "blocks from it. With --chunks, only the blocks.")
flags.DEFINE_bool("reencode", True, "Re-encode vertex ids to balance chunk sizes (as Graph.partition).")
flags.DEFINE_bool("overwrite", False, "Replace the contents of a non-empty --output.")
flags.DEFINE_string("scratch_dir", None, "Where temporary files go (default: inside --output).")
flags.DEFINE_bool("progress", True, "Show a progress bar per pass.")


class _Progress:
    """A Keras progress bar per stage of the conversion (one line per stage when not on a terminal)."""

    def __init__(self):
        import keras  # noqa: PLC0415

        self._progbar_class = keras.utils.Progbar
        self._verbose = 1 if sys.stdout.isatty() else 2
        self._stage, self._bar, self._done, self._start = None, None, 0, 0.0

    def __call__(self, stage, done, total):
        if stage != self._stage:
            self.close()
            self._stage, self._start = stage, time.perf_counter()
            print(f"{stage}:", flush=True)
            self._bar = self._progbar_class(total, verbose=self._verbose, unit_name="item")
        self._done = done
        self._bar.update(done, finalize=total is not None and done >= total)

    def close(self):
        """Ends the last stage's bar (a stage of unknown length ends when the next begins)."""
        if self._bar is not None and self._bar.target is None:
            self._bar.update(self._done, finalize=True)
            if self._verbose == 2:  # Progbar prints no summary line for an unknown length
                print(f"{self._done} - {time.perf_counter() - self._start:.0f}s", flush=True)
        self._bar = None


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
    from ngra_tf.store import convert, memory

    baseline = resident.mark()  # TensorFlow is loaded: what follows is the conversion's
    start = time.perf_counter()
    try:
        if FLAGS.memory_budget is not None:
            memory.parse_size(FLAGS.memory_budget)
        edges, rows, description, prepare = _inputs()
        progress = _Progress() if FLAGS.progress else None
        store = convert.convert(FLAGS.output, edges, rows, num_parts=FLAGS.chunks,
                                memory_budget=FLAGS.memory_budget, format=FLAGS.format, reencode=FLAGS.reencode,
                                prepare=prepare, overwrite=FLAGS.overwrite, scratch_dir=FLAGS.scratch_dir,
                                progress=progress, source=description)
        if progress is not None:
            progress.close()
    except (ValueError, OSError) as error:
        print(f"partition_graph.py: error: {error}", file=sys.stderr)
        sys.exit(1)
    seconds = time.perf_counter() - start
    row_nbytes = sum(store.row_nbytes(name) for name in store.vertex_names)
    edge_row_nbytes = 0 if store.edge_data_spec is None else (
        store.edge_data_spec[1].itemsize * _prod(store.edge_data_spec[0]))
    step = memory.partition_step_nbytes(store.edge_counts, store.bounds, row_nbytes, edge_row_nbytes)
    size = sum(entry["bytes"] for entry in store.manifest["files"].values())
    balance = store.partition().balance()
    print(f"wrote {store.path}: {store.format}, {store.num_vertices} vertices, {store.num_edges} edges, "
          f"P={store.num_parts} (chunk imbalance {balance['before']:.2f} -> {balance['after']:.2f}), "
          f"vertex arrays {', '.join(store.vertex_names) or 'none'}")
    print(f"store size {resident.format_bytes(size)} ({size} bytes); per-step working set "
          f"{resident.format_bytes(step)} (largest chunk + 3 intervals of vertex rows)")
    peak = baseline.peak()
    print(f"converted in {seconds:.1f} s; {peak} ({peak.above_baseline_bytes} bytes above the baseline)")


def _prod(shape) -> int:
    result = 1
    for size in shape:
        result *= int(size)
    return result


if __name__ == "__main__":
    app.run(main)
