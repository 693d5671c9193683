"""Devices beyond one machine, on TensorFlow's own distributed runtime (no transport of ours).

Each machine runs a worker, a tf.distribute.Server with ngra_tf's ops loaded
(examples/worker.py). The training process connects to them as a client
(tf.config.experimental_connect_to_cluster) and places the ring's steps on
their devices by name, `/job:worker/replica:0/task:k/device:GPU:0`;
TensorFlow moves tensors between tasks itself (gRPC). In the placement's
tree the machines hang under the client's host memory by a network link
(Topology.cluster), so the ring crosses each network link once per
direction.

TensorFlow's servers have no authentication (whoever reaches one can run
graph ops on its machine), and they always listen on every interface. So a
worker listens only on its own cluster address (or where `listen` says), and
the client's own server only on loopback: `serve` and `connect` restart the
calling program once, before TensorFlow starts, with _listen_on.so preloaded
(ops/net/listen_on.c), which gives gRPC's wildcard bind that one address.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sys
import time

import tensorflow as tf

JOB = "worker"
NETWORK_GBPS = 1.25  # 10 Gb/s Ethernet, in GB/s: the default top link between machines
EVERYWHERE = "*"  # `listen` for every interface: only on a network whose every host is trusted
LISTEN_LIBRARY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_listen_on.so")
LISTEN_ENV = "NGRA_TF_LISTEN_ON"
_LOOPBACK = "127.0.0.1"  # the client's own server: TensorFlow names it localhost:port
_TASK = re.compile(rf"/job:{JOB}/replica:\d+/task:(\d+)")
_UNAVAILABLE = re.compile(r"UNAVAILABLE:\s*([^\n]{1,200})")


def cluster_spec(cluster) -> tf.train.ClusterSpec:
    """The workers of `cluster`: a list of host:port, or "TF_CONFIG" (its cluster's worker job)."""
    if cluster == "TF_CONFIG" or cluster == ["TF_CONFIG"]:
        try:
            config = json.loads(os.environ.get("TF_CONFIG") or "")
            addresses = config["cluster"][JOB]
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"TF_CONFIG must be JSON with a cluster that has a {JOB!r} job "
                             f"({type(error).__name__}: {error})") from None
    else:
        addresses = list(cluster)
    if not addresses:
        raise ValueError("the cluster has no workers")
    for address in addresses:
        host, _, port = str(address).rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"a worker address is host:port, got {address!r}")
    return tf.train.ClusterSpec({JOB: [str(a) for a in addresses]})


def serve(cluster, task: int, listen: str | None = None):
    """Runs worker `task` of `cluster` in this process, with ngra_tf's kernels registered; returns the server.

    It listens on the address of its own host in `cluster`, or on `listen` (a name or address of this
    machine, or "*" for every interface). May restart the program first (see the module doc).
    """
    spec = cluster_spec(cluster)
    if not 0 <= task < spec.num_tasks(JOB):
        raise ValueError(f"task must lie in [0, {spec.num_tasks(JOB)}), got {task}")
    host = spec.task_address(JOB, task).rpartition(":")[0]
    try:
        address = listen_address(listen or host)
    except ValueError as error:
        if listen:
            raise ValueError(f"listen={listen!r}: {error}; give a name or address of this machine") from None
        raise ValueError(f"task {task} ({spec.task_address(JOB, task)}): {error}; run it on the machine that "
                         "has that address, or say where to listen (an address of this machine, or '*' for every "
                         "interface, on a trusted network only)") from None
    listen_only_on(address)
    from ngra_tf.ops._loader import library

    library()  # the worker runs the ring's ops, so it must have their kernels
    return tf.distribute.Server(spec, job_name=JOB, task_index=task, start=True)


def listen_address(name: str) -> str:
    """The IP address that `name` (a host name or address of this machine) listens on; "*" stays "*"."""
    if name == EVERYWHERE:
        return name
    try:
        found = [info[4][0] for info in socket.getaddrinfo(name.strip("[]"), None, type=socket.SOCK_STREAM)]
    except (socket.gaierror, UnicodeError) as error:
        raise ValueError(f"cannot resolve {name!r} ({error})") from None
    address = next((a for a in found if ":" not in a), found[0])  # IPv4 first; a client tries every address
    try:
        with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET) as probe:
            probe.bind((address, 0))
    except OSError:
        named = name if name.strip("[]") == address else f"{name} ({address})"
        raise ValueError(f"{named} is not an address of this machine") from None
    return address


