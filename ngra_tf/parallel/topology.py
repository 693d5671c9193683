"""The bandwidth tree of a multi-device machine (NGra §4.1).

Host memory is the root (the vertex data lives there), devices are the
leaves, and every other node is something the bytes pass through: a CPU
socket, a PCIe host bridge or switch, a network. Each node reaches its parent
by one full-duplex link with a bandwidth per direction, so two transfers
share bandwidth exactly when they cross the same link in the same direction.
NVLink (or NVSwitch) connections between devices lie outside the tree as
`peers`; a transfer between two devices joined by one uses it instead.

Where a topology comes from:
- `Topology.load(path)`: a JSON file (below) or `nvidia-smi topo -m` output;
- `Topology.sample(name)`: the samples in ngra_tf/parallel/topologies/;
- `Topology.single_switch(n)`: n devices behind one PCIe switch, the default
  when nothing else is known;
- `Topology.cluster(machines)`: several machines joined by a network.

JSON format (`to_json` writes it, `from_json` reads it)::

    {"name": "paper-8gpu",
     "tree": {"name": "host", "kind": "host", "children": [
         {"name": "switch0", "kind": "switch", "link": {"kind": "pcie", "bandwidth": 12.0}, "children": [
             {"name": "GPU0", "kind": "device", "link": {"kind": "pcie", "bandwidth": 12.0}}]}]},
     "peers": [{"a": "GPU0", "b": "GPU1", "kind": "nvlink", "bandwidth": 25.0}],
     "devices": ["GPU0"]}

Every node but the root has a `link` to its parent. Node kinds are
NODE_KINDS, link kinds LINK_KINDS, bandwidths GB/s per direction. `peers`
(default none) joins pairs of devices; `devices` (default: the device leaves
in depth-first order) is the index order, GPU0 first.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import re
from pathlib import Path
from typing import NamedTuple

# Effective bandwidths, GB/s in each direction, of the P100-era machines the
# paper measured on.
PCIE3_X16 = 12.0  # PCIe 3.0 x16: 15.75 GB/s raw, about 12 GB/s measured for pinned copies.
# One QPI link at 9.6 GT/s carries 19.2 GB/s raw per direction, but devices
# cannot reach each other peer-to-peer across it (NGra §4.1), and TensorFlow
# places host buffers without regard to NUMA, so device traffic across
# sockets is staged through the other socket's memory and gets about half:
# below one x16 link, which makes the socket boundary the bottleneck.
QPI = 9.6
NVLINK_PER_LINK = 20.0  # NVLink 1.0 (P100), per link; `NV#` in nvidia-smi bonds # links.
ETHERNET_10G = 1.25  # 10 Gb/s Ethernet, the default network between machines.

NODE_KINDS = ("host", "socket", "bridge", "switch", "network", "device")
LINK_KINDS = ("pcie", "qpi", "nvlink", "network")

SAMPLES = Path(__file__).parent / "topologies"


class TopologyError(ValueError):
    """A topology that cannot be read or is not a bandwidth tree; the message names where."""


class Link(NamedTuple):
    """A full-duplex link: `bandwidth` GB/s in each direction.

    A tree link has its parent as `a` and its child as `b`; a peer link joins
    devices `a` and `b`.
    """

    a: str
    b: str
    kind: str
    bandwidth: float


class Topology:
    """A bandwidth tree plus peer links; read-only once made (it is validated then)."""

    def __init__(self, name: str, kind: dict, uplink: dict, peers=(), devices=None, *, source: str | None = None):
        """kind: node -> kind, children in this order; uplink: child -> Link(parent, child, ...).

        devices: the index order of the device leaves (default depth-first);
        source: where the description came from, for error messages.
        """
        self.name = name
        self.kind = dict(kind)
        self.uplink = dict(uplink)
        self.parent = {child: link.a for child, link in self.uplink.items()}
        self.peers = list(peers)
        self._source = source or name
        self.root = self._find_root()
        self._children = {node: [] for node in self.kind}
        for child in self.kind:  # in node order: that is the children's order
            if child in self.parent:
                self._children[self.parent[child]].append(child)
        self._check_tree()
        leaves = tuple(node for node in self.depth_first() if self.kind[node] == "device")
        self._devices = leaves if devices is None else tuple(devices)
        if len(set(self._devices)) != len(self._devices) or set(self._devices) != set(leaves):
            self._fail(f"devices {list(self._devices)} are not the device leaves {list(leaves)}")
        self._check_peers()
        self._peer = {frozenset((link.a, link.b)): link for link in self.peers}

    # -- validation ---------------------------------------------------------

    def _fail(self, message):
        raise TopologyError(f"{self._source}: {message}")

    def _where(self, node):
        """The node's path from the root, for messages: 'node host > switch0 > GPU1'."""
        return "node " + " > ".join([*reversed(self.ancestors(node)), node])

    def _check_link(self, where, link):
        if link.kind not in LINK_KINDS:
            self._fail(f"{where}: unknown link kind {link.kind!r}; expected one of {', '.join(LINK_KINDS)}")
        bandwidth = link.bandwidth
        if isinstance(bandwidth, bool) or not isinstance(bandwidth, (int, float)) or not math.isfinite(bandwidth) \
                or bandwidth <= 0:
            self._fail(f"{where}: bandwidth must be a positive number of GB/s, got {bandwidth!r}")

    def _find_root(self):
        """The one node without a link up, which must be host memory; each link up must join known nodes."""
        for child, link in self.uplink.items():
            if child not in self.kind:
                self._fail(f"a link up from unknown node {child!r}")
            if link.b != child or link.a not in self.kind:
                self._fail(f"node {child!r}: its link up must be Link(parent, {child!r}, ...), got {link}")
        roots = [node for node in self.kind if node not in self.uplink]
        if len(roots) != 1:
            self._fail(f"a tree has one root (a node without a link up), found {roots}")
        if self.kind[roots[0]] != "host":
            self._fail(f"the root {roots[0]!r} must be host memory (kind 'host'), not {self.kind[roots[0]]!r}")
        return roots[0]

    def _check_tree(self):
        for node in self.kind:  # no cycles: every node's way up ends at the root
            seen = {node}
            while node != self.root:
                node = self.parent[node]
                if node in seen:
                    self._fail(f"node {node!r} is its own ancestor")
                seen.add(node)
        for node, kind in self.kind.items():
            if kind not in NODE_KINDS:
                self._fail(f"{self._where(node)}: unknown kind {kind!r}; expected one of {', '.join(NODE_KINDS)}")
            if node != self.root:
                self._check_link(self._where(node), self.uplink[node])
            if kind == "device" and self._children[node]:
                self._fail(f"{self._where(node)}: a device must be a leaf, it has {self._children[node]} under it")
            if kind != "device" and not self._children[node]:
                self._fail(f"{self._where(node)}: a {kind} with no devices under it")

    def _check_peers(self):
        pairs = set()
        for index, link in enumerate(self.peers):
            where = f"peer link {index} ({link.a} - {link.b})"
            for end in (link.a, link.b):
                if self.kind.get(end) != "device":
                    self._fail(f"{where}: {end!r} is not a device")
            if link.a == link.b:
                self._fail(f"{where}: a device linked to itself")
            if frozenset((link.a, link.b)) in pairs:
                self._fail(f"{where}: a second link between the same devices")
            pairs.add(frozenset((link.a, link.b)))
            self._check_link(where, link)

    # -- the tree -----------------------------------------------------------

    @property
    def devices(self) -> tuple:
        return self._devices

    def _known(self, node):
        if node not in self.kind:
            raise TopologyError(f"{self.name}: no node {node!r}")
        return node

    def children(self, node) -> list:
        return list(self._children[self._known(node)])

    def ancestors(self, node) -> list:
        """Parent, grandparent, ..., the root."""
        chain = []
        self._known(node)
        while node in self.parent:
            node = self.parent[node]
            chain.append(node)
        return chain

    def depth_first(self) -> list:
        """All nodes, parents before children, children in order."""
        order, stack = [], [self.root]
        while stack:
            node = stack.pop()
            order.append(node)
            stack.extend(reversed(self._children[node]))
        return order

    def path(self, a, b) -> list:
        """The links a transfer from a to b crosses, in order, as (Link, direction).

        direction is "up" (toward the root) or "down" on a tree link, and
        "a->b" or "b->a" (by the Link's ends) on a peer link, which is taken
        whenever one joins a and b directly.
        """
        self._known(a)
        self._known(b)
        if a == b:
            return []
        peer = self._peer.get(frozenset((a, b)))
        if peer is not None:
            return [(peer, "a->b" if peer.a == a else "b->a")]
        above_a, above_b = [a, *self.ancestors(a)], [b, *self.ancestors(b)]
        common = next(node for node in above_a if node in above_b)
        up = [(self.uplink[node], "up") for node in above_a[:above_a.index(common)]]
        down = [(self.uplink[node], "down") for node in reversed(above_b[:above_b.index(common)])]
        return up + down

    def subtree(self, devices) -> "Topology":
        """The same machine cut down to `devices` and the nodes above them (peers among them kept)."""
        devices = list(devices)
        unknown = [d for d in devices if self.kind.get(d) != "device"]
        if unknown:
            raise TopologyError(f"{self.name}: not devices of this topology: {unknown}; "
                                f"it has {list(self.devices)}")
        if len(set(devices)) != len(devices) or not devices:
            raise TopologyError(f"{self.name}: expected distinct devices, got {devices}")
        kept = set(devices).union(*(self.ancestors(d) for d in devices))
        return Topology(self.name, {n: k for n, k in self.kind.items() if n in kept},
                        {n: link for n, link in self.uplink.items() if n in kept},
                        [link for link in self.peers if link.a in kept and link.b in kept],
                        [d for d in self.devices if d in kept])

    def describe(self) -> str:
        """The tree, indented, with each node's link up; then the peer links."""
        lines = [f"{self.name}: {len(self.devices)} devices, root {self.root}"]
        for node in self.depth_first():
            depth = len(self.ancestors(node))
            link = self.uplink.get(node)
            up = f"  <- {link.kind} {link.bandwidth:g} GB/s" if link else ""
            lines.append(f"{'  ' * (depth + 1)}{node} [{self.kind[node]}]{up}")
        n, kinds = len(self.devices), {(link.kind, link.bandwidth) for link in self.peers}
        if n > 2 and len(self.peers) == n * (n - 1) // 2 and len(kinds) == 1:  # an NVSwitch box: one line
            kind, bandwidth = kinds.pop()
            lines.append(f"  peer links: every pair of devices, {kind} {bandwidth:g} GB/s")
        elif self.peers:
            lines.append("  peer links:")
            lines.extend(f"    {link.a} <-> {link.b}  {link.kind} {link.bandwidth:g} GB/s" for link in self.peers)
        return "\n".join(lines)

    def __repr__(self):
        return f"Topology({self.name!r}, devices={list(self.devices)})"

    # -- JSON ---------------------------------------------------------------

    def to_json(self) -> dict:
        def node_json(node):
            out = {"name": node, "kind": self.kind[node]}
            if node in self.uplink:
                out["link"] = {"kind": self.uplink[node].kind, "bandwidth": self.uplink[node].bandwidth}
            if self._children[node]:
                out["children"] = [node_json(child) for child in self._children[node]]
            return out

        return {"name": self.name, "tree": node_json(self.root),
                "peers": [link._asdict() for link in self.peers], "devices": list(self.devices)}

    @classmethod
    def from_json(cls, obj_or_path) -> "Topology":
        """A dict, a JSON string or the path of a JSON file (format in the module docstring)."""
        source = "<json>"
        if isinstance(obj_or_path, (str, os.PathLike)) and not str(obj_or_path).lstrip().startswith("{"):
            source = str(obj_or_path)
            obj_or_path = Path(obj_or_path).read_text()
        if isinstance(obj_or_path, str):
            try:
                obj_or_path = json.loads(obj_or_path)
            except json.JSONDecodeError as error:
                raise TopologyError(f"{source} line {error.lineno}: not JSON: {error.msg}") from None
        return _TopologyJson(source).read(obj_or_path)

    # -- other sources ------------------------------------------------------

    @classmethod
    def load(cls, path) -> "Topology":
        """A .json file, or else a file of `nvidia-smi topo -m` output."""
        path = Path(path)
        if path.suffix == ".json":
            return cls.from_json(path)
        return cls.parse_nvidia_smi(path.read_text(), name=path.stem, source=str(path))

    @classmethod
    def sample(cls, name) -> "Topology":
        """One of the sample machines in ngra_tf/parallel/topologies/, by file name (with or without suffix)."""
        names = sorted({p.name for p in SAMPLES.iterdir()} | {p.stem for p in SAMPLES.iterdir()})
        matches = [p for p in sorted(SAMPLES.iterdir()) if name in (p.name, p.stem)]
        if not matches:
            raise TopologyError(f"no sample topology {name!r}; the samples are {names}")
        return cls.load(matches[0])

    @classmethod
    def parse_nvidia_smi(cls, text, name="nvidia-smi", pcie=PCIE3_X16, qpi=QPI, nvlink_per_link=NVLINK_PER_LINK,
                         source="<text>") -> "Topology":
        """The machine that `nvidia-smi topo -m` printed (see _NvidiaSmiMatrix for how the tree is built)."""
        matrix = _NvidiaSmiMatrix(text, source)
        return matrix.topology(name, pcie, qpi, nvlink_per_link)

    @classmethod
    def single_switch(cls, n, pcie=PCIE3_X16) -> "Topology":
        """host -> one PCIe switch -> GPU0..GPU{n-1}: the default for n devices of unknown topology."""
        if not isinstance(n, int) or n < 1:
            raise TopologyError(f"single_switch: the number of devices must be a positive int, got {n!r}")
        kind = {"host": "host", "switch0": "switch"}
        uplink = {"switch0": Link("host", "switch0", "pcie", pcie)}
        for index in range(n):
            kind[f"GPU{index}"] = "device"
            uplink[f"GPU{index}"] = Link("switch0", f"GPU{index}", "pcie", pcie)
        return cls(f"single-switch-{n}", kind, uplink)

    @classmethod
    def cluster(cls, machines, network=ETHERNET_10G, names=None) -> "Topology":
        """Machines as one tree: machine 0's host memory is the root, the others' hang under it by network links.

        Node names get the machine's name as a prefix: "w0/GPU0", "w1/GPU0", ...
        """
        machines = list(machines)
        names = [f"w{index}" for index in range(len(machines))] if names is None else list(names)
        if not machines or len(names) != len(machines) or len(set(names)) != len(names):
            raise TopologyError(f"cluster: expected machines with distinct names, got {len(machines)} machines "
                                f"named {names}")
        kind, uplink, peers, devices = {}, {}, [], []
        for index, (prefix, machine) in enumerate(zip(names, machines)):
            def named(node, prefix=prefix):
                return f"{prefix}/{node}"

            kind.update((named(node), k) for node, k in machine.kind.items())
            uplink.update((named(node), link._replace(a=named(link.a), b=named(link.b)))
                          for node, link in machine.uplink.items())
            peers.extend(link._replace(a=named(link.a), b=named(link.b)) for link in machine.peers)
            devices.extend(named(device) for device in machine.devices)
            if index:
                root = named(machine.root)
                uplink[root] = Link(f"{names[0]}/{machines[0].root}", root, "network", network)
        label = ", ".join(f"{prefix}={machine.name}" for prefix, machine in zip(names, machines))
        return cls(f"cluster({label})", kind, uplink, peers, devices)


