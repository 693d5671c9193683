"""A discrete-event model of NGra's multi-GPU streaming (§4.2), to redraw the shape of its Fig. 16 anywhere.

Links. A transfer is a flow over the links of its Topology path. Each
direction of a link is its own resource (PCIe, QPI, NVLink and networks are
full duplex), and the flows on a resource share it max-min fairly
(progressive filling: a flow held back elsewhere leaves its unused share to
the others), so two loads through one switch uplink take twice as long as
one. Time jumps from one flow or compute completion to the next, where the
rates are recomputed. Devices, chunks and events are visited in a fixed
order, so a run is deterministic.

Devices. A Placement (ngra_tf.parallel.placement) gives, per chunk of a
stream, routes of devices: the first loads the chunk from host memory,
each next one copies it from the one before (D2D). A device

- receives one chunk at a time, in its order (below), while it has fewer
  than `buffer` chunks arrived or arriving that it has not computed (2: the
  one it computes, the one arriving);
- computes its chunks one at a time in the same order, overlapping the
  copies (NGra's explicit D2D op);
- keeps a computed chunk until its successor on the route has it
  (Result.peak_chunks says how many it held at most).

A device takes chunk c, which is h hops down c's route, in the order of
c + h: the step at which a steady pipeline brings it (NGra Fig. 8, where
GPU 2 computes chunks 3, 4 before 1, 2). This order cannot stall. Take the
unfinished (device, chunk) with the least (c + h, c); every pair ordered
before it is finished. Its sender is finished too, so its chunk has
arrived (or it is a load, and its device's buffer is empty); then it can
be computed; then its successor can take it next, as the successor's
earlier pairs have all arrived (their senders are finished) or are loads,
and computing them frees the buffer, which counts only chunks not computed.

Workload. `layer` streams one layer in NGra's destination-major order
(§3.1, Fig. 4; §4.2's "different sets of such subgraphs" per GPU): device
k owns destination intervals k, k + D, ..., and for each in turn every
source chunk streams past, costing it one tile. So a device's compute per
chunk stays the same as D grows and its passes shrink. (Were all
destinations resident instead, each chunk would cost a device 1/D of the
compute but still a whole transfer through its link, and no ring could
pass ~2.1x at 4 GPUs with Fig. 16's 1.06x non-ring calibration.)
"""

from __future__ import annotations

import dataclasses
import heapq
import math
from typing import Callable, Hashable, Sequence

from ngra_tf.parallel.placement import PLACEMENTS, place

GB = 1e9  # Link.bandwidth is in GB/s (powers of 1000)

# The calibration that reproduces NGra Fig. 16's 1 -> 2 GPU speedups on the paper's 8-GPU box (derived in
# tools/simulate_ring.py): a tile's compute is 1.06x a chunk's host load by one GPU alone, P = 16.
COMPUTE_PER_LOAD = 1.06
INTERVALS = 16
CHUNK_BYTES = 64e6
BUFFER = 2


def fair_rates(flows: Sequence[Sequence[Hashable]], capacity: Callable[[Hashable], float]) -> list[float]:
    """Max-min fair rates for flows over shared resources, by progressive filling.

    The resource with the least equal share left is the bottleneck of every
    unfixed flow on it: they get that share, which is taken from each
    resource they cross, and the rest go on. A flow crossing nothing gets an
    infinite rate (it completes at once).
    """
    rates = [math.inf] * len(flows)
    left, users = {}, {}
    for index, resources in enumerate(flows):
        for resource in resources:
            left.setdefault(resource, capacity(resource))
            users.setdefault(resource, []).append(index)
    while users:
        bottleneck = min(users, key=lambda resource: left[resource] / len(users[resource]))
        share = left[bottleneck] / len(users[bottleneck])
        for index in list(users[bottleneck]):
            rates[index] = share
            for resource in flows[index]:
                left[resource] = max(0.0, left[resource] - share)
                users[resource].remove(index)
                if not users[resource]:
                    del users[resource]
    return rates


@dataclasses.dataclass
class _Flow:
    resources: tuple
    remaining: float
    done: Callable[[], None]


