"""Per-epoch training time of the NGra models: ngra-tf against plain TensorFlow and PyG.

    python tools/bench_models.py                        # NGra Table 2's four graphs, seven models
    python tools/bench_models.py --models=sage,gin      # GraphSAGE (mean) and GIN alone
    python tools/bench_models.py --graphs=reddit-small --models=gcn,ggcn --steps=7
    python tools/bench_models.py --ablation             # + schedules and rewrites on reddit-small
    python tools/bench_models.py --systems= --ablation --graphs=reddit-small   # the ablation alone
    python tools/bench_models.py --scale=0.05 --quick   # a fast smoke run
    python tools/bench_models.py --graphs=cora --models=gcn   # Cora (Planetoid), the README's example

An epoch is one full-graph training step: forward, backward and an Adam
update, on synthetic power-law graphs at NGra Table 1's shapes, or on Cora
(--graphs=cora, its row-normalised features and standard split) (GCN and GG-NN
graphs are prepared as in ngra_tf.recipes: symmetrised, self loops, GCN
weights or edge types). Each cell is the median of --steps steps after
--warmup steps, every system in the same process, one after another:

    ngra fit        what a user sees: model.fit's epochs (compiled with masked_loss,
                    Adam and an accuracy metric), timed by a callback from epoch begin
                    to epoch end, median of --epochs epochs after the first
    fit + val       the same with validation_data (a second, inference forward per epoch)
    ngra P=1, P=4   ngra_tf.GraphModel with chunks=1 and chunks=4 (all rewrites), the
                    compiled step alone
    TF              plain TensorFlow, written as a TF user would: tf.sparse.sparse_dense_matmul
                    where the model is a sparse product (GCN, CommNet, GG-NN per edge type),
                    else tf.gather + tf.math.unsorted_segment_* over per-edge tensors
                    (G-GCN, MP-GCN), with every vertex-only matmul done once per vertex
    PyG             torch_geometric on CPU (GCNConv, or MessagePassing with the same
                    message), when torch and torch_geometric are installed

Both peers propagate the narrow side where the model is linear before its
aggregation, as ngra-tf's compiler does: GraphSAGE's mean of (X W_l) and GIN's
sum of (X W_1) (the first MLP layer moved before the sum), rather than
aggregating input-wide rows as the stock SAGEConv / GINConv do.

Ratios are fit / step (Keras's overhead), TF / fit and PyG / fit (above 1:
ngra-tf through fit is faster than the peer's bare step) and P=4 / P=1.
--variants (on the last of --graphs, reddit-small by default) times edge stages a user
might write (tools/user_layers.py: a tanh-difference gate, an edge-weighted gate, an
exp/div score, a leaky-relu message) against the closest built-in model (G-GCN, whose
gate is a specialised kernel), each fused as edge code and unfused (hoisting only: the
per-edge path a stage took before it could fuse), and GAT with its attention fused
(online softmax) and unfused (the column-wide softmax), without and with attention
dropout (0.6, the recipe's): model.fit's epoch (median of
--epochs after the first) and the peak resident memory, every cell in a subprocess of
its own so that peaks compare. --stages=tanh-gate,gat picks rows (G-GCN's always runs).

--plot=FILE.png draws the ratio table (needs matplotlib). Absolute times move with other load on a shared machine; the
ratios come from one run.
"""

from __future__ import annotations

import os
import sys

import numpy as np
from absl import app, flags

from timing import median_ms  # tools/, the script's own directory

FLAGS = flags.FLAGS
MODELS = ("gcn", "commnet", "ggnn", "ggcn", "mpgcn", "sage", "gin")
NAMES = {"gcn": "GCN", "commnet": "CommNet", "ggnn": "GG-NN", "ggcn": "G-GCN", "mpgcn": "MP-GCN", "sage": "GraphSAGE",
         "gin": "GIN"}
GRAPHS = ("pubmed", "protein", "blog", "reddit-small")
flags.DEFINE_list("graphs", list(GRAPHS), "NGra Table 1 presets to run on, or cora.")
flags.DEFINE_list("models", list(MODELS), "Models: " + ", ".join(MODELS) + ".")
flags.DEFINE_integer("hidden", 128, "Hidden units.", lower_bound=1)
flags.DEFINE_integer("steps", 5, "Timed steps per cell (the median is reported).", lower_bound=1)
flags.DEFINE_integer("warmup", 2, "Untimed steps first (tracing, allocation).", lower_bound=1)
flags.DEFINE_float("scale", 1.0, "Multiplies the preset vertex and edge counts.", lower_bound=1e-4)
SYSTEMS = ("fit", "fitval", "ngra1", "ngra4", "tf", "pyg")
flags.DEFINE_list("systems", list(SYSTEMS), "Systems: " + ", ".join(SYSTEMS) + ".")
flags.DEFINE_integer("epochs", 10, "Timed model.fit epochs per fit cell (after one untimed first epoch).",
                     lower_bound=1)
