"""The chunk cache's plan: Belady's policy over a training step's known accesses reads the least a step
can read at a capacity, never holds more than the capacity, and keeps its contents from step to step."""

import itertools

import numpy as np
import pytest

from ngra_tf.runtime.plan.cache import CachePlan, training_accesses


def _scans(num_items, passes):
    """A step of `passes` scans over every item, alternately up and down (a layer's forward, column by column,
    then its backward, row by row, reorder them the same way)."""
    up = list(range(num_items))
    return list(itertools.chain.from_iterable(up if p % 2 == 0 else up[::-1] for p in range(passes)))


def _replay(plan, steps):
    """Runs the plan's decisions for `steps` steps from an empty cache: (bytes read per step, largest size)."""
    contents, reads, largest = set(), [], 0
    for _ in range(steps):
        read = 0
        for t, item in enumerate(plan.items):
            item = int(item)
            for victim in plan.evict[t]:
                if victim >= 0:
                    assert victim in contents, (t, victim)
                    contents.discard(int(victim))
            if item not in contents:
                read += plan.nbytes[item]
                if plan.keep[t]:
                    contents.add(item)
            else:
                assert plan.keep[t]  # an item found stays
            largest = max(largest, sum(plan.nbytes[i] for i in contents))
        reads.append(read)
    return reads, largest


@pytest.mark.parametrize("capacity", [0, 3, 5, 9, 10, 40])
def test_each_pass_reads_only_what_the_cache_cannot_hold(capacity):
    plan = CachePlan(_scans(10, 4), {i: 1 for i in range(10)}, capacity)
    held = min(capacity, 10)
    assert plan.reads_steady == 4 * (10 - held)  # every pass misses the items not held: the minimum
    assert plan.reads_first == 10 + 3 * (10 - held)
    reads, largest = _replay(plan, 3)
    assert reads == [plan.reads_first, plan.reads_steady, plan.reads_steady]
    assert largest <= capacity


def test_items_of_several_sizes_stay_within_the_capacity():
    rng = np.random.default_rng(3)
    sizes = {i: int(s) for i, s in enumerate(rng.integers(1, 9, 24))}
    capacity = sum(sizes.values()) // 2
    plan = CachePlan(_scans(24, 4), sizes, capacity)
    reads, largest = _replay(plan, 4)
    assert largest <= capacity and reads[1:] == [plan.reads_steady] * 3
    assert plan.reads_steady < 4 * sum(sizes.values())


def test_layers_scanning_the_same_way_defeat_lru_not_belady():
    """Two layers' forward passes walk the chunks in the same order: LRU evicts exactly the chunk needed next
    and misses everything; Belady keeps what fits."""
    items = list(range(10)) * 2
    plan = CachePlan(items, {i: 1 for i in range(10)}, 6)
    assert plan.reads_steady == 2 * 4  # each scan misses the 4 chunks not held
    assert _lru_reads(items, {i: 1 for i in range(10)}, 6) == 20


def test_column_passes_are_read_once_when_a_column_fits():
    """A column-wide layer (GAT with attention dropout) walks each column three times in a row: a cache of
    one column's size turns 3 reads of every chunk into 1."""
    P = 4
    items = [i * P + j for j in range(P) for _ in range(3) for i in range(P)]
    plan = CachePlan(items, {k: 1 for k in range(P * P)}, P)
    assert plan.reads_steady == P * P


def test_training_accesses_follow_the_executor():
    class Layer:
        def __init__(self, forward, backward):
            self.forward_steps = np.array([[0, 0, 0, k, 0, 0, 0] for k in forward])
            self.backward_steps = np.array([[0, 0, 0, k, 0, 0, 0] for k in backward])

    layers = {0: Layer([0, 1], [1, 0]), 2: Layer([2, 3], [3, 2])}
    items, offsets = training_accesses(None, layers, "spill")
    assert items == [0, 1, 2, 3, 3, 2, 1, 0]
    assert offsets == {(0, "forward"): 0, (2, "forward"): 2, (2, "backward"): 4, (0, "backward"): 6}
    items, offsets = training_accesses(None, layers, "recompute")
    assert items == [0, 1, 2, 3, 2, 3, 3, 2, 0, 1, 1, 0] and offsets[(0, "recompute")] == 8


def _lru_reads(items, sizes, capacity, steps=3):
    from collections import OrderedDict  # noqa: PLC0415

    cache, reads = OrderedDict(), 0
    for step in range(steps):
        for item in items:
            if item in cache:
                cache.move_to_end(item)
                continue
            if step == steps - 1:
                reads += sizes[item]
            cache[item] = sizes[item]
            while sum(cache.values()) > capacity:
                cache.popitem(last=False)
    return reads