def listen_only_on(address: str) -> None:
    """Makes TensorFlow's servers in this process listen on `address` only ("*": every interface).

    A preloaded library takes effect only when a program starts, so unless this process already runs
    with it for `address`, this restarts the program (same interpreter, options and arguments) with it;
    it returns only in a process that has it. Call it before anything you would not want done twice.
    """
    if address == EVERYWHERE:
        return
    preload = [path for path in os.environ.get("LD_PRELOAD", "").split(":") if path]
    if os.environ.get(LISTEN_ENV) == address and LISTEN_LIBRARY in preload:
        return
    if not os.path.exists(LISTEN_LIBRARY):
        raise RuntimeError(f"{LISTEN_LIBRARY} is missing, so TensorFlow would listen on every interface; "
                           "reinstall ngra-tf (make ops, or pip install .) to build it")
    argv = getattr(sys, "orig_argv", None)
    interactive = not sys.argv or sys.argv[0] in ("", "-") or "ipykernel" in sys.modules
    if not argv or interactive:  # a session cannot be restarted under the user
        raise RuntimeError(f"TensorFlow would listen on every interface: start Python with "
                           f"LD_PRELOAD={LISTEN_LIBRARY} {LISTEN_ENV}={address}, or run a script")
    environment = dict(os.environ, LD_PRELOAD=":".join([LISTEN_LIBRARY, *preload]), **{LISTEN_ENV: address})
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *argv[1:]], environment)


def wait_for_workers(spec: tf.train.ClusterSpec, seconds: float) -> None:
    """Returns once every worker accepts connections; raises ValueError naming one that did not within `seconds`."""
    deadline = time.monotonic() + seconds
    for task, address in enumerate(spec.job_tasks(JOB)):
        host, _, port = address.rpartition(":")
        while True:
            try:
                socket.create_connection((host.strip("[]"), int(port)), timeout=1.0).close()
                break
            except OSError as error:
                if time.monotonic() >= deadline:
                    raise ValueError(f"worker task {task} at {address} did not answer within {seconds:g} s "
                                     f"({error.strerror or error}): start it with examples/worker.py "
                                     f"--cluster={','.join(spec.job_tasks(JOB))} --task={task}") from None
                time.sleep(0.25)


def lost_worker(error: BaseException, spec: tf.train.ClusterSpec):
    """(task, address, reason) of the worker a TensorFlow error says was lost, or None."""
    text = str(error)
    found = _TASK.search(text)
    if found is None or int(found.group(1)) >= spec.num_tasks(JOB):
        return None
    task = int(found.group(1))
    reason = _UNAVAILABLE.search(text)  # gRPC's status, e.g. "Connection reset by peer"
    return task, spec.task_address(JOB, task), reason.group(1).strip() if reason else type(error).__name__


def connect(cluster, count: int | None = None, wait: float = 60.0) -> list:
    """Makes this process the cluster's client; returns its workers' devices (GPUs if any, else CPUs), by task.

    Must run before TensorFlow has executed anything. `count` keeps the first ones; workers not up yet are
    waited for up to `wait` seconds. The client's own server listens on loopback only (see the module doc).
    """
    spec = cluster_spec(cluster)
    listen_only_on(_LOOPBACK)
    wait_for_workers(spec, wait)
    tf.config.experimental_connect_to_cluster(spec)
    remote = [d.name for d in tf.config.list_logical_devices() if tf.DeviceSpec.from_string(d.name).job == JOB]
    gpus = [d for d in remote if tf.DeviceSpec.from_string(d).device_type == "GPU"]
    devices = sorted(gpus or remote, key=_task_and_index)
    if count is not None:
        if count > len(devices):
            raise ValueError(f"{count} devices asked for, but the cluster's workers have {len(devices)}")
        devices = devices[:count]
    return devices


def _task_and_index(name):
    spec = tf.DeviceSpec.from_string(name)
    return spec.task or 0, spec.device_index or 0


def machines(devices) -> list:
    """Devices grouped by the machine (job and task) they belong to, in order."""
    groups = {}
    for name in devices:
        spec = tf.DeviceSpec.from_string(name)
        groups.setdefault((spec.job, spec.task), []).append(name)
    return list(groups.values())


def processes(devices) -> list:
    """A CPU device of this process and of each cluster worker `devices` run in: where each process's own
    counters (copy_stats) are read."""
    hosts = ["/cpu:0"]
    for group in machines(devices):
        spec = tf.DeviceSpec.from_string(group[0])
        if spec.job == JOB:
            hosts.append(tf.DeviceSpec(job=JOB, replica=spec.replica or 0, task=spec.task or 0, device_type="CPU",
                                       device_index=0).to_string())
    return hosts


__all__ = ["EVERYWHERE", "JOB", "NETWORK_GBPS", "cluster_spec", "connect", "listen_address", "listen_only_on",
           "lost_worker", "machines", "processes", "serve", "wait_for_workers"]
