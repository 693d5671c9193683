"""The plan: everything about a model's run that is decided before its executor is built. NumPy only.

    tables.py   step tables for every schedule, and per lane over several devices (one format)
    budget.py   the working-set estimate of a store-backed model, its host tier and its chunk cache
    cache.py    which chunk reads the cache serves: Belady's optimal eviction over an epoch's known steps

A `LayerPlan` is one graph layer's part: its step tables, in-degrees and the
arrays its forward leaves per column, from its compiled kernels (what they
read and reduce) and the partition's shape; no TensorFlow is traced here.
"""

from __future__ import annotations

import functools

import numpy as np
import tensorflow as tf

from ngra_tf.compiler.kernels import LayerKernels
from ngra_tf.compiler.signature import program_signature
from ngra_tf.runtime.plan.tables import LaneTables, backward_table, forward_table, in_degree, needs_start


def compile_layer(layer, spec, graph, rewrites, training, partition, schedule, ring=None):
    """A graph layer compiled for rows like `spec` over `graph` (a Graph, or a store's shapes): its LayerKernels
    (with their `signature`: ngra_tf.compiler.signature) and LayerPlan."""
    program = layer.compiled(spec, graph, rewrites, training)
    kernels = LayerKernels(program, layer.variables)
    kernels.check_chunkable(partition.num_parts)
    kernels.signature = program_signature(program, layer.variables)
    return kernels, LayerPlan(kernels, partition, schedule, ring)


class LayerPlan:
    """The steps of one graph layer (its LayerKernels) over a partition's shape (num_parts, bounds,
    edge_counts, in_degree(i, j): a Partition or a store's view), in `schedule` order; `ring` (a DeviceRing)
    adds per-lane tables. `columns` restricts the steps to those destination intervals (one device's)."""

    def __init__(self, kernels, partition, schedule: str, ring=None, columns=None):
        self.partition, self.schedule = partition, schedule
        self.num_parts = partition.num_parts
        self.bounds = np.asarray(partition.bounds, np.int64)
        self.sizes = np.diff(self.bounds)
        self.num_markers = len(kernels.markers)
        self._chained_by_max = any(r in ("max", "min") for r in kernels.chain_reduces)
        self._ring, self._columns = ring, columns
        self.column_specs = column_specs(kernels)

    # The tables are made when first asked for: a memory estimate over a store not yet written reads none.

    @functools.cached_property
    def forward_steps(self) -> np.ndarray:
        return forward_table(self.partition, self.schedule, self.num_markers, self._chained_by_max, self._columns)

    @functools.cached_property
    def backward_steps(self) -> np.ndarray:
        return backward_table(self.partition, self.num_markers, self._columns)

    @functools.cached_property
    def degree(self) -> np.ndarray:
        """In interval order: mean divides by it, max / min start where it is > 0."""
        return in_degree(self.partition)

    @functools.cached_property
    def lanes(self):
        if self._ring is None or self._columns is not None:
            return None
        starts = [needs_start(self.partition, j) if self._chained_by_max else False for j in range(self.num_parts)]
        return LaneTables(self._ring, self.partition, starts)

    def for_columns(self, kernels, columns) -> "LayerPlan":
        """The same layer's steps of `columns` only (a lane's, for layers that go column by column)."""
        return LayerPlan(kernels, self.partition, self.schedule, columns=columns)


def column_specs(kernels) -> dict:
    """{name: (row shape, dtype)} of what a layer's forward leaves per column: A per reducer ("acc{r}"), max /
    min winners ("won{r}": the source interval, "edge{r}": the edge), softmax statistics ("peak{m}",
    "total{m}")."""
    width = int(np.prod(kernels.feature_shape, dtype=np.int64))
    found = {}
    for r, reduce in enumerate(kernels.chain_reduces):
        found[f"acc{r}"] = (tuple(kernels.feature_shape), tf.as_dtype(kernels.dtype))
        if reduce in ("max", "min"):
            found[f"won{r}"] = ((width,), tf.int32)
            found[f"edge{r}"] = ((width,), tf.int64)
    for m, name in enumerate(kernels.markers):
        shape = tuple(kernels.program.edge.graph.get_operation_by_name(name).inputs[0].shape[1:].as_list())
        found[f"peak{m}"] = (shape, tf.as_dtype(kernels.dtype))
        found[f"total{m}"] = (shape, tf.as_dtype(kernels.dtype))
    return found


__all__ = ["LayerPlan", "column_specs", "compile_layer"]
