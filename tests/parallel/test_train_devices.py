"""examples/train.py --devices / --placement / --topology, as a user types them: training over four devices in a
subprocess (split before TensorFlow starts), the flag checks in-process (tests/layers/test_training.py checks what
a usage error looks like on the command line)."""

import json
import os
import subprocess
import sys

import pytest
from absl import flags as absl_flags

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "tests", "layers"))
from test_training import example, usage_error  # noqa: E402,F401  (train.py in-process; `example` is a fixture)
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
])
def test_bad_device_flags(example, flags, message):
    assert message in usage_error(example, *flags)


@pytest.mark.parametrize("flag", ["--devices=0", "--placement=star"])
def test_device_flags_out_of_range(example, flag):
    with pytest.raises(absl_flags.IllegalFlagValueError, match=flag.split("=")[0]):
        example.FLAGS(["train.py", flag])


def test_a_malformed_topology_file_names_its_line(example, tmp_path):
    path = tmp_path / "topo.txt"
    path.write_text("\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tPIX\t0-7\nGPU1\tPIX\n")
    assert "line 3" in usage_error(example, "--devices=2", "--chunks=2", f"--topology={path}")


def test_a_topology_is_read_once_the_flags_pass(example):
    example.FLAGS(["train.py", "--devices=4", "--chunks=4", "--topology=paper-8gpu"])
    assert example.validate_flags() is not None
