"""Trains a SAGA-NN model for node classification and prints its test accuracy.

    python examples/train.py --model=gcn --dataset=cora --epochs=200 --hidden=16 --lr=0.01

Models: gcn, commnet, mpgcn, ggcn, ggnn, gat, sage, gin, appnp, resgcn, jknet, rgcn (ngra_tf.recipes).
Datasets: cora and amazon_computers (real graphs shipped with ngra_tf), a .npz in their
layout, or a synthetic preset shaped like NGra's Table 1 (pubmed, protein,
blog, reddit-small, ...) with random features and labels. A real graph's
bag-of-words features are normalised as the data calls for (--normalize) and
stay sparse up to the first matmul where few are non-zero (--features).
--profile_dir writes a TensorBoard profile of a few training steps;
--history_json writes each epoch's loss and metrics, each epoch's wall time
(epoch_seconds) and the run's measured peak memory, at full precision.

Each run prints its first epoch's time apart (it includes tracing and building
the graph, often several times a later epoch) and the median of the later
epochs, the steady state (one epoch alone has none):

    ... test accuracy 0.8120 after 200 epochs (first epoch 2.41 s incl. tracing; then 9.6 ms/epoch, median of 199)

--store trains from a chunk store written by tools/partition_graph.py instead
(features, labels and masks stay on disk; chunks stream through memory), under
--memory_budget:

    python tools/partition_graph.py --preset=reddit-middle --prepare=gcn --chunks=8 --output=/tmp/rm.store
    python examples/train.py --model=gcn --store=/tmp/rm.store --memory_budget=256MB --epochs=5

--devices=N spreads the graph layers over N devices (the first N GPUs, or N
logical CPU devices on a machine without one), each owning --chunks/N
destination intervals; --placement says how vertex rows reach them: NGra's
ring (loaded from the host once, forwarded device to device), NeuGraph's
chain per PCIe switch, or none (every device loads everything):

    python examples/train.py --model=gcn --chunks=8 --devices=4 --placement=ring

--cluster (or the TF_CONFIG environment variable) trains over the devices of
a TensorFlow cluster whose workers run examples/worker.py.

--backup_dir keeps a backup of the training state after every epoch (Keras's
BackupAndRestore): a run that is killed, or that loses a worker, resumes
from its last finished epoch when the same command runs again, with the
losses an uninterrupted run has.
"""

import os
import signal
import sys
import time

import keras
import numpy as np
import scipy.sparse
import tensorflow as tf
from absl import app, flags, logging

import ngra_tf
from ngra_tf import recipes
from ngra_tf.compiler import REWRITES
from ngra_tf.runtime.plan.tables import SCHEDULES
from ngra_tf.graph import datasets
from ngra_tf import parallel
from ngra_tf.ops import copy_stats
from ngra_tf.parallel.topology import SAMPLES
from ngra_tf.runtime import faults, resident
from ngra_tf.runtime.plan import budget
from ngra_tf.store import StoreError, integrity, memory, open_store

FLAGS = flags.FLAGS
DEVICES = None  # what --devices / --cluster resolved to (set up in main, before TensorFlow starts)
TOPOLOGY = None  # --topology, read
flags.DEFINE_enum("model", "gcn", list(recipes.RECIPES), "The model to train.")
flags.DEFINE_string("dataset", "cora", ", ".join(datasets.SHIPPED) + ", a .npz in their format (the Planetoid "
                    "arrays, docs/guide/keras.md), or a synthetic preset: " + ", ".join(datasets.PRESETS) + ".")
flags.DEFINE_enum("normalize", "auto", list(datasets.NORMALIZATIONS), "How a real graph's features are normalised: "
                  "row (divided by their sum), l2 (by their norm), none, or auto (chosen for the data: "
                  "ngra_tf.graph.datasets.auto_normalization).")
flags.DEFINE_enum("features", "auto", ["auto", "sparse", "dense"], "Whether a real graph's features reach the model "
                  "sparse (a sparse-dense product in the first layer) or dense; auto: sparse when under "
                  f"{datasets.SPARSE_DENSITY:.0%} of them are non-zero.")
flags.DEFINE_integer("epochs", None, "Training epochs (default: the model's recipe).", lower_bound=1)
flags.DEFINE_integer("hidden", None, "Hidden units of the first graph layer, per head for GAT "
                     "(default: the model's recipe).", lower_bound=1)
