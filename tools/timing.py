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
