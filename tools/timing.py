"""Timing shared by the benchmarks: medians of repeated calls, after warm-up calls."""

import statistics
import time


def median_ms(fn, repeats: int, warmup: int = 1) -> float:
    """Median wall time of fn() in milliseconds over `repeats` calls, after `warmup` untimed ones
    (tracing, allocation, caches)."""
    return alternated_ms({"fn": fn}, repeats, warmup)["fn"]


def alternated_ms(fns: dict, repeats: int, warmup: int = 1) -> dict:
    """Median wall time in milliseconds of each fn in `fns` over `repeats` rounds, each round calling every fn
    once in turn (after `warmup` untimed rounds): a shared machine's slow spells fall on every system alike,
    where timing one system's calls and then the next's would pin them on whichever ran then."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


def epoch_timer():
    """(a Keras callback, the list it fills): every epoch's wall time in seconds, from epoch begin to epoch end
    (validation included; the first also traces)."""
    import keras  # noqa: PLC0415  (only the benchmarks that train need it)

    seconds = []

    class EpochTimer(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            self.start = time.perf_counter()

        def on_epoch_end(self, epoch, logs=None):
            seconds.append(time.perf_counter() - self.start)

    return EpochTimer(), seconds
