"""This process's resident memory: a baseline, then the peak above it.

A memory budget is checked by measurement, not by an estimate. Linux keeps the
process's peak resident set (VmHWM in /proc/self/status) and lets a process
reset it (writing "5" to /proc/self/clear_refs), so a peak can be taken over
any stretch of a run: mark a baseline when TensorFlow is up and before the
graph's data is read, run, then read the peak. Resident memory counts
file-backed pages (memory-mapped stores, the op library) as well as anonymous
ones; both are reported. A store-backed fit hands freed heap pages back to the
OS after every epoch (`release_free_memory`), which glibc would keep resident.
"""

from __future__ import annotations

import dataclasses

from ngra_tf.store.memory import format_bytes

_STATUS = "/proc/self/status"
_CLEAR_REFS = "/proc/self/clear_refs"


def _status() -> dict:
    """Memory fields of /proc/self/status in bytes ({} where there is no procfs)."""
    fields = {}
    try:
        with open(_STATUS) as status:
            for line in status:
                key, _, value = line.partition(":")
                parts = value.split()
                if len(parts) == 2 and parts[1] == "kB":
                    fields[key] = int(parts[0]) * 1024
    except OSError:
        pass
    return fields


def _reset_peak() -> bool:
    try:
        with open(_CLEAR_REFS, "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


@dataclasses.dataclass(frozen=True)
class Baseline:
    """Resident memory at the moment `mark()` was called."""

    resident_bytes: int  # VmRSS
    anonymous_bytes: int  # RssAnon
    file_bytes: int  # RssFile
    peak_was_reset: bool  # False: the peak below may include what came before the baseline

    def peak(self) -> "Peak":
        """The peak resident memory since the baseline."""
        fields = _status()
        hwm = fields.get("VmHWM", 0)
        return Peak(self, hwm, max(0, hwm - self.resident_bytes))


@dataclasses.dataclass(frozen=True)
class Peak:
    baseline: Baseline
    peak_resident_bytes: int  # VmHWM since the baseline
    above_baseline_bytes: int  # what the measured stretch added at its peak

    def as_dict(self) -> dict:
        return {"peak_memory_bytes": self.above_baseline_bytes,
                "peak_resident_bytes": self.peak_resident_bytes,
                "baseline_resident_bytes": self.baseline.resident_bytes,
                "baseline_anonymous_bytes": self.baseline.anonymous_bytes,
                "baseline_file_bytes": self.baseline.file_bytes,
                "peak_was_reset": self.baseline.peak_was_reset}

    def __str__(self):
        note = "" if self.baseline.peak_was_reset else " (peak could not be reset: it may predate the baseline)"
        return (f"peak memory {format_bytes(self.above_baseline_bytes)} above the baseline "
                f"(peak resident {format_bytes(self.peak_resident_bytes)}, baseline "
                f"{format_bytes(self.baseline.resident_bytes)}: {format_bytes(self.baseline.anonymous_bytes)} "
                f"anonymous + {format_bytes(self.baseline.file_bytes)} file-backed){note}")


def mark() -> Baseline:
    """Resets the process's peak resident memory and records the current one as the baseline."""
    was_reset = _reset_peak()
    fields = _status()
    return Baseline(fields.get("VmRSS", 0), fields.get("RssAnon", 0), fields.get("RssFile", 0), was_reset)


def resident_bytes(field: str = "VmRSS") -> int:
    """The process's resident memory now: VmRSS, or its RssAnon / RssFile part (0 where there is no procfs)."""
    return _status().get(field, 0)


_malloc_trim = None


def release_free_memory() -> bool:
    """Hands the C heap's free pages back to the OS (glibc's malloc_trim); False where there is no glibc.

    An epoch frees what it allocated, but glibc keeps freed pages resident, spread over its per-thread arenas;
    which of them the next epoch reuses varies, so resident memory swings and can creep from epoch to epoch
    while the bytes in use stay flat (tools/soak.py measures both). Costs about a millisecond on a 200 MiB heap.
    """
    global _malloc_trim
    if _malloc_trim is None:
        import ctypes  # noqa: PLC0415

        try:
            _malloc_trim = ctypes.CDLL(None).malloc_trim
        except (OSError, AttributeError):
            _malloc_trim = False
    if not _malloc_trim:
        return False
    _malloc_trim(0)
    return True


def device_tier() -> str:
    """The device the kernels run on: the first GPU TensorFlow sees, else the CPU."""
    import tensorflow as tf  # noqa: PLC0415  (measuring the process needs no TensorFlow)

    return "/GPU:0" if tf.config.list_logical_devices("GPU") else "/CPU:0"


def device_peak_bytes(device: str) -> int | None:
    """Peak bytes allocated on a GPU device tier since TensorFlow started (None for the CPU: measure the
    process instead)."""
    if not device.upper().startswith("/GPU"):
        return None
    import tensorflow as tf  # noqa: PLC0415

    return int(tf.config.experimental.get_memory_info(device.lstrip("/"))["peak"])