class _TopologyJson:
    """Reads the JSON format, naming the node (by its path) or the peer that is wrong."""

    NODE_KEYS = {"name", "kind", "link", "children"}

    def __init__(self, source):
        self.source = source
        self.kind, self.uplink = {}, {}

    def fail(self, where, message):
        raise TopologyError(f"{self.source}: {where}: {message}")

    def read(self, obj) -> Topology:
        if not isinstance(obj, dict) or "tree" not in obj:
            self.fail("top level", 'expected an object with a "tree"')
        extra = set(obj) - {"name", "tree", "peers", "devices"}
        if extra:
            self.fail("top level", f"unknown keys {sorted(extra)}")
        self.node(obj["tree"], [], parent=None)
        peers = obj.get("peers", [])
        if not isinstance(peers, list):
            self.fail("peers", "expected a list")
        links = [self.link(peer, f"peers[{index}]", ("a", "b", "kind", "bandwidth"))
                 for index, peer in enumerate(peers)]
        devices = obj.get("devices")
        if devices is not None and not (isinstance(devices, list) and all(isinstance(d, str) for d in devices)):
            self.fail("devices", "expected a list of device names")
        name = obj.get("name", Path(self.source).stem)
        return Topology(name, self.kind, self.uplink, links, devices, source=self.source)

    def link(self, obj, where, keys) -> Link:
        if not isinstance(obj, dict) or set(obj) != set(keys):
            self.fail(where, f"expected an object with exactly the keys {list(keys)}, got {obj!r}")
        if not all(isinstance(obj.get(end, ""), str) for end in ("a", "b")):
            self.fail(where, f"a and b must be device names, got {obj!r}")
        return Link(obj.get("a"), obj.get("b"), obj["kind"], obj["bandwidth"])

    def node(self, obj, path, parent):
        label = obj.get("name") if isinstance(obj, dict) else None
        where = "node " + " > ".join([*path, str(label or "?")])
        if not isinstance(obj, dict):
            self.fail(where, f"expected an object, got {obj!r}")
        name = obj.get("name")
        if not isinstance(name, str) or not name:
            self.fail(where, f"a node needs a non-empty string name, got {name!r}")
        if set(obj) - self.NODE_KEYS or "kind" not in obj:
            self.fail(where, f"expected the keys name, kind, link (except the root), children; got {sorted(obj)}")
        if name in self.kind:
            self.fail(where, f"a second node named {name!r}")
        self.kind[name] = obj["kind"]
        if parent is None and "link" in obj:
            self.fail(where, "the root (host memory) has no link up")
        if parent is not None:
            if "link" not in obj:
                self.fail(where, "every node but the root needs a link to its parent")
            link = self.link(obj["link"], where + " link", ("kind", "bandwidth"))
            self.uplink[name] = link._replace(a=parent, b=name)
        children = obj.get("children", [])
        if not isinstance(children, list):
            self.fail(where, "children must be a list")
        for child in children:
            self.node(child, path + [name], parent=name)