flags.DEFINE_string("plot", None, "Write a PNG of the ratio table here (needs matplotlib).")
flags.DEFINE_bool("ablation", False, "Also time the three schedules (P=4) and the rewrites (P=1) "
                  "on the last graph.")
flags.DEFINE_bool("quick", False, "One warm-up and two timed steps (a smoke run).")
flags.DEFINE_bool("variants", False, "Only time user-written edge stages and GAT, fused and unfused, against G-GCN "
                  "(see the module doc).")
flags.DEFINE_bool("unfused", True, "--variants: also time each stage unfused (hoisting only; peaks at over 10 GiB "
                  "on reddit-small).")
flags.DEFINE_bool("interpreted", True, "--variants: also time each edge-code stage with the interpreter instead of "
                  "its generated C++.")
flags.DEFINE_integer("threads", 0, "Threads for TF and torch (0: their defaults).", lower_bound=0)
flags.DEFINE_string("cell", None, "Internal: time one ablation cell, model:chunks:schedule:rewrites.")


# ---------------------------------------------------------------- workloads

class Workload:
    """One graph prepared for one model, with features, labels and a training mask."""

    def __init__(self, preset, model, scale, seed=0):
        from ngra_tf import recipes  # noqa: PLC0415
        from ngra_tf.graph import datasets  # noqa: PLC0415

        cora = preset == "cora"
        data = datasets.cora() if cora else datasets.synthetic(preset, seed=seed, scale=scale)
        self.preset, self.model = preset, model
        self.graph = recipes.prepare_graph(model, data.graph)
        self.features = data.dense_features(normalize=cora)
        self.labels = data.labels.astype(np.int64)
        self.mask = data.train_mask.astype(np.float32)
        self.val_mask = data.val_mask
        self.num_classes = data.num_classes


def timed(step, warmup, steps):
    return median_ms(step, steps, warmup)


# ---------------------------------------------------------------- ngra-tf

def ngra_stack(model, hidden, classes):
    import keras  # noqa: PLC0415

    from ngra_tf import layers  # noqa: PLC0415

    if model == "gcn":
        return [layers.GCN(hidden, activation="relu"), layers.GCN(classes)]
    if model == "commnet":
        return [layers.CommNet(hidden, activation="relu"), layers.CommNet(classes)]
    if model == "mpgcn":
        return [layers.MaxPoolGCN(hidden, activation="relu"), layers.MaxPoolGCN(classes)]
    if model == "ggcn":
        return [keras.layers.Dense(hidden), layers.GatedGCN(hidden, activation="relu"), layers.GatedGCN(classes)]
    if model == "sage":
        return [layers.GraphSAGE(hidden, activation="relu"), layers.GraphSAGE(classes)]
    if model == "gin":
        return [layers.GIN(hidden, train_eps=True, activation="relu"), layers.GIN(classes, hidden=hidden, train_eps=True)]
    return [keras.layers.Dense(hidden), layers.GGNN(hidden, 3), layers.GGNN(hidden, 3), keras.layers.Dense(classes)]


def tf_train_step(model, work):
    """A compiled full-graph step (forward, backward, Adam) for any Keras model called on the features."""
    import keras  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    x, y, mask = (tf.constant(a) for a in (work.features, work.labels, work.mask))
    model(x)  # builds
    optimizer = keras.optimizers.Adam(0.01)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True), sample_weight=mask)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    return lambda: step().numpy()


def ngra_step(work, hidden, chunks, schedule="ngra", rewrites=True):
    import ngra_tf  # noqa: PLC0415

    model = ngra_tf.GraphModel(work.graph, ngra_stack(work.model, hidden, work.num_classes), chunks=chunks,
                               schedule=schedule, rewrites=rewrites)
    return tf_train_step(model, work)