flags.DEFINE_float("lr", None, "Adam learning rate (default: the model's recipe).", lower_bound=0)
flags.DEFINE_float("weight_decay", None, "L2 on the first layer's kernels (default: the recipe's).", lower_bound=0)
flags.DEFINE_float("dropout", None, "Dropout rate (default: the recipe's).", lower_bound=0, upper_bound=1)
flags.DEFINE_integer("patience", None, "Early-stopping patience on validation loss; 0 disables "
                     "(default: the recipe's).", lower_bound=0)
flags.DEFINE_integer("depth", None, "Graph layers of resgcn (default 4) and jknet (default 3).", lower_bound=2)
flags.DEFINE_integer("k", 10, "APPNP's propagation steps.", lower_bound=1)
flags.DEFINE_float("alpha", 0.1, "APPNP's teleport probability.", lower_bound=0, upper_bound=1)
flags.DEFINE_float("attention_dropout", None, "GAT's dropout on the attention weights (default: --dropout), drawn "
                   "at each edge's id: the attention fuses into one kernel per chunk (online softmax) with or "
                   "without it, and trains from a store with chunk-sized steps.", lower_bound=0, upper_bound=0.999)
flags.DEFINE_integer("chunks", 1, "Vertex intervals P: each graph layer runs over P x P edge chunks (with "
                     "--store, the store's own P: leave it out).", lower_bound=1)
flags.DEFINE_enum("schedule", "ngra", list(SCHEDULES), "Order of the chunk steps (NGra §6.2): ngra (column by "
                  "column, ApplyVertex as each column completes), stage (all chunks, then all ApplyVertex) or "
                  "dest-order (row by row).")
flags.DEFINE_list("rewrites", list(REWRITES), "Compiler rewrites to apply, from " + ", ".join(REWRITES)
                  + "; 'none' for none.")
flags.DEFINE_integer("validation_freq", 1, "Validate every this many epochs (0: never). On a large store a "
                     "validation pass reads every chunk once more.", lower_bound=0)
flags.DEFINE_bool("explain", False, "Print the compiled plan of every graph layer before training.")
flags.DEFINE_integer("seed", 0, "Random seed (weights, dropout, synthetic data).")
flags.DEFINE_integer("runs", 1, "Train this many times with seeds seed, seed+1, ... and report the mean.",
                     lower_bound=1)
flags.DEFINE_string("profile_dir", None, "If set, write a TensorFlow profiler trace of training steps here.")
flags.DEFINE_string("history_json", None, "If set, write the training history here as JSON: every epoch's loss "
                    "and metrics at full precision, every epoch's wall time (epoch_seconds; the first includes "
                    "tracing) beside the whole fit's (seconds), the test metrics, and the peak resident memory "
                    "above the baseline (taken once TensorFlow is up, before the dataset is read).")
flags.DEFINE_string("store", None, "Train from this chunk store (tools/partition_graph.py) instead of --dataset: "
                    "features, labels and masks stay on disk and chunks stream through memory. Convert with "
                    "--prepare=gcn for gcn and --prepare=symmetric for the others.")
flags.DEFINE_string("memory_budget", None, "With --store: memory for the streamed steps (e.g. 256MB, 1GiB). A "
                    "budget too small fails at once, naming the smallest that works. Default: unbounded.")
flags.DEFINE_enum("spill", "spill", ["spill", "recompute"], "With --store: what backward needs from the "
                  "forward is kept in the host tier and reloaded (spill), or recomputed from each layer's input.")
flags.DEFINE_float("selective", 0.0, "With --store: a chunk whose edges leave from fewer than this fraction of its "
                   "source interval copies only those rows (NeuGraph's selective scheduling; 0: off).",
                   lower_bound=0, upper_bound=1)
flags.DEFINE_bool("overlap", True, "With --store: read the next chunk while the current one computes.")
flags.DEFINE_string("spill_dir", None, "With --store: keep the host tier (activations, spills) in this directory "
                    "(default: memory, or a temporary directory when the budget needs disk).")
flags.DEFINE_integer("devices", None, "Train over this many devices: the first GPUs, or logical CPU devices where "
                     "there is no GPU (or the cluster's devices, with --cluster). Needs --chunks >= devices.",
                     lower_bound=1)
