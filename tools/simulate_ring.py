"""NGra Fig. 16's shape, simulated: speedup from 1 to 8 GPUs with ring, chain and no chunk sharing.

    python tools/simulate_ring.py                                   # paper-8gpu, 1 2 4 8 GPUs
    python tools/simulate_ring.py --out=docs/results/ring.png --json=/tmp/ring.json
    python tools/simulate_ring.py --topology=my-box.txt --compute_ms=4.1 --chunk_mb=48   # a measured run
    python tools/simulate_ring.py --store=/tmp/reddit-full.store          # P, chunk bytes, tile compute measured

A discrete-event simulation (ngra_tf/parallel/simulate.py) of one GNN layer
streamed through the first n GPUs of --topology (a sample in
ngra_tf/parallel/topologies/, an `nvidia-smi topo -m` dump, or JSON):

    ring   NGra: the GPUs form a ring; only the maximal bandwidth fat-tree's
           GPUs load from host memory, in turn, and each chunk goes round
    chain  NeuGraph: the GPUs under each PCIe switch form a chain that loads
           every chunk once
    none   every GPU loads every chunk from host memory (Fig. 16's "non-ring")

Assumptions (printed with the results too):
- Links are the topology's, GB/s per direction, full duplex; the transfers
  on one direction of a link share it max-min fairly; no latency, no
  per-copy overhead. paper-8gpu: PCIe 3.0 x16 at 12 GB/s, QPI at 9.6.
- Host memory is one node, on socket 0 (TensorFlow allocates without regard
  to NUMA, NGra §6.3), so socket-1 GPUs load, and the ring crosses, over QPI.
- One layer in NGra's destination-major order: P = --chunks vertex chunks
  and as many destination intervals, each GPU owning P / n of them and
  seeing all P source chunks stream past once per interval it owns. A tile
  (source chunk x destination interval) costs the same compute on any GPU;
  copies do not slow compute. Edge chunks, ApplyVertex, accumulator swaps
  and the backward pass are left out.
- Each GPU receives one chunk at a time, has at most --buffer chunks arrived
  or arriving that it has not computed, and keeps a computed chunk until
  the next GPU of its route has it.

Calibration. On one GPU a tile costs max(t0, c): c its compute, t0 one
chunk's load from the host (chunk bytes / 12 GB/s). Without the ring GPU0
and GPU1 share their switch's x16 uplink, so each load takes 2 t0 and, each
doing half the tiles, the speedup is 2 max(t0, c) / max(2 t0, c) = c / t0
for t0 <= c <= 2 t0: Fig. 16's non-ring 1.06x gives c = 1.06 t0
(--compute_ratio). With the ring GPU1 copies from GPU0 through the switch
on links of its own, a tile costs max(t0, c) again, so the speedup is 2x
less pipeline fill and drain: P = 16 gives 1.98x (Fig. 16: 1.93x; P = 8
would give 1.92x but also 3.3x at 4 GPUs, short of the paper's near-linear).
To calibrate from a run: c is a tile's compute time (one fused tile op's time
in a profile: tools/trace_summary.py sums NgraFusedGather per step) and t0 is
the chunk bytes over the measured host-to-device bandwidth (the copy_h2d
events of the same profile, or tools/bench_streaming.py's bytes per epoch
over its time); pass --compute_ms=c and --chunk_mb, or --compute_ratio=c/t0.
--store measures them from a chunk store instead: P is the store's, the
chunk is its largest (its bytes as read), and c is fused_gather's median time
over it (GCN's program, --width features, on this machine's default device).
The links stay the topology's: they are assumed, not measured.
"""

from __future__ import annotations

import json
import os

from absl import app, flags

from ngra_tf.parallel import PLACEMENTS, Topology, TopologyError, place
from ngra_tf.parallel import simulate

FLAGS = flags.FLAGS
PAPER = {"ring": 1.93, "none": 1.06}  # NGra Fig. 16, 1 -> 2 GPUs, the mean over 5 models x 2 graphs