def ngra_fit(work, hidden, validation, epochs):
    """Median ms of model.fit's epochs after the first: Keras's per-epoch work included."""
    import time  # noqa: PLC0415

    import keras  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415

    model = ngra_tf.GraphModel(work.graph, ngra_stack(work.model, hidden, work.num_classes))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss(), weighted_metrics=["accuracy"])
    times = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):  # after the validation pass
            times.append(1e3 * (time.perf_counter() - self.start))

    extra = {"validation_data": (work.features, work.labels, work.val_mask)} if validation else {}
    model.fit(work.features, work.labels, sample_weight=work.mask, epochs=epochs + 1, verbose=0,
              callbacks=[EpochTimer()], **extra)
    return float(np.median(times[1:]))


# ---------------------------------------------------------------- plain TensorFlow

def plain_tf_model(work, hidden):
    """The same model in plain TensorFlow (see the module doc)."""
    import keras  # noqa: PLC0415
    import tensorflow as tf  # noqa: PLC0415

    g, n, classes = work.graph, work.graph.num_vertices, work.num_classes
    src, dst = g.src.astype(np.int64), g.dst.astype(np.int64)

    def sparse(values, keep=None):
        rows, cols = (dst, src) if keep is None else (dst[keep], src[keep])
        order = np.lexsort((cols, rows))
        return tf.sparse.SparseTensor(np.stack([rows[order], cols[order]], 1), np.asarray(values, np.float32)[order],
                                      [n, n])

    dense = keras.layers.Dense

    class Plain(keras.Model):
        def __init__(self):
            super().__init__()
            model = work.model
            if model in ("gcn", "commnet"):
                weights = g.edge_data if model == "gcn" else np.ones(g.num_edges, np.float32)
                self.a = sparse(weights)
                self.w1, self.w2 = dense(hidden, use_bias=False), dense(classes, use_bias=False)
                self.b1, self.b2 = self.add_weight(shape=(hidden,)), self.add_weight(shape=(classes,))
                if model == "commnet":
                    self.h1, self.h2 = dense(hidden, use_bias=False), dense(classes, use_bias=False)
            elif model == "ggnn":
                self.a = [sparse(np.ones(int((g.edge_data == t).sum())), g.edge_data == t) for t in range(3)]
                self.proj, self.out = dense(hidden, activation="relu"), dense(classes)
                self.kernels = [self.add_weight(shape=(3, hidden, hidden)) for _ in range(2)]
                self.grus = [keras.layers.GRUCell(hidden, reset_after=False) for _ in range(2)]
            elif model in ("sage", "gin"):
                degree = np.maximum(g.in_degree(), 1).astype(np.float32)
                self.a = sparse(1.0 / degree[dst] if model == "sage" else np.ones(g.num_edges))
                if model == "sage":  # lin_l (with the bias) on the mean, lin_r on the root
                    self.ls = [dense(hidden, use_bias=False), dense(classes, use_bias=False)]
                    self.rs = [dense(hidden), dense(classes)]
                else:  # GIN: MLP((1 + eps) x + A x), its first layer applied before the sum
                    self.firsts = [dense(hidden, use_bias=False), dense(hidden, use_bias=False)]
                    self.biases = [self.add_weight(shape=(hidden,)) for _ in range(2)]
                    self.seconds = [dense(hidden), dense(classes)]
                    self.eps = [self.add_weight(shape=(), initializer="zeros") for _ in range(2)]
            else:
                self.src, self.dst = tf.constant(src), tf.constant(dst)
                self.degree = tf.constant(g.in_degree()[:, None] > 0)
                if model == "ggcn":
                    self.proj = dense(hidden)
                    self.gates = [(dense(hidden, use_bias=False), dense(hidden, use_bias=False)) for _ in range(2)]
                    self.outs = [dense(hidden, activation="relu"), dense(classes)]
                else:  # mpgcn
                    self.pools = [dense(hidden, activation="relu"), dense(classes, activation="relu")]
                    self.outs = [dense(hidden, activation="relu"), dense(classes)]

        def call(self, x, training=None):
            model = work.model
            if model == "gcn":  # A (X W): propagate the narrow side, as Kipf & Welling do
                h = tf.nn.relu(tf.sparse.sparse_dense_matmul(self.a, self.w1(x)) + self.b1)
                return tf.sparse.sparse_dense_matmul(self.a, self.w2(h)) + self.b2
            if model == "commnet":
                h = tf.nn.relu(self.h1(x) + tf.sparse.sparse_dense_matmul(self.a, self.w1(x)) + self.b1)
                return self.h2(h) + tf.sparse.sparse_dense_matmul(self.a, self.w2(h)) + self.b2
            if model == "sage":
                h = x
                for lin_l, lin_r, act in zip(self.ls, self.rs, (tf.nn.relu, tf.identity)):
                    h = act(tf.sparse.sparse_dense_matmul(self.a, lin_l(h)) + lin_r(h))
                return h
            if model == "gin":
                h = x
                for first, bias, second, eps, act in zip(self.firsts, self.biases, self.seconds, self.eps,
                                                         (tf.nn.relu, tf.identity)):
                    z = first(h)
                    h = act(second(tf.nn.relu((1 + eps) * z + tf.sparse.sparse_dense_matmul(self.a, z) + bias)))
                return h
            if model == "ggnn":
                h = self.proj(x)
                for kernels, gru in zip(self.kernels, self.grus):
                    accum = tf.add_n([tf.sparse.sparse_dense_matmul(a, h @ kernels[t]) for t, a in enumerate(self.a)])
                    h, _ = gru(accum, [h])
                return self.out(h)
            if model == "ggcn":  # sigmoid(h_u W_H + h_v W_C) * h_u per edge, matmuls per vertex
                h = self.proj(x)
                for (w_h, w_c), out in zip(self.gates, self.outs):
                    hs, hd = tf.gather(w_h(h), self.src), tf.gather(w_c(h), self.dst)
                    messages = tf.sigmoid(hs + hd) * tf.gather(h, self.src)
                    h = out(tf.math.unsorted_segment_sum(messages, self.dst, n))
                return h
            h = x  # mpgcn: max over per-edge copies of each source's pooled row
            for pool, out in zip(self.pools, self.outs):
                pooled = tf.math.unsorted_segment_max(tf.gather(pool(h), self.src), self.dst, n)
                h = out(tf.where(self.degree, pooled, tf.zeros_like(pooled)))
            return h

    return Plain()


