"""Timing shared by the benchmarks: the median of repeated calls, after warm-up calls."""

import statistics
import time


def median_ms(fn, repeats: int, warmup: int = 1) -> float:
    """Median wall time of fn() in milliseconds over `repeats` calls, after `warmup` untimed ones
    (tracing, allocation, caches)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


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
