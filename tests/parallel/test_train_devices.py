"""examples/train.py --devices / --placement / --topology, as a user types them."""

import json
import os
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = [sys.executable, os.path.join(REPO, "examples", "train.py"), "--model=gcn", "--dataset=cora", "--epochs=3",
         "--patience=0"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _run(*flags):
    return subprocess.run(TRAIN + list(flags), env=ENV, capture_output=True, text=True, timeout=300)


def test_devices_train_like_one_device_and_report_traffic(tmp_path):
    runs = {}
    for name, flags in (("one", ["--chunks=4"]),
                        ("ring", ["--chunks=4", "--devices=4", "--placement=ring", "--topology=paper-8gpu"])):
        done = _run(*flags, f"--history_json={tmp_path / name}.json")
        assert done.returncode == 0, done.stderr[-3000:]
        runs[name] = json.loads((tmp_path / f"{name}.json").read_text()), done.stdout
    (one, _), (ring, stdout) = runs["one"], runs["ring"]
    assert ring["devices"] == 4 and ring["placement"] == "ring"
    assert ring["history"]["loss"] == pytest.approx(one["history"]["loss"], rel=1e-5, abs=1e-5)
    assert "host traffic ratio none/ring 4.00x" in stdout  # paper-8gpu's first four: one ring, loaders GPU0, GPU2
    for k in range(4):
        assert f"/device:CPU:{k}: from the host" in stdout


@pytest.mark.parametrize("flags,message", [
    (["--placement=chain"], "--placement applies to training over several devices"),
    (["--topology=paper-8gpu"], "--topology applies to training over several devices"),
    (["--devices=4", "--chunks=2"], "--devices=4 needs --chunks >= 4"),
    (["--devices=2", "--chunks=2", "--topology=nope"], "no sample topology 'nope'"),
    (["--devices=2", "--chunks=2", "--placement=star"], "--placement"),
    (["--devices=0"], "--devices"),
])
def test_bad_device_flags(flags, message):
    done = _run(*flags)
    assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
    assert "Traceback" not in done.stderr


def test_a_malformed_topology_file_names_its_line(tmp_path):
    path = tmp_path / "topo.txt"
    path.write_text("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPIX\n")
    done = _run("--devices=2", "--chunks=2", f"--topology={path}")
    assert done.returncode != 0 and "line 3" in done.stderr and "Traceback" not in done.stderr, done.stderr[-2000:]