def plain_tf_step(work, hidden):
    return tf_train_step(plain_tf_model(work, hidden), work)


# ---------------------------------------------------------------- PyG

def pyg_available():
    try:
        import torch  # noqa: F401, PLC0415
        import torch_geometric  # noqa: F401, PLC0415
    except ImportError:
        return False
    return True


def pyg_step(work, hidden):
    import torch  # noqa: PLC0415
    from torch import nn  # noqa: PLC0415
    from torch_geometric.nn import GCNConv, MessagePassing  # noqa: PLC0415

    g, classes = work.graph, work.num_classes
    edge_index = torch.from_numpy(np.stack([g.src, g.dst]).astype(np.int64))

    class Sum(MessagePassing):  # sum (or mean) of the source rows (CommNet, GG-NN per type, GIN, GraphSAGE)
        def __init__(self, aggr="add"):
            super().__init__(aggr=aggr)

        def forward(self, x, edge_index):
            return self.propagate(edge_index, x=x)

    class Gated(MessagePassing):  # G-GCN's gate
        def __init__(self, width):
            super().__init__(aggr="add")
            self.w_h, self.w_c = nn.Linear(width, width, bias=False), nn.Linear(width, width, bias=False)

        def forward(self, x, edge_index):
            return self.propagate(edge_index, x=x, a=self.w_h(x), b=self.w_c(x))

        def message(self, x_j, a_j, b_i):
            return torch.sigmoid(a_j + b_i) * x_j

    class MaxPool(MessagePassing):
        def __init__(self, width, units):
            super().__init__(aggr="max")
            self.pool = nn.Linear(width, units)

        def forward(self, x, edge_index):
            return self.propagate(edge_index, x=torch.relu(self.pool(x)))

    width = work.features.shape[1]
    model = work.model

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            if model == "gcn":
                self.c1 = GCNConv(width, hidden, normalize=False)
                self.c2 = GCNConv(hidden, classes, normalize=False)
                self.weight = torch.from_numpy(np.asarray(g.edge_data, np.float32))
            elif model == "commnet":
                self.sum = Sum()
                self.h1, self.c1 = nn.Linear(width, hidden, bias=False), nn.Linear(width, hidden)
                self.h2, self.c2 = nn.Linear(hidden, classes, bias=False), nn.Linear(hidden, classes)
            elif model == "ggnn":
                self.sum = Sum()
                self.proj, self.out = nn.Linear(width, hidden), nn.Linear(hidden, classes)
                self.kernels = nn.ParameterList([nn.Parameter(torch.randn(3, hidden, hidden) * 0.05)
                                                 for _ in range(2)])
                self.grus = nn.ModuleList([nn.GRUCell(hidden, hidden) for _ in range(2)])
                types = torch.from_numpy(np.asarray(g.edge_data, np.int64))
                self.typed = [edge_index[:, types == t] for t in range(3)]
            elif model == "ggcn":
                self.proj = nn.Linear(width, hidden)
                self.gates = nn.ModuleList([Gated(hidden), Gated(hidden)])
                self.outs = nn.ModuleList([nn.Linear(hidden, hidden), nn.Linear(hidden, classes)])
            elif model == "sage":  # SAGEConv's lin_l moved before the mean (linear, so the same)
                self.sum = Sum("mean")
                self.ls = nn.ModuleList([nn.Linear(width, hidden, bias=False), nn.Linear(hidden, classes, bias=False)])
                self.rs = nn.ModuleList([nn.Linear(width, hidden), nn.Linear(hidden, classes)])
            elif model == "gin":  # GINConv(train_eps=True) with the MLP's first Linear moved before the sum
                self.sum = Sum()
                self.firsts = nn.ModuleList([nn.Linear(width, hidden), nn.Linear(hidden, hidden)])
                self.seconds = nn.ModuleList([nn.Linear(hidden, hidden), nn.Linear(hidden, classes)])
                self.eps = nn.Parameter(torch.zeros(2))
            else:
                self.pools = nn.ModuleList([MaxPool(width, hidden), MaxPool(hidden, classes)])
                self.outs = nn.ModuleList([nn.Linear(hidden, hidden), nn.Linear(classes, classes)])

        def forward(self, x):
            if model == "gcn":
                h = torch.relu(self.c1(x, edge_index, self.weight))
                return self.c2(h, edge_index, self.weight)
            if model == "commnet":  # propagate the narrow side: (A X) W = A (X W)
                h = torch.relu(self.h1(x) + self.sum(self.c1(x) - self.c1.bias, edge_index) + self.c1.bias)
                return self.h2(h) + self.sum(self.c2(h) - self.c2.bias, edge_index) + self.c2.bias
            if model == "ggnn":
                h = self.proj(x)
                for kernels, gru in zip(self.kernels, self.grus):
                    accum = sum(self.sum(h @ kernels[t], e) for t, e in enumerate(self.typed))
                    h = gru(accum, h)
                return self.out(h)
            if model == "sage":
                h = x
                for lin_l, lin_r, act in zip(self.ls, self.rs, (torch.relu, lambda t: t)):
                    h = act(self.sum(lin_l(h), edge_index) + lin_r(h))
                return h
            if model == "gin":
                h = x
                for i, (first, second, act) in enumerate(zip(self.firsts, self.seconds, (torch.relu, lambda t: t))):
                    z = h @ first.weight.T
                    h = act(second(torch.relu((1 + self.eps[i]) * z + self.sum(z, edge_index) + first.bias)))
                return h
            if model == "ggcn":
                h = self.proj(x)
                for gate, out, act in zip(self.gates, self.outs, (torch.relu, lambda t: t)):
                    h = act(out(gate(h, edge_index)))
                return h
            h = x
            for pool, out, act in zip(self.pools, self.outs, (torch.relu, lambda t: t)):
                h = act(out(pool(h, edge_index)))
            return h

    net = Net()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.01)
    x = torch.from_numpy(work.features)
    y = torch.from_numpy(work.labels)
    mask = torch.from_numpy(work.mask.astype(bool))

    def step():
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(net(x)[mask], y[mask])
        loss.backward()
        optimizer.step()

    return step