flags.DEFINE_enum("placement", "ring", list(parallel.PLACEMENTS), "With --devices: how vertex rows reach the "
                  "devices: ring (NGra: loaded from the host once, forwarded device to device), chain (NeuGraph: "
                  "one chain per PCIe switch), none (every device loads every interval).")
flags.DEFINE_string("topology", None, "With --devices: the machine's topology, as `nvidia-smi topo -m` output or "
                    "JSON (a path, or a sample: " + ", ".join(sorted(p.stem for p in SAMPLES.glob("*.txt"))) + "); "
                    "default: one PCIe switch over the devices.")
flags.DEFINE_list("cluster", None, "Train over a TensorFlow cluster: the workers' host:port addresses (each runs "
                  "examples/worker.py). Default: the cluster in $TF_CONFIG, if set.")
flags.DEFINE_float("worker_wait", 60, "With --cluster: seconds to wait for workers that are not up yet.",
                   lower_bound=0)
flags.DEFINE_string("backup_dir", None, "Back up the training state here after every epoch; run the same command "
                    "again after a crash or a lost worker and training resumes from the last finished epoch. "
                    "Removed when training ends.")
flags.DEFINE_integer("verbose", 0, "Keras verbosity for fit (0 silent, 1 progress bar, 2 one line per epoch).")


class EpochTimer(keras.callbacks.Callback):
    """Every epoch's wall time in seconds, validation included (the first also traces and builds the graph)."""

    def __init__(self):
        super().__init__()
        self.seconds = []
        self._start = None
        self.epoch = None  # the epoch running (0-based), for messages

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


def describe_timing(epoch_seconds):
    """The first epoch apart (it includes tracing), then the median of the later ones: the steady state."""
    first = f"first epoch {epoch_seconds[0]:.2f} s incl. tracing"
    later = epoch_seconds[1:]
    if not later:
        return f"{first}; no steady-state figure from a single epoch"
    return f"{first}; then {1e3 * np.median(later):.1f} ms/epoch, median of {len(later)}"


def describe_traffic(traffic, plan):
    """Bytes read from the store (and spill files) per epoch, the first apart, against the least a training
    step reads at this budget by the plan's chunk cache (ngra_tf.runtime.plan.budget)."""
    first = f"first epoch {resident.format_bytes(traffic.read[0])}"
    later = (f"then {resident.format_bytes(int(np.median(traffic.read[1:])))}/epoch, median of "
             f"{len(traffic.read) - 1}" if len(traffic.read) > 1 else "no later epoch")
    validation = f", validation every {FLAGS.validation_freq} epochs included" if FLAGS.validation_freq else ""
    spilled = int(np.median(traffic.written[1:] or traffic.written))
    least = ("no chunk cache: every chunk is read at every pass" if plan.cache is None else
             f"a training step's least at this budget {resident.format_bytes(plan.cache.reads_steady + spilled)} "
             f"(the store's {resident.format_bytes(plan.cache.reads_steady)} by the chunk cache's plan, and what "
             f"was spilled, read back once)")
    return (f"read from the store and spill files: {first}; {later}{validation}; {least}; spill files written "
            f"{resident.format_bytes(spilled)}/epoch")


class Inputs:
    """What a run trains on: a graph and arrays in memory, or a store and handles on its arrays."""

    def __init__(self, graph, features, labels, masks, num_classes, name):
        self.graph, self.features, self.labels = graph, features, labels
        self.num_classes, self.name = num_classes, name
        self.train, self.val, self.test = masks


def load(name, seed):
    if name in datasets.PRESETS:
        dataset = datasets.synthetic(name, seed=seed)
    elif name in datasets.SHIPPED:
        dataset = datasets.load(name)
    elif not os.path.isfile(name):
        raise app.UsageError(f"--dataset: {name} is neither a dataset ({', '.join(datasets.SHIPPED)}, "
                             f"{', '.join(datasets.PRESETS)}) nor a file")
    else:
        try:
            dataset = datasets.load_planetoid_npz(name)
        except (OSError, ValueError) as error:  # (np.load's own errors for a file that is no .npz)
            raise app.UsageError(f"--dataset: {name}: {error}") from None
    return dataset_inputs(dataset, name)


