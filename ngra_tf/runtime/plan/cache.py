"""Which reads of a training step the cache serves: Belady's eviction over the step's known accesses.

A training step reads chunks, and the store's features tile by tile, in an
order the step tables fix in advance (every layer's forward, then every
layer's backward, and again every step),
so the cache can evict what is needed furthest in the future (Belady's
optimal policy) rather than what was used longest ago (LRU), which on a
cyclic scan evicts exactly what comes next. `CachePlan` simulates the policy
over the step's accesses, repeated until the cache's contents at the start
of a step no longer change (the steady state), and gives per access:

    keep[t]   after access t its item is in the cache (a miss inserts it)
    evict[t]  the items to drop at access t to make room (-1 padded)

A miss that would evict something needed sooner than itself is not cached
(bypass). Items have sizes; the cache holds at most `capacity` bytes at any
time. `reads_first` and `reads_steady` are the bytes a first and a later
step read: the minimum a step needs under this capacity (every access is
read when nothing fits, nothing after the first step when everything does).
"""

from __future__ import annotations

import numpy as np

from ngra_tf.runtime.plan.tables import K


class CachePlan:
    """Belady's policy over `items` (one id per access, in order) of sizes `nbytes` ({id: bytes}), in a cache of
    `capacity` bytes (see the module doc)."""

    def __init__(self, items, nbytes: dict, capacity: int, max_periods: int = 6):
        self.items = np.asarray(items, np.int64)
        self.nbytes, self.capacity = dict(nbytes), int(capacity)
        T = len(self.items)
        self.next_use = _next_uses(self.items)  # position of each access's item's next access (cyclically)
        contents = {}
        for _ in range(max_periods):
            start = dict(contents)
            keep, evict, reads, contents = self._period(contents)
            if contents == start:  # the steady state: this period's decisions repeat
                break
        self.keep, self.reads_steady = keep, reads
        self.reads_first = self._replay(keep, evict)
        width = max([len(e) for e in evict] + [1])
        self.evict = np.full((T, width), -1, np.int64)
        for t, dropped in enumerate(evict):
            self.evict[t, :len(dropped)] = dropped
        self.cached = {item: self.nbytes[item] for item in contents}  # what stays between steps

    def _replay(self, keep, evict) -> int:
        """The bytes a step reads when it runs these decisions from an empty cache (every step runs the steady
        ones, the first too): at each access, drop its evictions, then read what is not held, keeping it if
        asked."""
        held, reads = set(), 0
        for t, item in enumerate(self.items):
            held.difference_update(evict[t])
            item = int(item)
            if item not in held:
                reads += self.nbytes[item]
                if keep[t]:
                    held.add(item)
        return reads

    @property
    def cached_bytes(self) -> int:
        return sum(self.cached.values())

    def _period(self, contents):
        """One step from `contents` ({item: its next use}): (keep, evict, bytes read, contents after)."""
        T = len(self.items)
        used = sum(self.nbytes[item] for item in contents)
        keep, evict, reads = np.zeros(T, bool), [], 0
        contents = dict(contents)
        for t, item in enumerate(self.items):
            item = int(item)
            upcoming = t + int(self.next_use[t])  # positions past T fall in the next step
            dropped = []
            if item in contents:
                contents[item] = upcoming
                keep[t] = True
                evict.append(dropped)
                continue
            reads += self.nbytes[item]
            size = self.nbytes[item]
            if size <= self.capacity:
                # Farthest next use first; stop at anything needed sooner than this item (then do not cache it).
                order = sorted(contents, key=lambda other: -contents[other])
                free, victims = self.capacity - used, []
                for other in order:
                    if free >= size or contents[other] <= upcoming:
                        break
                    victims.append(other)
                    free += self.nbytes[other]
                if free >= size:
                    for other in victims:
                        del contents[other]
                        used -= self.nbytes[other]
                    dropped = victims
                    contents[item] = upcoming
                    used += size
                    keep[t] = True
            evict.append(dropped)
        # The next step sees these items' next uses one period on.
        return keep, evict, reads, {item: use - T for item, use in contents.items()}


def training_accesses(stages, layers: dict, spill: str, tiles: dict | None = None, num_chunks: int = 0):
    """What a training step reads, in order, and where each stage's loops start in that order.

    Items are chunk ids k (< num_chunks) and the row tiles of the store's
    features, num_chunks + t. `layers` maps a graph stage's index to its
    LayerPlan; `tiles` a stage that reads the store's features to its number
    of tiles (read in order by its per-vertex pass, and again by its
    backward). Backward recomputes a graph stage's forward first under
    spill="recompute". Returns (items, {(stage index, kind): offset}), kinds
    "forward", "recompute", "backward" (chunk loops) and the same with
    "_tiles" (feature reads).
    """
    tiles = tiles or {}
    items, offsets = [], {}

    def walk(index, kind, steps):
        offsets[(index, kind)] = len(items)
        items.extend(int(k) for k in steps)

    def rows(index, kind):
        if index in tiles:
            walk(index, kind + "_tiles", num_chunks + np.arange(tiles[index]))

    indices = range(len(stages)) if stages is not None else sorted(layers)
    for index in indices:
        rows(index, "forward")
        if index in layers:
            walk(index, "forward", layers[index].forward_steps[:, K])
    for index in reversed(indices):
        if index in layers:
            if spill == "recompute":
                rows(index, "recompute")
                walk(index, "recompute", layers[index].forward_steps[:, K])
            walk(index, "backward", layers[index].backward_steps[:, K])
        rows(index, "backward")
    return items, offsets


def _next_uses(items) -> np.ndarray:
    """For each access, how many accesses later its item comes again (cyclically, within one period)."""
    T = len(items)
    distance = np.zeros(T, np.int64)
    last = {}
    for t in range(2 * T - 1, -1, -1):
        item = int(items[t % T])
        if t < T:
            distance[t] = last[item] - t
        last[item] = t
    return distance


__all__ = ["CachePlan", "training_accesses"]