# ---------------------------------------------------------------- tables

def ratio(numerator, denominator):
    return f"{numerator / denominator:.2f}x" if numerator and denominator else "-"


def ms(value):
    return f"{value:.1f}" if value else "-"


def run_cell(work, system, hidden, warmup, steps, epochs):
    builders = {"ngra1": lambda: ngra_step(work, hidden, 1), "ngra4": lambda: ngra_step(work, hidden, 4),
                "tf": lambda: plain_tf_step(work, hidden), "pyg": lambda: pyg_step(work, hidden)}
    try:
        if system in ("fit", "fitval"):
            return ngra_fit(work, hidden, system == "fitval", epochs)
        return timed(builders[system](), warmup, steps)
    except Exception as error:  # noqa: BLE001  a failing peer must not hide the other cells
        print(f"  {system} failed on {work.model}/{work.preset}: {type(error).__name__}: {error}"[:300],
              flush=True)
        return None
    finally:  # let the next cell start from a clean slate (the big graphs hold GBs)
        import gc  # noqa: PLC0415

        import keras  # noqa: PLC0415

        keras.backend.clear_session()
        gc.collect()


def main(argv):
    del argv
    warmup, steps = (1, 2) if FLAGS.quick else (FLAGS.warmup, FLAGS.steps)
    epochs = 2 if FLAGS.quick else FLAGS.epochs
    from ngra_tf.graph import datasets  # noqa: PLC0415

    for flag, known in (("systems", SYSTEMS), ("models", MODELS), ("graphs", ("cora", *datasets.PRESETS)),
                        ("stages", STAGES)):
        unknown = set(FLAGS[flag].value) - set(known)
        if unknown:
            raise app.UsageError(f"--{flag}: unknown {sorted(unknown)}; choose from {', '.join(known)}")
    _threads()
    if FLAGS.cell:
        run_one_cell(FLAGS.cell)
        return
    if FLAGS.variants:
        variants(FLAGS.graphs[-1], epochs)
        return
    systems = [s for s in FLAGS.systems if s != "pyg" or pyg_available()]
    if "pyg" in FLAGS.systems and "pyg" not in systems:
        print("PyG is not installed (pip install torch torch_geometric): its column is skipped")
    if not systems:  # e.g. --systems= --ablation: only the ablation, in a process that stays small
        if FLAGS.ablation:
            ablation(FLAGS.graphs[-1], warmup, steps)
        return
    results = {}
    for preset in FLAGS.graphs:
        for model in FLAGS.models:
            work = Workload(preset, model, FLAGS.scale)
            cell = {system: run_cell(work, system, FLAGS.hidden, warmup, steps, epochs) for system in systems}
            results[(model, preset)] = cell
            print(f"{NAMES[model]:8s} {preset:13s} {work.graph.num_vertices:>8d} V {work.graph.num_edges:>9d} E  "
                  + "  ".join(f"{s} {ms(cell[s])} ms" for s in systems), flush=True)
    print()
    print(f"Per-epoch training time (ms; fit: median of {epochs} epochs after the first, steps: median of "
          f"{steps}; hidden {FLAGS.hidden}; scale {FLAGS.scale})")
    print()
    head = ("| model | graph | ngra fit | fit + val | ngra step P=1 | step P=4 | TF step | PyG step | fit / step | "
            "fit+val / step | TF / fit | PyG / fit | P=4 / P=1 |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for (model, preset), c in results.items():
        fit, step = c.get("fit"), c.get("ngra1")
        print(f"| {NAMES[model]} | {preset} | {ms(fit)} | {ms(c.get('fitval'))} | {ms(step)} | "
              f"{ms(c.get('ngra4'))} | {ms(c.get('tf'))} | {ms(c.get('pyg'))} | {ratio(fit, step)} | "
              f"{ratio(c.get('fitval'), step)} | {ratio(c.get('tf'), fit)} | {ratio(c.get('pyg'), fit)} | "
              f"{ratio(c.get('ngra4'), step)} |")
    print()
    print("NGra Table 2 layout: ngra fit / TF step (ms)")
    print()
    print("| model | " + " | ".join(FLAGS.graphs) + " |")
    print("|---|" + "---|" * len(FLAGS.graphs))
    for model in FLAGS.models:
        row = [f"{ms(results[(model, p)].get('fit'))} / {ms(results[(model, p)].get('tf'))}" for p in FLAGS.graphs]
        print(f"| {NAMES[model]} | " + " | ".join(row) + " |")
    if FLAGS.plot:
        plot(results)
    if FLAGS.ablation:
        ablation(FLAGS.graphs[-1], warmup, steps)


def plot(results):
    from plots import ratio_chart  # noqa: PLC0415  (tools/)

    keys = list(results)
    fraction = lambda a, b: a / b if a and b else None  # noqa: E731
    series = {"TF step / ngra fit": [fraction(results[k].get("tf"), results[k].get("fit")) for k in keys],
              "PyG step / ngra fit": [fraction(results[k].get("pyg"), results[k].get("fit")) for k in keys]}
    series = {name: values for name, values in series.items() if any(values)}
    ratio_chart(FLAGS.plot, "Per-epoch training time: peers against ngra-tf through model.fit",
                [f"{NAMES[m]} / {p}" for m, p in keys], series,
                note=f"tools/bench_models.py, hidden {FLAGS.hidden}, scale {FLAGS.scale}")


ABLATION = [("rewrites off", 1, "ngra", "none"), ("hoist", 1, "ngra", "hoist"),
            ("hoist + fuse", 1, "ngra", "hoist+fuse"), ("all rewrites", 1, "ngra", "hoist+fuse+narrow")]
ABLATION += [(f"P=4, schedule {s}", 4, s, "hoist+fuse+narrow") for s in ("ngra", "stage", "dest-order")]


def ablation(preset, warmup, steps):
    """Each cell in a subprocess of its own: without the rewrites, per-edge tensors of
    wide layers can exceed memory, and the kernel's OOM killer must not end the run."""
    import subprocess  # noqa: PLC0415

    print()
    print(f"Ablation on {preset} (ms per epoch, median of {steps})")
    print()
    print("| model | " + " | ".join(v[0] for v in ABLATION) + " |")
    print("|---|" + "---|" * len(ABLATION))
    for model in FLAGS.models:
        row = []
        for _, chunks, schedule, rewrites in ABLATION:
            cell = f"{model}:{chunks}:{schedule}:{rewrites}"
            done = subprocess.run([sys.executable, os.path.abspath(__file__), f"--cell={cell}", f"--graphs={preset}",
                                   f"--scale={FLAGS.scale}", f"--hidden={FLAGS.hidden}", f"--warmup={warmup}",
                                   f"--steps={steps}", f"--threads={FLAGS.threads}"],
                                  capture_output=True, text=True, check=False)
            found = [line.split()[1] for line in done.stdout.splitlines() if line.startswith("CELL_MS ")]
            if found:
                row.append(found[0])
            elif done.returncode in (-9, 137):
                row.append("out of memory")
            else:
                last_line = done.stderr.strip().splitlines()[-1][:60] if done.stderr.strip() else done.returncode
                row.append(f"failed ({last_line})")
        print(f"| {NAMES[model]} | " + " | ".join(row) + " |", flush=True)


VARIANT_ROWS = (("G-GCN (built in)", "ggcn", "ggcn"), ("tanh-difference gate", "tanh-gate", "ggcn"),
                ("edge-weighted gate", "weighted-gate", "gcn"), ("exp/div score", "exp-div", "ggcn"),
                ("leaky-relu message", "leaky-message", "ggcn"), ("RBF score", "rbf-score", "ggcn"),
                ("leaky product", "leaky-product", "ggcn"), ("distance ratio", "distance-ratio", "ggcn"),
                ("GAT (8 heads)", "gat", "gat"), ("GAT (8 heads), attention dropout 0.6", "gat-dropout", "gat"))
STAGES = tuple(name for _, name, _ in VARIANT_ROWS)
flags.DEFINE_list("stages", list(STAGES),
                  "--variants: the rows to time; G-GCN's, the baseline, always runs.")


def variants(preset, epochs):
    """User-written edge stages and GAT against G-GCN, fused and unfused, each cell in its own process."""
    import subprocess  # noqa: PLC0415

    from ngra_tf.ops import generated  # noqa: PLC0415

    def cell(name, rewrites, interpreted=False):
        env = dict(os.environ, **({generated.DISABLE_ENV: "0"} if interpreted else {}))
        done = subprocess.run([sys.executable, os.path.abspath(__file__), f"--cell=variant:{name}:{rewrites}",
                               f"--graphs={preset}", f"--scale={FLAGS.scale}", f"--hidden={FLAGS.hidden}",
                               f"--epochs={epochs}", f"--threads={FLAGS.threads}"],
                              capture_output=True, text=True, check=False, env=env)
        found = dict(line.split()[:2] for line in done.stdout.splitlines() if line.startswith("CELL_"))
        if "CELL_MS" in found:
            return (float(found["CELL_MS"]), float(found["CELL_FIRST_MS"]), float(found["CELL_PEAK_MIB"]),
                    float(found["CELL_LOSS"]))
        if done.returncode in (-9, 137):
            return "out of memory"
        return f"failed ({done.stderr.strip().splitlines()[-1][:80] if done.stderr.strip() else done.returncode})"

    print()
    print(f"User-written edge stages on {preset} (hidden {FLAGS.hidden}; fit epoch: median of {epochs} after the "
          "first, ms; peak: the process's resident memory, MiB)")
    print()
    print(f"Edge code on the CPU: {generated.status()}; the interpreted cells run with {generated.DISABLE_ENV}=0.")
    print()
    print("Every cell starts from the same seed: the last epoch's loss, fused and unfused, compares the two paths.")
    print()
    print("| edge stage | fused as | fit epoch | first epoch | peak | epoch / G-GCN | peak / G-GCN | interpreted "
          "epoch | generated speedup | unfused epoch | unfused peak | fused speedup | fused peak saving | "
          "last loss, fused / unfused |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    base = None
    for label, name, _ in VARIANT_ROWS:
        if name != "ggcn" and name not in FLAGS.stages:
            continue
        fused = cell(name, "all")
        unfused = cell(name, "hoist") if FLAGS.unfused else "-"
        if isinstance(fused, str):
            print(f"| {label} | {fused} |", flush=True)
            continue
        base = base or fused
        kind = ("specialised gate_sigmoid" if name == "ggcn" else "online softmax" if name.startswith("gat")
                else "edge code")
        text = [f"{fused[0]:.0f}", f"{fused[1]:.0f}", f"{fused[2]:.0f}", f"{fused[0] / base[0]:.2f}x",
                f"{fused[2] / base[2]:.2f}x"]
        interpreted = cell(name, "all", interpreted=True) if FLAGS.interpreted and name != "ggcn" else "-"
        text += [interpreted, "-"] if isinstance(interpreted, str) else [
            f"{interpreted[0]:.0f}", f"{interpreted[0] / fused[0]:.2f}x"]
        if isinstance(unfused, str):
            text += [unfused, "-", "-", "-", f"{fused[3]:.6f} / -"]
        else:
            text += [f"{unfused[0]:.0f}", f"{unfused[2]:.0f}", f"{unfused[0] / fused[0]:.2f}x",
                     f"{unfused[2] / fused[2]:.2f}x", f"{fused[3]:.6f} / {unfused[3]:.6f}"]
        print(f"| {label} | {kind} | " + " | ".join(text) + " |", flush=True)


def variant_cell(name, rewrites):
    """One --variants cell: CELL_MS (median fit epoch after the first), CELL_FIRST_MS, CELL_PEAK_MIB."""
    import resource  # noqa: PLC0415
    import time  # noqa: PLC0415

    import keras  # noqa: PLC0415

    import ngra_tf  # noqa: PLC0415
    from user_layers import VARIANTS, variant_stack  # noqa: PLC0415  (tools/)

    prepare = next(p for _, n, p in VARIANT_ROWS if n == name)
    work = Workload(FLAGS.graphs[0], prepare, FLAGS.scale)
    keras.utils.set_random_seed(0)  # the same weights and draws in every cell of a row
    if name in VARIANTS:
        stack = variant_stack(name, FLAGS.hidden, work.num_classes)
    elif name.startswith("gat"):  # 8 heads of hidden / 8: the same total width
        rate = 0.6 if name == "gat-dropout" else 0.0
        stack = [ngra_tf.layers.GAT(max(1, FLAGS.hidden // 8), heads=8, activation="elu", attention_dropout=rate),
                 ngra_tf.layers.GAT(work.num_classes, concat_heads=False, attention_dropout=rate)]
    else:
        stack = ngra_stack(name, FLAGS.hidden, work.num_classes)
    model = ngra_tf.GraphModel(work.graph, stack, rewrites=True if rewrites == "all" else rewrites.split("+"))
    model.compile(optimizer=keras.optimizers.Adam(0.01), loss=ngra_tf.masked_loss())
    times = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            times.append(1e3 * (time.perf_counter() - self.start))

    history = model.fit(work.features, work.labels, sample_weight=work.mask, epochs=FLAGS.epochs + 1, verbose=0,
                        callbacks=[EpochTimer()])
    print(f"CELL_MS {np.median(times[1:]):.1f}")
    print(f"CELL_LOSS {history.history['loss'][-1]:.6f}")
    print(f"CELL_FIRST_MS {times[0]:.1f}")
    print(f"CELL_PEAK_MIB {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.1f}")


def run_one_cell(spec):
    if spec.startswith("variant:"):
        _, name, rewrites = spec.split(":")
        variant_cell(name, rewrites)
        return
    model, chunks, schedule, rewrites = spec.split(":")
    rewrites = [] if rewrites == "none" else rewrites.split("+")
    work = Workload(FLAGS.graphs[0], model, FLAGS.scale)
    step = ngra_step(work, FLAGS.hidden, int(chunks), schedule, rewrites)
    print(f"CELL_MS {timed(step, FLAGS.warmup, FLAGS.steps):.1f}")


def _threads():
    if FLAGS.threads:
        import tensorflow as tf  # noqa: PLC0415

        tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
        tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
        if pyg_available():
            import torch  # noqa: PLC0415

            torch.set_num_threads(FLAGS.threads)


if __name__ == "__main__":
    app.run(main)