def dataset_inputs(dataset, name):
    """An in-memory dataset as training inputs: its graph prepared for --model, its features."""
    graph = recipes.prepare_graph(FLAGS.model, dataset.graph)
    if name in datasets.PRESETS:  # standard normal: nothing to normalise, nothing sparse
        features = dataset.dense_features()
    else:  # (over several devices features are dense: validate_flags refuses --features=sparse there)
        several = DEVICES is not None or cluster_flag() is not None
        features = dataset.training_features(FLAGS.normalize, "auto" if FLAGS.features == "auto" and not several
                                             else FLAGS.features == "sparse")
    return Inputs(graph, features, dataset.labels, (dataset.train_mask, dataset.val_mask, dataset.test_mask),
                  dataset.num_classes, name)


def load_store(path):
    try:
        store = open_store(path)
    except ValueError as error:
        raise app.UsageError(f"--store: {error}") from None
    missing = {"features", "labels", "train_mask", "val_mask", "test_mask"} - set(store.vertex_names)
    if missing:
        raise app.UsageError(f"--store: {path} has no {', '.join(sorted(missing))} (it has "
                             f"{', '.join(store.vertex_names) or 'no vertex arrays'})")
    prepared = store.manifest.get("source", {}).get("edges", {}).get("kind", "")
    if FLAGS.model == "gcn" and (store.edge_data_spec is None or "gcn" not in prepared):
        raise app.UsageError("--store: gcn needs a store prepared for it (edge weights): convert with --prepare=gcn")
    if FLAGS["chunks"].present and FLAGS.chunks != store.num_parts:
        raise app.UsageError(f"--chunks={FLAGS.chunks}, but {path} is partitioned into {store.num_parts} x "
                             f"{store.num_parts} chunks: leave --chunks out, or convert the graph again with "
                             f"--chunks={FLAGS.chunks}")
    masks = tuple(store.array(name) for name in ("train_mask", "val_mask", "test_mask"))
    return Inputs(store, store.array("features"), store.array("labels"), masks, store.num_classes(), path)


def train_once(inputs, seed):
    """Trains one model; returns a JSON-ready record of the run."""
    keras.utils.set_random_seed(seed)
    base = recipes.RECIPES[FLAGS.model]
    recipe = recipes.Recipe(
        hidden=base.hidden if FLAGS.hidden is None else FLAGS.hidden,
        learning_rate=base.learning_rate if FLAGS.lr is None else FLAGS.lr,
        epochs=base.epochs if FLAGS.epochs is None else FLAGS.epochs,
        weight_decay=base.weight_decay if FLAGS.weight_decay is None else FLAGS.weight_decay,
        dropout=base.dropout if FLAGS.dropout is None else FLAGS.dropout,
        patience=base.patience if FLAGS.patience is None else (FLAGS.patience or None))
    rewrites = [] if FLAGS.rewrites == ["none"] else FLAGS.rewrites
    options = dict(chunks=FLAGS.chunks, schedule=FLAGS.schedule, rewrites=rewrites)
    if DEVICES:
        options.update(devices=DEVICES, placement=FLAGS.placement, topology=TOPOLOGY)
    if FLAGS.store:
        options.update(chunks=FLAGS.chunks if FLAGS["chunks"].present else None, memory_budget=FLAGS.memory_budget,
                       spill=FLAGS.spill, overlap=FLAGS.overlap, spill_dir=FLAGS.spill_dir,
                       selective=FLAGS.selective)
    model = recipes.build_model(FLAGS.model, inputs.graph, inputs.num_classes, recipe=recipe,
                                num_features=inputs.features.shape[-1], depth=FLAGS.depth, k=FLAGS.k,
                                alpha=FLAGS.alpha, attention_dropout=FLAGS.attention_dropout,
                                sparse=scipy.sparse.issparse(inputs.features) or getattr(inputs.features, "sparse",
                                                                                         False),
                                **options)
    model.compile(optimizer=keras.optimizers.Adam(recipe.learning_rate), loss=ngra_tf.masked_loss(),
                  weighted_metrics=["accuracy"])
    features, labels = inputs.features, inputs.labels
    train, val, test = inputs.train, inputs.val, inputs.test
    if FLAGS.explain or FLAGS.backup_dir:  # (BackupAndRestore restores into a built model)
        model.build(features.shape)
    if FLAGS.explain:
        model.explain()
    timer = EpochTimer()  # first, so that the other callbacks' epoch-end work is not counted
    callbacks = [timer, StopCheck()]
    traffic = ngra_tf.callbacks.StoreTraffic() if FLAGS.store else None
    if traffic is not None:
        callbacks.append(traffic)
    if FLAGS.backup_dir:
        callbacks.append(ngra_tf.callbacks.BackupAndRestore(FLAGS.backup_dir))
    callbacks += recipes.callbacks(recipe)
    if FLAGS.profile_dir:
        callbacks.append(keras.callbacks.TensorBoard(FLAGS.profile_dir, profile_batch=(2, 4)))
    start = time.perf_counter()
    try:
        history = model.fit(features, labels, sample_weight=train, epochs=recipe.epochs,
                            validation_data=(features, labels, val) if FLAGS.validation_freq else None,
                            validation_freq=max(1, FLAGS.validation_freq), callbacks=callbacks,
                            verbose=FLAGS.verbose)
        seconds = time.perf_counter() - start
        if model.ring is not None:
            report_traffic(model.ring, copy_stats(reset=True, hosts=parallel.processes(model.ring.devices)))
        result = model.evaluate(features, labels, sample_weight=test, verbose=0, return_dict=True)
    except tf.errors.OpError as error:
        lost = lost_worker(error, timer.epoch)
        if lost is None:
            raise
        raise faults.TrainingFault(lost) from None
    epochs = len(history.history["loss"])
    if history.epoch and history.epoch[0] > 0:
        print(f"resumed from the backup in {FLAGS.backup_dir} after epoch {history.epoch[0]}")
    print(f"{FLAGS.model} on {inputs.name}, seed {seed}: test accuracy {result['accuracy']:.4f} "
          f"after {epochs} epochs ({describe_timing(timer.seconds)})")
    if traffic is not None:
        print(describe_traffic(traffic, model.memory_plan()))
    return {"seed": seed, "epochs": epochs, "epoch": list(history.epoch), "seconds": seconds,
            "epoch_seconds": timer.seconds,
            **({"store_read_bytes": traffic.read, "spill_written_bytes": traffic.written} if traffic else {}),
            "history": {name: [float(v) for v in values] for name, values in history.history.items()},
            "test": {name: float(value) for name, value in result.items()}}


