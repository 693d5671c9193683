"""Lanes: which devices run a model's steps, who owns which column, how source rows travel. One of two,
chosen once per model.

    OneDevice  the default device runs everything
    Ring       a DeviceRing's devices (NGra's ring, NeuGraph's chain, or none; over a TF cluster too):
               device owner(j) holds column j's accumulators and runs its chunk steps and ApplyVertex;
               interval i's rows enter each route once, at its loader, and travel along it (copy_d2d)

Per-vertex work (a stage's prologue and hoisted vertex stage, ApplyVertex)
runs interval by interval, each on one lane, in *rounds* (`rounds`): lane
d's r-th interval in round r, so that every lane's writes into a shared
host array thread through one loop.
"""

from __future__ import annotations

import tensorflow as tf

from ngra_tf.runtime.residency import on_lane


class OneDevice:
    """Every step on the default device."""

    def __init__(self, num_parts: int):
        self.num_parts = num_parts
        self.devices = [None]
        self.host = "/CPU:0"
        self.ring = None

    def __len__(self):
        return 1

    def owner(self, j: int) -> int:
        return 0

    def columns(self, d: int) -> list:
        return list(range(self.num_parts)) if d == 0 else []

    def loaders(self) -> list:
        """The lane that runs each interval's per-vertex work."""
        return [0] * self.num_parts


class Ring:
    """A DeviceRing's devices as lanes, in ring order."""

    def __init__(self, ring, partition):
        ring.check(partition)
        self.ring, self.num_parts = ring, partition.num_parts
        self.devices = list(ring.order)
        self.host = ring.host
        self._index = {device: d for d, device in enumerate(self.devices)}

    def __len__(self):
        return len(self.devices)

    def owner(self, j: int) -> int:
        return self._index[self.ring.owner(j)]

    def columns(self, d: int) -> list:
        return [j for j in range(self.num_parts) if self.owner(j) == d]

    def routes(self, i: int) -> list:
        """Interval i's routes as lane indices: [loader, next, ...]."""
        return [[self._index[device] for device in route] for route in self.ring.routes(i)]

    def loaders(self) -> list:
        """The lane that runs each interval's per-vertex work once: a loader of its routes, taken in turn."""
        return [self.routes(i)[i % len(self.routes(i))][0] for i in range(self.num_parts)]

    def holder(self, d: int, i: int) -> int:
        """The lane whose memory holds interval i's hoisted rows for lane d (in memory: the loader of d's
        route)."""
        return next(route for route in self.routes(i) if d in route)[0]


def by_lane(lanes, lane_of) -> list:
    """Items (intervals or columns) by the lane that runs each: lane_of[item] -> [[item, ...] per lane]."""
    items = [[] for _ in range(len(lanes))]
    for item, d in enumerate(lane_of):
        items[d].append(item)
    return items


def rounds(lanes, items, body, states, parallel: int):
    """body(d, item, states) -> states for each lane d's items (items[d], a list), round by round: lane d's
    r-th item in round r, lanes in order within a round, each under its device."""
    width = max([len(mine) for mine in items] + [0])
    if width == 0:
        return states
    table = tf.constant([[mine[r] if r < len(mine) else -1 for r in range(width)] for mine in items], tf.int32)

    def round_(r, states):
        for d, lane in enumerate(lanes.devices):
            item = table[d][r]
            with on_lane(lane):
                if len(items[d]) == width:
                    states = body(d, item, states)
                else:
                    before = states
                    states = tf.cond(item >= 0, lambda d=d, item=item, before=before: body(d, item, before),
                                     lambda before=before: before)
        return r + 1, states

    _, states = tf.while_loop(lambda r, _: r < width, round_, (tf.constant(0), states), parallel_iterations=parallel)
    return states


def lanes_for(ring, partition):
    """OneDevice, or the Ring of a DeviceRing (checked against the partition)."""
    return OneDevice(partition.num_parts) if ring is None else Ring(ring, partition)


__all__ = ["OneDevice", "Ring", "by_lane", "lanes_for", "rounds"]
