"""tools/simulate_ring.py: Fig. 16's table and figure with its defaults, a small JSON run, and bad flags."""

import json
import os
import pathlib
import subprocess
import sys

import pytest
from plot_checks import assert_plot

ROOT = pathlib.Path(__file__).resolve().parents[2]


def run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run([sys.executable, str(ROOT / "tools" / "simulate_ring.py"), *args], capture_output=True,
                          text=True, timeout=300, env=env, cwd=ROOT)


def rows(stdout):
    """The first table's rows: {devices: {placement: speedup}}."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("devices"))
    kinds = lines[start].split()[1:]
    table = {}
    for line in lines[start + 1:]:
        if not line[:1].isdigit():
            break
        count, *cells = line.split()
        table[int(count)] = {kind: float(cell.rstrip("x")) for kind, cell in zip(kinds, cells)}
    return table


def test_defaults_print_figure_16s_shape_and_write_the_png(tmp_path):
    png = tmp_path / "ring.png"
    done = run(f"--out={png}")
    assert done.returncode == 0, done.stderr[-3000:]
    table = rows(done.stdout)
    assert set(table) == {1, 2, 4, 8} and all(value == 1.0 for value in table[1].values())
    assert table[2]["none"] == pytest.approx(1.06, abs=0.1) and table[2]["ring"] == pytest.approx(1.93, abs=0.1)
    assert table[4]["ring"] >= 3.5 and table[8]["ring"] / 8 < table[4]["ring"] / 4
    for words in ("topology paper-8gpu", "host memory", "destination-major", "1.06 x the load",
                  "host traffic none / ring: 1: 1.00x  2: 2.00x  4: 4.00x  8: 8.00x",
                  "ring loaders (maximal bandwidth fat-tree): 1: GPU0; 2: GPU0; 4: GPU0 GPU2; 8: GPU0 GPU2 GPU4"):
        assert words in done.stdout
    assert_plot(done, png)


def test_a_small_run_with_measured_compute_writes_json(tmp_path):
    out = tmp_path / "ring.json"
    done = run("--topology=single-switch-4gpu", "--devices=2,4", "--placements=ring,none", "--chunks=4",
               "--chunk_mb=12", "--compute_ms=5", f"--json={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "a chunk's host load by GPU0 alone: 1.00 ms; a tile's compute: 5.00 ms (--compute_ms=5)" in done.stdout
    assert set(rows(done.stdout)) == {2, 4}
    saved = json.loads(out.read_text())
    assert saved["topology"] == "single-switch-4gpu" and saved["workload"]["tile_s"] == 0.005
    assert set(saved["runs"]) == {"ring", "none"} and set(saved["runs"]["ring"]) == {"2", "4"}
    assert saved["runs"]["ring"]["4"]["host_bytes"] == 4 * 12e6  # one round of 4 chunks, each loaded once


@pytest.mark.parametrize("flag, message", [
    ("--topology=no-such-box", "no sample topology 'no-such-box'"),
    ("--devices=1,16", "the topology paper-8gpu has only 8 GPUs"),
    ("--chunks=0", "0 is not a positive integer"),
    ("--placements=ring,star", "unknown placements ['star']"),
])
def test_bad_flags_give_one_error_line_and_no_traceback(flag, message):
    done = run(flag)
    assert done.returncode != 0
    assert "FATAL Flags parsing error" in done.stderr and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_store_sets_p_the_chunk_bytes_and_the_tile_compute(tmp_path):
    """--store measures the workload: its P, its largest chunk's bytes, fused_gather's time over that chunk."""
    from ngra_tf import recipes  # noqa: PLC0415
    from ngra_tf.graph import datasets  # noqa: PLC0415
    from ngra_tf.store import write_store  # noqa: PLC0415

    graph = recipes.prepare_graph("gcn", datasets.synthetic("blog", seed=0, scale=0.05).graph)
    store = write_store(tmp_path / "store", graph, 3)
    i, j = divmod(int(store.edge_counts.argmax()), 3)
    out = tmp_path / "ring.json"
    done = run(f"--store={store.path}", "--devices=1,2", f"--json={out}")
    assert done.returncode == 0, done.stderr[-3000:]
    mb = store.chunk_nbytes(i, j) / 1e6
    assert (f"P = 3; the largest chunk C[{i}][{j}], {store.edge_counts[i, j]} edges, {mb:.1f} MB; fused_gather "
            f"(src_mul_edge, 16 features) over it:") in done.stdout, done.stdout
    workload = json.loads(out.read_text())["workload"]
    assert workload["chunk_bytes"] == pytest.approx(mb * 1e6) and workload["tile_s"] > 0
    assert f"layer: P = 3 chunks of {mb:g} MB" in done.stdout


@pytest.mark.parametrize("flags, message", [
    (["--store=/no/such.store"], "--store: no store at /no/such.store"),
    (["--store=/no/such.store", "--compute_ms=3"], "--store measures what --compute_ms would set"),
])
def test_bad_store_flags_give_one_error_line(flags, message):
    done = run(*flags)
    assert done.returncode != 0 and message in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