flags.DEFINE_string("topology", "paper-8gpu", "A sample topology's name (ngra_tf/parallel/topologies/) or the "
                    "path of an `nvidia-smi topo -m` dump or a JSON topology.")
flags.DEFINE_list("devices", ["1", "2", "4", "8"], "GPU counts: the first n GPUs of the topology.")
flags.DEFINE_list("placements", list(PLACEMENTS), f"Placements to compare: {', '.join(PLACEMENTS)}.")
flags.DEFINE_integer("chunks", simulate.INTERVALS, "P: vertex chunks (and destination intervals) of the layer.",
                     lower_bound=1)
flags.DEFINE_float("chunk_mb", simulate.CHUNK_BYTES / 1e6, "Bytes of one vertex chunk, in MB (10^6).")
flags.DEFINE_float("compute_ratio", simulate.COMPUTE_PER_LOAD, "A tile's compute time over one chunk's load "
                   "from the host by the first GPU alone (1.06: Fig. 16's calibration).")
flags.DEFINE_float("compute_ms", None, "A tile's compute time in ms, measured; overrides --compute_ratio.")
flags.DEFINE_integer("buffer", simulate.BUFFER, "Chunks a GPU may have arrived or arriving but not computed.",
                     lower_bound=1)
flags.DEFINE_string("store", None, "Calibrate from a chunk store (tools/partition_graph.py): --chunks, --chunk_mb "
                    "and --compute_ms become its P, its largest chunk's bytes and fused_gather's time over that "
                    "chunk here (the links stay the topology's).")
flags.DEFINE_integer("width", 16, "With --store: the feature width a tile propagates (GCN hidden 16: 16).",
                     lower_bound=1)
flags.DEFINE_string("out", None, "Write a PNG of speedup against GPU count here (needs matplotlib).")
flags.DEFINE_string("json", None, "Write the speedups, times and traffic here as JSON.")


def load_topology(value: str) -> Topology:
    return Topology.load(value) if os.path.exists(value) else Topology.sample(value)


def _check_topology(value):
    try:
        load_topology(value)
    except (TopologyError, OSError) as error:
        raise flags.ValidationError(str(error)) from None
    return True


def _check_devices(values):
    counts = values["devices"]
    if not counts or not all(count.isdigit() and int(count) >= 1 for count in counts):
        raise flags.ValidationError(f"--devices must be GPU counts >= 1, got {','.join(counts)}")
    try:
        have = len(load_topology(values["topology"]).devices)
    except (TopologyError, OSError):
        return True  # --topology's own check says why
    if max(map(int, counts)) > have:
        raise flags.ValidationError(f"--devices={','.join(counts)}: the topology {values['topology']} has only "
                                    f"{have} GPUs")
    return True


def _check_placements(values):
    unknown = [value for value in values if value not in PLACEMENTS]
    if unknown or not values:
        raise flags.ValidationError(f"unknown placements {unknown}; choose from {', '.join(PLACEMENTS)}")
    return True


flags.register_validator("topology", _check_topology)
flags.register_multi_flags_validator(["devices", "topology"], _check_devices)
flags.register_validator("placements", _check_placements)
for _name in ("chunk_mb", "compute_ratio", "compute_ms"):
    flags.register_validator(_name, lambda value: value is None or value > 0, message="must be > 0")