def lost_worker(error, epoch):
    """One line for a TensorFlow error that says a cluster worker was lost, else None."""
    cluster = cluster_flag()
    if cluster is None:
        return None
    spec = parallel.cluster_spec(cluster)
    found = parallel.lost_worker(error, spec)
    if found is None:
        return None
    task, address, cause = found
    when = "before the first epoch" if epoch is None else f"during epoch {epoch + 1}"
    resume = ("training resumes from the last finished epoch" if FLAGS.backup_dir else
              "add --backup_dir=DIR to resume from the last finished epoch instead of starting over")
    return (f"lost worker task {task} ({address}) {when} ({cause}). Restart it (examples/worker.py "
            f"--cluster={','.join(spec.job_tasks(parallel.JOB))} --task={task}) and run this command again: {resume}")


def report_traffic(ring, stats):
    """Bytes each device received from the host and from other devices, while training."""
    table = parallel.traffic(stats)
    mib = 2.0 ** 20
    for device in ring.order:
        found = next((v for k, v in table.items() if k != "all" and parallel.same_device(k, device)),
                     {"h2d": 0, "d2d": 0})
        print(f"  {device}: from the host {found['h2d'] / mib:.1f} MiB, from other devices {found['d2d'] / mib:.1f} MiB")
    loads, devices = len(ring.placement.routes(0)), len(ring.devices)
    host = table.get("all", {"h2d": 0})["h2d"]
    print(f"host->device {host / mib:.1f} MiB with placement {ring.placement.kind}: each interval loaded {loads}x; "
          f"without sharing every device would load it ({devices}x): host traffic ratio none/{ring.placement.kind} "
          f"{devices / loads:.2f}x")


def cluster_flag():
    """--cluster, or "TF_CONFIG" when it is not given and $TF_CONFIG is set; None without a cluster."""
    if FLAGS.cluster is None and os.environ.get("TF_CONFIG"):
        return "TF_CONFIG"
    return FLAGS.cluster


