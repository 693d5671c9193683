"""Trains a SAGA-NN model for node classification and prints its test accuracy.

    python examples/train.py --model=gcn --dataset=cora --epochs=200 --hidden=16 --lr=0.01

Models: gcn, commnet, mpgcn, ggcn, ggnn, gat (ngra_tf.recipes). Datasets: cora
(the Planetoid split shipped with ngra_tf) or a synthetic preset shaped like NGra's
Table 1 (pubmed, protein, blog, reddit-small, ...) with random features and
labels. --profile_dir writes a TensorBoard profile of a few training steps;
--history_json writes each epoch's loss and metrics and the run's measured peak
memory, at full precision.
"""

import os
import time

import keras
import numpy as np
import tensorflow as tf
from absl import app, flags, logging

import ngra_tf
from ngra_tf import recipes
from ngra_tf.compiler import REWRITES, SCHEDULES
from ngra_tf.graph import datasets
from ngra_tf.runtime import integrity, resident

FLAGS = flags.FLAGS
flags.DEFINE_enum("model", "gcn", list(recipes.RECIPES), "The model to train.")
flags.DEFINE_string("dataset", "cora", "cora, a .npz in the Planetoid format, or a synthetic preset: "
                    + ", ".join(datasets.PRESETS) + ".")
flags.DEFINE_integer("epochs", None, "Training epochs (default: the model's recipe).", lower_bound=1)
flags.DEFINE_integer("hidden", None, "Hidden units of the first graph layer, per head for GAT "
                     "(default: the model's recipe).", lower_bound=1)
flags.DEFINE_float("lr", None, "Adam learning rate (default: the model's recipe).", lower_bound=0)
flags.DEFINE_float("weight_decay", None, "L2 on the first layer's kernels (default: the recipe's).", lower_bound=0)
flags.DEFINE_float("dropout", None, "Dropout rate (default: the recipe's).", lower_bound=0, upper_bound=1)
flags.DEFINE_integer("patience", None, "Early-stopping patience on validation loss; 0 disables "
                     "(default: the recipe's).", lower_bound=0)
flags.DEFINE_integer("chunks", 1, "Vertex intervals P: each graph layer runs over P x P edge chunks.",
                     lower_bound=1)
flags.DEFINE_enum("schedule", "ngra", list(SCHEDULES), "Order of the chunk steps (NGra §6.2): ngra (column by "
                  "column, ApplyVertex as each column completes), stage (all chunks, then all ApplyVertex) or "
                  "dest-order (row by row).")
flags.DEFINE_list("rewrites", list(REWRITES), "Compiler rewrites to apply, from " + ", ".join(REWRITES)
                  + "; 'none' for none.")
flags.DEFINE_bool("explain", False, "Print the compiled plan of every graph layer before training.")
flags.DEFINE_integer("seed", 0, "Random seed (weights, dropout, synthetic data).")
flags.DEFINE_integer("runs", 1, "Train this many times with seeds seed, seed+1, ... and report the mean.",
                     lower_bound=1)
flags.DEFINE_string("profile_dir", None, "If set, write a TensorFlow profiler trace of training steps here.")
flags.DEFINE_string("history_json", None, "If set, write the training history here as JSON: every epoch's loss "
                    "and metrics at full precision, the test metrics, and the peak resident memory above the "
                    "baseline (taken once TensorFlow is up, before the dataset is read).")
flags.DEFINE_integer("verbose", 0, "Keras verbosity for fit (0 silent, 1 progress bar, 2 one line per epoch).")


def load(name, seed):
    if name in datasets.PRESETS:
        return datasets.synthetic(name, seed=seed)
    return datasets.cora() if name == "cora" else datasets.load_planetoid_npz(name)


def train_once(dataset, seed):
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
    graph = recipes.prepare_graph(FLAGS.model, dataset.graph)
    rewrites = [] if FLAGS.rewrites == ["none"] else FLAGS.rewrites
    model = recipes.build_model(FLAGS.model, graph, dataset.num_classes, recipe=recipe, chunks=FLAGS.chunks,
                                schedule=FLAGS.schedule, rewrites=rewrites)
    model.compile(optimizer=keras.optimizers.Adam(recipe.learning_rate), loss=ngra_tf.masked_loss(),
                  weighted_metrics=["accuracy"])
    # Row-normalise bag-of-words features (Planetoid); a synthetic preset's are standard normal.
    features = dataset.dense_features(normalize=FLAGS.dataset not in datasets.PRESETS)
    train, val, test = dataset.train_mask, dataset.val_mask, dataset.test_mask
    if FLAGS.explain:
        model.build(features.shape)
        model.explain()
    callbacks = []
    if recipe.patience:
        callbacks.append(keras.callbacks.EarlyStopping("val_loss", patience=recipe.patience,
                                                       restore_best_weights=True))
    if FLAGS.profile_dir:
        callbacks.append(keras.callbacks.TensorBoard(FLAGS.profile_dir, profile_batch=(2, 4)))
    start = time.perf_counter()
    history = model.fit(features, dataset.labels, sample_weight=train, epochs=recipe.epochs,
                        validation_data=(features, dataset.labels, val), callbacks=callbacks,
                        verbose=FLAGS.verbose)
    seconds = time.perf_counter() - start
    result = model.evaluate(features, dataset.labels, sample_weight=test, verbose=0, return_dict=True)
    epochs = len(history.history["loss"])
    print(f"{FLAGS.model} on {FLAGS.dataset}, seed {seed}: test accuracy {result['accuracy']:.4f} "
          f"after {epochs} epochs ({1e3 * seconds / epochs:.1f} ms/epoch)")
    return {"seed": seed, "epochs": epochs, "seconds": seconds,
            "history": {name: [float(v) for v in values] for name, values in history.history.items()},
            "test": {name: float(value) for name, value in result.items()}}


def main(argv):
    del argv
    unknown = set(FLAGS.rewrites) - set(REWRITES) - {"none"}
    if unknown:
        raise app.UsageError(f"--rewrites: unknown {sorted(unknown)}; choose from {', '.join(REWRITES)} or none")
    if FLAGS.history_json and not os.path.isdir(os.path.dirname(os.path.abspath(FLAGS.history_json))):
        raise app.UsageError(f"--history_json: no directory {os.path.dirname(os.path.abspath(FLAGS.history_json))}")
    logging.set_verbosity(logging.WARNING)
    tf.constant(0.0).numpy()  # TensorFlow's runtime is up before the baseline
    baseline = resident.mark()
    dataset = load(FLAGS.dataset, FLAGS.seed)
    runs = [train_once(dataset, FLAGS.seed + run) for run in range(FLAGS.runs)]
    peak = baseline.peak()
    print(peak)
    accuracies = [run["test"]["accuracy"] for run in runs]
    if FLAGS.history_json:
        record = {"model": FLAGS.model, "dataset": FLAGS.dataset, "chunks": FLAGS.chunks, **runs[0],
                  **peak.as_dict()}
        if FLAGS.runs > 1:
            record["runs"] = runs
        integrity.write_json_atomically(FLAGS.history_json, record)
    if FLAGS.runs > 1:
        print(f"{FLAGS.model} on {FLAGS.dataset}: mean test accuracy {np.mean(accuracies):.4f} "
              f"(min {np.min(accuracies):.4f}, max {np.max(accuracies):.4f}) over {FLAGS.runs} runs")
    if FLAGS.profile_dir:
        print(f"profile written under {FLAGS.profile_dir} (open with TensorBoard's Profile tab)")


if __name__ == "__main__":
    app.run(main)