class Engine:
    """Flows over shared resources and timed computations, run to completion in time order.

    `capacity(resource)` is in bytes per second. When flows or timers
    complete, their callbacks run (flows in start order, then timers), then
    `react` once, which may start more.
    """

    def __init__(self, capacity: Callable[[Hashable], float]):
        self.capacity = capacity
        self.now = 0.0
        self._flows: list[_Flow] = []
        self._timers: list = []  # heap of (end, sequence number, callback)
        self._started = 0

    def transfer(self, resources: Sequence[Hashable], nbytes: float, done: Callable[[], None]):
        self._flows.append(_Flow(tuple(resources), float(nbytes), done))

    def after(self, seconds: float, done: Callable[[], None]):
        heapq.heappush(self._timers, (self.now + seconds, self._started, done))
        self._started += 1

    def run(self, react: Callable[[], None]) -> float:
        """Runs until nothing is in flight; returns the time then."""
        react()
        while self._flows or self._timers:
            rates = fair_rates([flow.resources for flow in self._flows], self.capacity)
            ends = [flow.remaining / rate if rate > 0 else math.inf for flow, rate in zip(self._flows, rates)]
            step = min(ends, default=math.inf)
            if self._timers:
                step = min(step, self._timers[0][0] - self.now)
            if math.isinf(step):
                raise RuntimeError("flows with no bandwidth and nothing else in flight: a link of bandwidth 0?")
            step = max(step, 0.0)
            self.now += step
            slack = 1e-12 * max(self.now, 1e-9)
            finished, running = [], []
            for flow, rate, end in zip(self._flows, rates, ends):
                if end <= step + slack:
                    finished.append(flow)
                else:
                    flow.remaining -= rate * step
                    running.append(flow)
            self._flows = running
            for flow in finished:
                flow.done()
            while self._timers and self._timers[0][0] <= self.now + slack:
                heapq.heappop(self._timers)[2]()
            react()
        return self.now


@dataclasses.dataclass
class Result:
    """One simulated run: its time, each device's compute time, and the bytes moved."""

    time_s: float
    busy_s: dict        # device -> seconds spent computing
    host_bytes: float   # loaded from host memory
    d2d_bytes: float    # copied device to device
    link_bytes: dict    # (link, direction) -> bytes that crossed it that way
    peak_chunks: dict   # device -> the most chunks it held at once

    @property
    def idle_s(self) -> dict:
        return {device: self.time_s - busy for device, busy in self.busy_s.items()}


class _Stream:
    """The devices' state while `chunks` chunks stream through a placement (see the module docstring)."""

    def __init__(self, placement, chunks, chunk_bytes, cost, buffer):
        self.topology, self.devices = placement.topology, tuple(placement.devices)
        self.chunks, self.chunk_bytes, self.cost, self.buffer = chunks, chunk_bytes, cost, buffer
        self.sender, self.receiver, hops = {}, {}, {}  # (device, chunk) -> device, or None for the host / none
        for chunk in range(chunks):
            for route in placement.routes(chunk):
                for at, device in enumerate(route):
                    self.sender[device, chunk] = route[at - 1] if at else None
                    self.receiver[device, chunk] = route[at + 1] if at + 1 < len(route) else None
                    hops[device, chunk] = at
        missing = [(d, c) for d in self.devices for c in range(chunks) if (d, c) not in hops]
        if missing:
            raise ValueError(f"the placement's routes miss {len(missing)} (device, chunk) pairs, "
                             f"the first {missing[0]}")
        self.order = {d: sorted(range(chunks), key=lambda c, d=d: (c + hops[d, c], c)) for d in self.devices}
        self.engine = Engine(lambda resource: resource[0].bandwidth * GB)
        self.received, self.computed, self.handed = set(), set(), set()  # of (device, chunk)
        self.next_receive = dict.fromkeys(self.devices, 0)  # indices into order[device]
        self.next_compute = dict.fromkeys(self.devices, 0)
        self.receiving = dict.fromkeys(self.devices, False)
        self.computing = dict.fromkeys(self.devices, False)
        self.uncomputed = dict.fromkeys(self.devices, 0)  # arrived or arriving, not computed yet
        self.held = dict.fromkeys(self.devices, 0)  # those, and computed ones not handed on yet
        self.peak = dict.fromkeys(self.devices, 0)
        self.busy = dict.fromkeys(self.devices, 0.0)
        self.host_bytes = self.d2d_bytes = 0.0
        self.link_bytes = {}
        self._paths = {}

    def run(self) -> Result:
        time_s = self.engine.run(self.react)
        assert len(self.computed) == len(self.devices) * self.chunks, "stalled (it cannot: see the module docstring)"
        return Result(time_s, self.busy, self.host_bytes, self.d2d_bytes, self.link_bytes, self.peak)

    def react(self):
        for device in self.devices:
            self.start_receive(device)
            self.start_compute(device)

    def path(self, source, target):
        if (source, target) not in self._paths:
            origin = self.topology.root if source is None else source
            self._paths[source, target] = tuple(self.topology.path(origin, target))
        return self._paths[source, target]

    def start_receive(self, device):
        if self.receiving[device] or self.uncomputed[device] >= self.buffer or \
                self.next_receive[device] == self.chunks:
            return
        chunk = self.order[device][self.next_receive[device]]
        source = self.sender[device, chunk]
        if source is not None and (source, chunk) not in self.received:
            return
        self.next_receive[device] += 1
        self.receiving[device] = True
        self.uncomputed[device] += 1
        self.held[device] += 1
        self.peak[device] = max(self.peak[device], self.held[device])
        if source is None:
            self.host_bytes += self.chunk_bytes
        else:
            self.d2d_bytes += self.chunk_bytes
        path = self.path(source, device)
        for resource in path:
            self.link_bytes[resource] = self.link_bytes.get(resource, 0.0) + self.chunk_bytes
        self.engine.transfer(path, self.chunk_bytes, lambda: self.arrived(device, chunk))

    def start_compute(self, device):
        if self.computing[device] or self.next_compute[device] == self.chunks:
            return
        chunk = self.order[device][self.next_compute[device]]
        if (device, chunk) not in self.received:
            return
        self.next_compute[device] += 1
        self.computing[device] = True
        seconds = self.cost(device, chunk)
        self.busy[device] += seconds
        self.engine.after(seconds, lambda: self.computed_one(device, chunk))

    def arrived(self, device, chunk):
        self.receiving[device] = False
        self.received.add((device, chunk))
        source = self.sender[device, chunk]
        if source is not None:
            self.handed.add((source, chunk))
            self.maybe_drop(source, chunk)

    def computed_one(self, device, chunk):
        self.computing[device] = False
        self.uncomputed[device] -= 1
        self.computed.add((device, chunk))
        self.maybe_drop(device, chunk)

    def maybe_drop(self, device, chunk):
        if (device, chunk) in self.computed and \
                (self.receiver[device, chunk] is None or (device, chunk) in self.handed):
            self.held[device] -= 1