def start_devices():
    """The devices to train over (None: one), set up before TensorFlow starts."""
    cluster = cluster_flag()
    if cluster is not None:
        try:
            return parallel.connect(cluster, FLAGS.devices, wait=FLAGS.worker_wait)
        except ValueError as error:
            raise app.UsageError(f"--cluster: {error}") from None
        except RuntimeError as error:
            sys.exit(f"train.py: --cluster: {error}")
    if FLAGS.devices is None:
        return None
    if not tf.config.list_physical_devices("GPU"):
        parallel.split_cpu(FLAGS.devices)
    return FLAGS.devices


def validate_flags():
    """Checks every flag that needs neither data nor TensorFlow's devices, before anything starts.

    Raises app.UsageError naming the flag; returns --topology, read (None without it).
    """
    unknown = set(FLAGS.rewrites) - set(REWRITES) - {"none"}
    if unknown:
        raise app.UsageError(f"--rewrites: unknown {sorted(unknown)}; choose from {', '.join(REWRITES)} or none")
    if FLAGS.history_json and not os.path.isdir(os.path.dirname(os.path.abspath(FLAGS.history_json))):
        raise app.UsageError(f"--history_json: no directory {os.path.dirname(os.path.abspath(FLAGS.history_json))}")
    if FLAGS.history_json and os.path.isdir(FLAGS.history_json):  # (found before training, not after it)
        raise app.UsageError(f"--history_json: {FLAGS.history_json} is a directory; name a file in it, such as "
                             f"{os.path.join(FLAGS.history_json, 'history.json')}")
    if FLAGS.profile_dir and os.path.exists(FLAGS.profile_dir) and not os.path.isdir(FLAGS.profile_dir):
        raise app.UsageError(f"--profile_dir: {FLAGS.profile_dir} is a file, not a directory")
    for name, models in (("depth", ("resgcn", "jknet")), ("k", ("appnp",)), ("alpha", ("appnp",)),
                         ("attention_dropout", ("gat",))):
        if FLAGS[name].present and FLAGS.model not in models:
            raise app.UsageError(f"--{name} applies to --model={' or '.join(models)}, not {FLAGS.model}")
    if FLAGS.store is not None or FLAGS.dataset in datasets.PRESETS:
        for name in ("normalize", "features"):
            if FLAGS[name].present:
                raise app.UsageError(f"--{name} applies to a real graph's bag-of-words features (--dataset="
                                     f"{', '.join(datasets.SHIPPED)} or a .npz), not to "
                                     f"{'a store' if FLAGS.store else 'a synthetic preset'}")
    if FLAGS.features == "sparse" and (FLAGS.devices is not None or cluster_flag() is not None):
        raise app.UsageError("--features=sparse trains in memory on one device; over several devices features are "
                             "dense: leave --features out")
    if FLAGS.store is None:
        for name in ("memory_budget", "spill", "overlap", "spill_dir", "selective"):
            if FLAGS[name].present:
                raise app.UsageError(f"--{name} applies to training from a store: add --store=DIR")
    elif FLAGS["dataset"].present:
        raise app.UsageError("--dataset and --store both name the data: give one")
    elif FLAGS.model in ("ggnn", "rgcn"):
        raise app.UsageError(f"--store: {FLAGS.model} needs edge types, which tools/partition_graph.py does not "
                             "prepare yet")
    if FLAGS.devices is None and FLAGS.cluster is None:
        for name in ("placement", "topology"):
            if FLAGS[name].present:
                raise app.UsageError(f"--{name} applies to training over several devices: add --devices=N")
    if FLAGS["worker_wait"].present and cluster_flag() is None:
        raise app.UsageError("--worker_wait applies to training over a cluster: add --cluster=HOST:PORT,...")
    if FLAGS.backup_dir is not None:
        if FLAGS.runs > 1:
            raise app.UsageError("--backup_dir resumes one run: use it with --runs=1")
        if os.path.exists(FLAGS.backup_dir) and not os.path.isdir(FLAGS.backup_dir):
            raise app.UsageError(f"--backup_dir: {FLAGS.backup_dir} is a file, not a directory")
    if FLAGS.devices and not FLAGS.store and FLAGS.chunks < FLAGS.devices:  # (a store's P is checked by the model)
        raise app.UsageError(f"--devices={FLAGS.devices} needs --chunks >= {FLAGS.devices}: every device owns "
                             "destination intervals")
    topology = None
    if FLAGS.topology is not None:
        try:
            topology = (parallel.Topology.load(FLAGS.topology) if os.path.exists(FLAGS.topology)
                        else parallel.Topology.sample(FLAGS.topology))
        except (OSError, ValueError) as error:
            raise app.UsageError(f"--topology: {error}") from None
    if FLAGS.memory_budget is not None:
        try:
            memory.parse_size(FLAGS.memory_budget)
        except ValueError as error:
            raise app.UsageError(f"--memory_budget: {error}") from None
    return topology


