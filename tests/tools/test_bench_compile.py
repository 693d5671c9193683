"""tools/bench_compile.py refuses depths it cannot build in one line, before it measures anything."""

import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("depths", ["x", "2,1"])
def test_bad_depths_give_one_error_line_and_no_traceback(depths):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "bench_compile.py"), f"--depths={depths}"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 1, done.stderr[-3000:]
    assert "takes whole numbers >= 2, the residual GCN's graph layers" in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr and done.stdout == ""