def assumptions(topology, counts, chunk_bytes, load_s, tile_s) -> list[str]:
    links = sorted({(link.kind, link.bandwidth) for link in [*topology.uplink.values(), *topology.peers]})
    how = (f"--compute_ms={FLAGS.compute_ms:g}" if FLAGS.compute_ms else
           f"{FLAGS.compute_ratio:g} x the load, --compute_ratio")
    return [
        f"topology {topology.name}: {len(topology.devices)} GPUs; links, GB/s per direction: "
        + ", ".join(f"{kind} {bandwidth:g}" for kind, bandwidth in links)
        + "; full duplex, shared max-min fairly, no latency",
        f"host memory: node {topology.root!r} (socket 0: TensorFlow allocates without regard to NUMA), so GPUs "
        "on other sockets load across QPI",
        f"layer: P = {FLAGS.chunks} chunks of {chunk_bytes / 1e6:g} MB, destination-major: each GPU owns P / n "
        f"destination intervals and sees all P chunks once per interval",
        f"a chunk's host load by {topology.devices[0]} alone: {load_s * 1e3:.2f} ms; a tile's compute: "
        f"{tile_s * 1e3:.2f} ms ({how}); copies overlap compute; a GPU holds at most {FLAGS.buffer} chunk(s) "
        "arrived or arriving but not computed",
    ] + [f"P = {FLAGS.chunks} is not a multiple of {n}: some of the {n} GPUs only forward in the last round"
         for n in counts if FLAGS.chunks % n]


def busiest_link(run) -> str:
    """The link direction busiest over the run, and how busy: near 100%, it bounds the speedup."""
    shares = {key: nbytes / (key[0].bandwidth * simulate.GB) / run.time_s for key, nbytes in run.link_bytes.items()}
    (link, direction), share = max(shares.items(), key=lambda item: item[1])
    return f"{link.a}-{link.b} {link.kind} {direction} {share:.0%}"


def table(counts, kinds, cell) -> list[str]:
    lines = ["devices  " + "".join(f"{kind:>9}" for kind in kinds)]
    lines += [f"{n:<9}" + "".join(f"{cell(kind, n):>9}" for kind in kinds) for n in counts]
    return lines