class _NvidiaSmiMatrix:
    """The GPU-to-GPU relation matrix of `nvidia-smi topo -m`, checked, and the tree it implies.

    Relations, nearest first: PIX (one PCIe switch), PXB (several switches,
    no host bridge), PHB (through a host bridge, i.e. the CPU), NODE (across
    host bridges within a NUMA node), SYS (across the socket interconnect);
    NV# is # bonded NVLinks, and hides the PCIe relation. The tree:
    - GPUs joined by anything nearer than SYS share a socket; so do GPUs with
      the same NUMA (else CPU) affinity, and NVLink pairs whose affinity is not
      known. Socket 0 (GPU0's) is the root "host"; each other socket is a
      node "socket<k>" under it by a QPI link.
    - Under a socket, GPUs joined by PIX/PXB share a switch tree: one switch
      for a PIX group, an upper switch over the PIX groups of a PXB group.
      Other GPUs (PHB, NODE, or only NVLinks known) hang under the socket by
      their own PCIe link; host bridges are not nodes, as each switch has its
      own link to the CPU.
    - Every NV# pair is a peer link of # x nvlink_per_link GB/s.
    NIC rows and columns are checked for shape only.
    """

    RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}
    ALIASES = {"SOC": "SYS"}  # what older drivers print for SYS
    AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
    ANSI = re.compile(r"\x1b\[[0-9;]*m")  # the header's underlining when copied from a terminal
    GPU = re.compile(r"GPU\d+$")
    NVLINK = re.compile(r"NV(\d+)$")

    def __init__(self, text, source):
        self.source = source
        self.relation = {}  # (gpu, gpu) -> token, both orders
        self.row_line = {}  # row name -> its line number
        self.affinity = {}  # gpu -> NUMA node, else CPU list, else None
        lines = [self.ANSI.sub("", line) for line in text.splitlines()]
        header = next((number for number, line in enumerate(lines, 1) if line.strip()), None)
        if header is None:
            self.fail(1, "empty input; expected the output of `nvidia-smi topo -m`")
        self.read_header(header, lines[header - 1])
        for number, line in enumerate(lines[header:], header + 1):
            if line.strip().startswith(("Legend", "NIC Legend")):
                break
            if line.strip():
                self.read_row(number, line.split())
        missing = [gpu for gpu in self.gpus if gpu not in self.row_line]
        if missing:
            self.fail(header, f"{', '.join(missing)} in the header but no row for it")
        self.check_symmetric()

    def fail(self, line, message):
        raise TopologyError(f"{self.source} line {line}: {message}")

    def read_header(self, number, line):
        for column in self.AFFINITY_COLUMNS:
            line = line.replace(column, column.replace(" ", "_"))
        tokens = line.split()
        if not self.GPU.match(tokens[0]) or "X" in tokens:
            self.fail(number, f"expected the header (GPU0 GPU1 ... CPU Affinity), got {line.strip()!r}")
        affinity = [column.replace(" ", "_") for column in self.AFFINITY_COLUMNS]
        first_extra = next((i for i, token in enumerate(tokens) if token in affinity), len(tokens))
        self.columns, self.extras = tokens[:first_extra], tokens[first_extra:]
        if len(set(self.columns)) != len(self.columns):
            self.fail(number, f"a column named twice in {self.columns}")
        self.gpus = [column for column in self.columns if self.GPU.match(column)]
        self.header = number

    def read_row(self, number, tokens):
        name = tokens[0]
        if name not in self.columns:
            self.fail(number, f"a row for {name!r}, which is not a column of the header (line {self.header})")
        if name in self.row_line:
            self.fail(number, f"a second row for {name} (the first is line {self.row_line[name]})")
        expected = len(self.columns) + len(self.extras)
        is_gpu = self.GPU.match(name)
        if len(tokens) - 1 != expected and (is_gpu or len(tokens) - 1 != len(self.columns)):
            self.fail(number, f"{name} has {len(tokens) - 1} fields, expected {expected} "
                              f"({len(self.columns)} relations and {len(self.extras)} affinity columns)")
        self.row_line[name] = number
        if not is_gpu:
            return  # a NIC: nvidia-smi leaves its affinity columns empty
        for column, token in zip(self.columns, tokens[1:]):
            if self.GPU.match(column):
                self.relation[name, column] = self.read_relation(number, name, column, token)
        extras = dict(zip(self.extras, tokens[1 + len(self.columns):]))
        known = [extras.get(key) for key in ("NUMA_Affinity", "CPU_Affinity") if extras.get(key) not in (None, "N/A")]
        self.affinity[name] = known[0] if known else None

    def read_relation(self, number, row, column, token):
        token = self.ALIASES.get(token, token)
        if (token == "X") != (row == column):
            self.fail(number, f"{row}-{column} is {token!r}; X (self) belongs on the diagonal and only there")
        nvlinks = self.NVLINK.match(token)
        if token != "X" and token not in self.RANK and not (nvlinks and int(nvlinks[1]) > 0):
            self.fail(number, f"unknown relation {token!r} between {row} and {column}; "
                              "expected X, PIX, PXB, PHB, NODE, SYS or NV# (# NVLinks)")
        return token

    def check_symmetric(self):
        for index, a in enumerate(self.gpus):
            for b in self.gpus[index + 1:]:
                if self.relation[a, b] != self.relation[b, a]:
                    self.fail(self.row_line[b], f"{b}-{a} is {self.relation[b, a]} but {a}-{b} "
                                                f"(line {self.row_line[a]}) is {self.relation[a, b]}: "
                                                "the matrix must be symmetric")

    # -- the tree -----------------------------------------------------------

    def rank(self, a, b):
        """The PCIe relation's rank, or None when NVLink hides it."""
        return self.RANK.get(self.relation[a, b])

    def same_socket(self, a, b):
        rank, key_a, key_b = self.rank(a, b), self.affinity[a], self.affinity[b]
        if rank is not None:
            return rank < self.RANK["SYS"]
        return key_a == key_b or key_a is None or key_b is None

    def groups(self, gpus, joined, level, what):
        """The connected groups of `joined`, each checked to be one `what`: no pair in it further apart than `level`."""
        groups, left = [], list(gpus)
        while left:
            group, frontier = [], [left.pop(0)]
            while frontier:
                gpu = frontier.pop()
                group.append(gpu)
                near = [other for other in left if joined(gpu, other)]
                left = [other for other in left if other not in near]
                frontier.extend(near)
            group.sort(key=self.gpus.index)
            for a in group:
                for b in group:
                    if self.rank(a, b) is not None and self.rank(a, b) > self.RANK[level]:
                        self.fail(self.row_line[a], f"{a}-{b} is {self.relation[a, b]}, yet the other relations "
                                                    f"put {a} and {b} in one {what}: not a tree")
            groups.append(group)
        return groups

    def topology(self, name, pcie, qpi, nvlink_per_link) -> Topology:
        kind, uplink = {"host": "host"}, {}

        def add(node, node_kind, parent, link_kind, bandwidth):
            kind[node] = node_kind
            uplink[node] = Link(parent, node, link_kind, bandwidth)

        switches = (f"switch{index}" for index in itertools.count())
        sockets = self.groups(self.gpus, self.same_socket, "NODE", "socket")
        for index, socket in enumerate(sockets):
            top = "host" if index == 0 else f"socket{index}"
            if index:
                add(top, "socket", "host", "qpi", qpi)
            pcie_trees = self.groups(socket, lambda a, b: self.rank(a, b) in (self.RANK["PIX"], self.RANK["PXB"]),
                                     "PXB", "PCIe switch tree")
            for tree in pcie_trees:
                pix_groups = self.groups(tree, lambda a, b: self.rank(a, b) == self.RANK["PIX"], "PIX", "PCIe switch")
                parent = top
                if len(tree) > 1:
                    parent = next(switches)
                    add(parent, "switch", top, "pcie", pcie)
                for group in pix_groups:
                    group_parent = parent
                    if len(group) > 1 and len(pix_groups) > 1:
                        group_parent = next(switches)
                        add(group_parent, "switch", parent, "pcie", pcie)
                    for gpu in group:
                        add(gpu, "device", group_parent, "pcie", pcie)
        peers = [Link(a, b, "nvlink", int(self.NVLINK.match(self.relation[a, b])[1]) * nvlink_per_link)
                 for index, a in enumerate(self.gpus) for b in self.gpus[index + 1:]
                 if self.rank(a, b) is None]
        return Topology(name, kind, uplink, peers, self.gpus, source=self.source)
