"""Devices beyond one machine, on TensorFlow's own distributed runtime (no transport of ours).

Each machine runs a worker, a tf.distribute.Server with ngra_tf's ops loaded
(examples/worker.py). The training process connects to them as a client
(tf.config.experimental_connect_to_cluster) and places the ring's steps on
their devices by name, `/job:worker/replica:0/task:k/device:GPU:0`;
TensorFlow moves tensors between tasks itself (gRPC). In the placement's
tree the machines hang under the client's host memory by a network link
(Topology.cluster), so the ring crosses each network link once per
direction.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

JOB = "worker"
NETWORK_GBPS = 1.25  # 10 Gb/s Ethernet, in GB/s: the default top link between machines


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


def serve(cluster, task: int):
    """Runs worker `task` of `cluster` in this process, with ngra_tf's kernels registered; returns the server."""
    from ngra_tf.ops._loader import library

    library()  # the worker runs the ring's ops, so it must have their kernels
    spec = cluster_spec(cluster)
    if not 0 <= task < spec.num_tasks(JOB):
        raise ValueError(f"task must lie in [0, {spec.num_tasks(JOB)}), got {task}")
    return tf.distribute.Server(spec, job_name=JOB, task_index=task, start=True)


def connect(cluster, count: int | None = None) -> list:
    """Makes this process the cluster's client; returns its workers' devices (GPUs if any, else CPUs), by task.

    Must run before TensorFlow has executed anything remote. `count` keeps the first ones.
    """
    spec = cluster_spec(cluster)
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


__all__ = ["JOB", "NETWORK_GBPS", "cluster_spec", "connect", "machines", "serve"]
