"""A ring that spans two TensorFlow workers on this machine trains as one device does.

Two examples/worker.py processes serve on free localhost ports; examples/train.py
connects to them with --cluster and trains GCN on Cora over both workers'
devices, and its history must equal a single-device run's. The workers are
stopped at the end whatever happens.
"""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = [sys.executable, os.path.join(REPO, "examples", "train.py"), "--model=gcn", "--dataset=cora", "--epochs=5",
         "--chunks=4", "--patience=0"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@contextlib.contextmanager
def _workers(addresses):
    procs = [subprocess.Popen([sys.executable, os.path.join(REPO, "examples", "worker.py"),
                               f"--cluster={','.join(addresses)}", f"--task={k}"],
                              env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for k in range(len(addresses))]
    try:
        for proc in procs:  # each prints one line once it serves
            line = proc.stdout.readline()
            while line and "serving at" not in line:
                line = proc.stdout.readline()
            assert "serving at" in line, f"a worker did not start (exit {proc.poll()})"
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)


def _train(tmp_path, name, *flags):
    out = tmp_path / f"{name}.json"
    done = subprocess.run(TRAIN + [f"--history_json={out}", *flags], env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def test_ring_across_two_workers_equals_one_device(tmp_path):
    addresses = [f"localhost:{port}" for port in _free_ports(2)]
    expected, _ = _train(tmp_path, "one")
    with _workers(addresses):
        got, stdout = _train(tmp_path, "cluster", f"--cluster={','.join(addresses)}", "--devices=2")
    assert "/job:worker/replica:0/task:1" in stdout  # the traffic report names both workers' devices
    for name, values in expected["history"].items():
        np.testing.assert_allclose(got["history"][name], values, rtol=1e-5, atol=1e-5, err_msg=name)
    assert got["test"]["accuracy"] == pytest.approx(expected["test"]["accuracy"], abs=1e-6)


def test_bad_cluster_flags(tmp_path):
    for flags, message in ((["--cluster=localhost"], "host:port"),
                           (["--cluster=localhost:1", "--store=/nonexistent"], "--devices"),):
        done = subprocess.run(TRAIN + flags, env=ENV, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
    done = subprocess.run(TRAIN, env=dict(ENV, TF_CONFIG="{not json"), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "TF_CONFIG must be JSON" in done.stderr and "Traceback" not in done.stderr