def speedup_chart(path, title, counts, speedups, note):
    """Speedup against GPU count, one line per placement, ideal dashed, Fig. 16's 2-GPU means as stars."""
    try:
        import matplotlib  # noqa: PLC0415  (optional)

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        print(f"matplotlib is not installed (pip install matplotlib): {path} not written")
        return False
    fig, ax = plt.subplots(figsize=(6.4, 4.6))
    ax.plot(counts, counts, linestyle="--", color="gray", linewidth=0.8, label="linear")
    styles = {"ring": ("o", "-"), "chain": ("s", "-."), "none": ("^", ":")}
    for kind, by_count in speedups.items():
        marker, line = styles[kind]
        ax.plot(counts, [by_count[n] for n in counts], marker=marker, linestyle=line, label=f"{kind} (simulated)")
    for kind, value in PAPER.items():
        label = "NGra Fig. 16, " + ("ring-based" if kind == "ring" else "non-ring") + f": {value}x"
        ax.scatter([2], [value], marker="*", s=160, zorder=3, color="black" if kind == "ring" else "red",
                   label=label)
    ax.set_xscale("log", base=2)  # as in Fig. 16: 1, 2, 4, 8 evenly spaced on both axes
    ax.set_yscale("log", base=2)
    ax.set_xticks(counts, [str(n) for n in counts])
    ax.set_yticks(counts, [str(n) for n in counts])
    ax.set_xlabel("GPUs")
    ax.set_ylabel("speedup over 1 GPU")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
    fig.text(0.01, 0.01, note, fontsize=7, color="gray")
    fig.tight_layout(rect=(0, 0.04, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")
    return True


def measure_tile(path, width: int) -> tuple:
    """(P, MB of the largest chunk, ms of fused_gather over it) of a store, timed here (median of 5)."""
    import numpy as np  # noqa: PLC0415  (TensorFlow loads only for a measurement)
    import tensorflow as tf  # noqa: PLC0415

    from ngra_tf import ops  # noqa: PLC0415
    from ngra_tf.store import open_store  # noqa: PLC0415
    from timing import median_ms  # noqa: PLC0415

    store = open_store(path)
    i, j = np.unravel_index(int(np.argmax(store.edge_counts)), store.edge_counts.shape)
    chunk = store.chunk(int(i), int(j))
    x = tf.random.normal([chunk.adjacency.num_src, width])
    program = "copy_src" if chunk.edge_data is None else "src_mul_edge"
    ms = median_ms(lambda: ops.fused_gather(chunk, x, program=program).numpy(), repeats=5)
    mb = store.chunk_nbytes(int(i), int(j)) / 1e6
    print(f"measured on {path}: P = {store.num_parts}; the largest chunk C[{i}][{j}], {chunk.num_edges} edges, "
          f"{mb:.1f} MB; fused_gather ({program}, {width} features) over it: {ms:.1f} ms (median of 5)")
    return store.num_parts, mb, ms


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    topology = load_topology(FLAGS.topology)
    if FLAGS.store:
        for name in ("chunks", "chunk_mb", "compute_ms", "compute_ratio"):
            if FLAGS[name].present:
                raise app.UsageError(f"--store measures what --{name} would set: give one or the other")
        try:
            FLAGS.chunks, FLAGS.chunk_mb, FLAGS.compute_ms = measure_tile(FLAGS.store, FLAGS.width)
        except ValueError as error:  # (open_store names the problem)
            raise app.UsageError(f"--store: {error}") from None
    counts = sorted({int(n) for n in FLAGS.devices})
    kinds = list(dict.fromkeys(FLAGS.placements))
    chunk_bytes = FLAGS.chunk_mb * 1e6
    load_s = simulate.load_s(topology, chunk_bytes)
    tile_s = FLAGS.compute_ms / 1e3 if FLAGS.compute_ms else FLAGS.compute_ratio * load_s
    results = simulate.sweep(topology, counts, kinds, intervals=FLAGS.chunks, chunk_bytes=chunk_bytes,
                             tile_s=tile_s, buffer=FLAGS.buffer)
    speedups = simulate.speedups(results)
    lines = assumptions(topology, counts, chunk_bytes, load_s, tile_s)
    print("\n".join(lines))
    print("\n".join(table(counts, kinds, lambda kind, n: f"{speedups[kind][n]:.2f}x")))
    print("NGra Fig. 16, 1 -> 2 GPUs (mean over 5 models x 2 graphs): ring 1.93x, non-ring 1.06x")
    print("host -> device GB per layer:")
    print("\n".join(table(counts, kinds, lambda kind, n: f"{results[kind][n].host_bytes / 1e9:.2f}")))
    print("busiest link direction (busy share of the run):")
    print("\n".join(f"  {kind:>5} x{n}: {busiest_link(run)}" for kind, runs in results.items()
                     for n, run in runs.items() if n in counts and n > 1))
    if "ring" in kinds:
        print("ring loaders (maximal bandwidth fat-tree): " + "; ".join(
            f"{n}: {' '.join(place(topology, 'ring', topology.devices[:n]).loaders)}" for n in counts))
    if "ring" in kinds and "none" in kinds:
        print("host traffic none / ring: " + "  ".join(
            f"{n}: {results['none'][n].host_bytes / results['ring'][n].host_bytes:.2f}x" for n in counts))
    if FLAGS.json:
        with open(FLAGS.json, "w") as file:
            json.dump({"topology": topology.name, "assumptions": lines,
                       "workload": {"chunks": FLAGS.chunks, "chunk_bytes": chunk_bytes, "tile_s": tile_s,
                                    "load_s": load_s, "buffer": FLAGS.buffer},
                       "runs": {kind: {n: {"speedup": speedups[kind][n], "time_s": run.time_s,
                                           "host_bytes": run.host_bytes, "d2d_bytes": run.d2d_bytes}
                                       for n, run in runs.items() if n in counts}
                                for kind, runs in results.items()}}, file, indent=1)
        print(f"wrote {FLAGS.json}")
    if FLAGS.out:
        note = (f"simulated: P = {FLAGS.chunks} chunks of {FLAGS.chunk_mb:g} MB, tile compute "
                f"{tile_s / load_s:.2f} x a chunk's host load; host memory on socket 0")
        speedup_chart(FLAGS.out, f"NGra Fig. 16's shape on {topology.name}: one layer", counts,
                      {kind: speedups[kind] for kind in kinds}, note)


if __name__ == "__main__":
    app.run(main)