STOPPED_BY = []  # the signal that stopped training, once one has


def stop_training(signum, frame):
    """SIGTERM stops training as Ctrl-C does (Python's default kills at once), so the model's cleanup runs:
    its spill files go. Remembered too: an interrupt that lands in a finalizer is ignored there, and one that
    comes while TensorFlow traces is not raised at all (the tracer's C++ is below this frame: it came out as a
    SystemError, or aborted the process); StopCheck raises it at the next batch."""
    STOPPED_BY.append("SIGTERM" if signum == signal.SIGTERM else "Ctrl-C (SIGINT)")
    if not tf.inside_function():
        raise KeyboardInterrupt(STOPPED_BY[0])


class StopCheck(keras.callbacks.Callback):
    """Raises the interrupt of a signal that came, if it has not ended training already."""

    def _check(self, *_, **__):
        if STOPPED_BY:
            raise KeyboardInterrupt(STOPPED_BY[0])

    on_train_batch_end = on_test_batch_end = on_epoch_end = _check


def main(argv):
    del argv
    global DEVICES, TOPOLOGY
    topology = validate_flags()
    logging.set_verbosity(logging.WARNING)
    DEVICES, TOPOLOGY = start_devices(), topology
    tf.constant(0.0).numpy()  # TensorFlow's runtime is up before the baseline
    baseline = resident.mark()
    signal.signal(signal.SIGTERM, stop_training)
    signal.signal(signal.SIGINT, stop_training)
    try:
        inputs = load_store(FLAGS.store) if FLAGS.store else load(FLAGS.dataset, FLAGS.seed)
        runs = [train_once(inputs, FLAGS.seed + run) for run in range(FLAGS.runs)]
    except (budget.MemoryBudgetError, faults.TrainingFault, ngra_tf.callbacks.BackupError,
            StoreError) as error:  # (a store file found damaged or changed when first read)
        sys.exit(f"train.py: {error}")
    except BaseException as error:
        # (whatever a signal's interrupt surfaced as: the signal is what stopped training)
        if not (STOPPED_BY or isinstance(error, KeyboardInterrupt)):
            raise
        resume = "; run the same command again to resume from the last finished epoch" if FLAGS.backup_dir else ""
        sys.exit(f"train.py: stopped by {STOPPED_BY[0] if STOPPED_BY else 'Ctrl-C (SIGINT)'} before training "
                 f"finished (spill files, if any, were removed){resume}")
    peak = baseline.peak()
    print(peak)
    device_peak = resident.device_peak_bytes(resident.device_tier()) if FLAGS.store else None
    if device_peak is not None:  # a GPU device tier: TensorFlow's own count, beside the process's
        print(f"device tier {resident.device_tier()}: peak {resident.format_bytes(device_peak)} allocated")
    accuracies = [run["test"]["accuracy"] for run in runs]
    if FLAGS.history_json:
        chunks = inputs.graph.num_parts if FLAGS.store else FLAGS.chunks
        record = {"model": FLAGS.model, "dataset": inputs.name, "chunks": chunks, **runs[0],
                  **peak.as_dict()}
        if DEVICES:
            record.update(devices=DEVICES if isinstance(DEVICES, list) else int(DEVICES), placement=FLAGS.placement)
        if FLAGS.runs > 1:
            record["runs"] = runs
        integrity.write_json_atomically(FLAGS.history_json, record)
    if FLAGS.runs > 1:
        print(f"{FLAGS.model} on {inputs.name}: mean test accuracy {np.mean(accuracies):.4f} "
              f"(min {np.min(accuracies):.4f}, max {np.max(accuracies):.4f}) over {FLAGS.runs} runs")
    if FLAGS.profile_dir:
        print(f"profile written under {FLAGS.profile_dir} (open with TensorBoard's Profile tab)")


if __name__ == "__main__":
    app.run(main)