def simulate(placement, chunks: int, chunk_bytes: float, compute_s, buffer: int = BUFFER) -> Result:
    """Streams `chunks` chunks of `chunk_bytes` bytes past every device of `placement`.

    `compute_s`: one device's compute per chunk, in seconds, or a function of
    (device, chunk). `placement` needs `devices`, `routes(chunk)` and a
    `topology` with `root` (host memory) and `path(a, b)` -> [(link,
    direction)], each link with a `bandwidth` in GB/s per direction.
    """
    if chunks < 1 or buffer < 1:
        raise ValueError(f"chunks and buffer must be at least 1, got {chunks} and {buffer}")
    cost = compute_s if callable(compute_s) else (lambda device, chunk: compute_s)
    return _Stream(placement, chunks, chunk_bytes, cost, buffer).run()


def layer(placement, intervals: int, chunk_bytes: float, tile_s: float, buffer: int = BUFFER) -> Result:
    """One layer over a P x P grid of chunks (P = `intervals`), in NGra's destination-major order.

    The k-th of the placement's D devices owns destination intervals k,
    k + D, ...; in round r each works on its r-th interval while all P
    source chunks stream past (stream chunk r * P + i is source chunk i),
    each costing it `tile_s` (tile C[i][j] on one device). A device with no
    interval left in the last round only forwards.
    """
    if intervals < 1:
        raise ValueError(f"intervals must be at least 1, got {intervals}")
    rank = {device: k for k, device in enumerate(placement.devices)}
    count = len(rank)

    def cost(device, chunk):
        return tile_s if (chunk // intervals) * count + rank[device] < intervals else 0.0

    return simulate(placement, -(-intervals // count) * intervals, chunk_bytes, cost, buffer)


def load_s(topology, chunk_bytes: float) -> float:
    """Seconds for the topology's first device, alone, to load a chunk from host memory."""
    path = topology.path(topology.root, topology.devices[0])
    return chunk_bytes / (min(link.bandwidth for link, _ in path) * GB)


def sweep(topology, counts=(1, 2, 4, 8), kinds=PLACEMENTS, *, intervals: int = INTERVALS,
          chunk_bytes: float = CHUNK_BYTES, tile_s: float | None = None, buffer: int = BUFFER) -> dict:
    """{kind: {n: Result}}: `layer` on the first n devices of `topology`, for n in `counts` and 1.

    tile_s defaults to COMPUTE_PER_LOAD x `load_s`, Fig. 16's calibration.
    """
    if tile_s is None:
        tile_s = COMPUTE_PER_LOAD * load_s(topology, chunk_bytes)
    counts = sorted({1, *counts})
    return {kind: {n: layer(place(topology, kind, topology.devices[:n]), intervals, chunk_bytes, tile_s, buffer)
                   for n in counts} for kind in kinds}


def speedups(results: dict) -> dict:
    """{kind: {n: time on 1 device / time on n}} from `sweep`'s results."""
    return {kind: {n: runs[1].time_s / run.time_s for n, run in runs.items()} for kind, runs in results.items()}
