"""NGra's explicit data-movement ops (§3.1): host->device, device->host, device->device.

Each is a real copy into a new buffer, counted in bytes per kind and device,
so that streaming and ring schedules can be measured by what they move.
Place them with tf.device; on a CPU-only machine they copy between the host
store and the budgeted working set.
"""

import collections

import tensorflow as tf

from ngra_tf.ops._loader import library


def _copy(kind, x):
    x = tf.convert_to_tensor(x)
    lib = library()
    if lib is None:
        return tf.identity(x)
    return getattr(lib, f"ngra_copy_{kind}")(x)


def copy_h2d(x):
    """Copies a host tensor to the current device."""
    return _copy("h2d", x)


def copy_d2h(x):
    """Copies a device tensor to host memory."""
    return _copy("d2h", x)


def copy_d2d(x):
    """Copies a tensor from its device to the current device."""
    return _copy("d2d", x)


def copy_stats(reset=False, hosts=("/cpu:0",)):
    """Bytes moved since the last reset, as {(kind, device): bytes}, summed over the processes of `hosts`.

    kind is "h2d", "d2h" or "d2d"; device is the full TF device name. Each
    process counts the copies its own kernels made: over a TensorFlow
    cluster, name a CPU device of each worker (the default reads this
    process's counters).
    """
    lib = library()
    if lib is None:
        return {}
    stats = collections.OrderedDict()
    for host in hosts:
        with tf.device(host):
            kinds, devices, counts = lib.ngra_copy_stats(tf.constant(bool(reset)))
        for kind, device, count in zip(kinds.numpy(), devices.numpy(), counts.numpy()):
            key = (kind.decode(), device.decode())
            stats[key] = stats.get(key, 0) + int(count)
    return stats
