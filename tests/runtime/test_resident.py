"""The resident-memory baseline and peak that memory budgets are checked with."""

import subprocess
import sys

from ngra_tf.runtime import resident


_PEAK_CHECK = """
import numpy as np
from ngra_tf.runtime import resident
baseline = resident.mark()
assert baseline.peak_was_reset  # Linux lets a process reset its VmHWM
block = np.ones(64 << 20, np.uint8)  # touched, so resident
peak = baseline.peak()
assert peak.above_baseline_bytes >= 60 << 20, peak
assert peak.peak_resident_bytes >= baseline.resident_bytes + peak.above_baseline_bytes
del block
again = resident.mark()  # a new baseline forgets the old peak
assert again.peak().above_baseline_bytes < 32 << 20, again.peak()
"""


def test_peak_counts_what_was_touched_after_the_baseline_and_resets():
    # In a process of its own: in a test worker, memory other tests freed can take the new block without
    # growing the resident set.
    done = subprocess.run([sys.executable, "-c", _PEAK_CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]


def test_report_names_the_peak_and_the_baseline():
    peak = resident.mark().peak()
    record = peak.as_dict()
    assert set(record) >= {"peak_memory_bytes", "peak_resident_bytes", "baseline_resident_bytes"}
    assert "above the baseline" in str(peak) and "file-backed" in str(peak)
    assert resident.format_bytes(3 << 29) == "1.5 GiB" and resident.format_bytes(512) == "512 B"
