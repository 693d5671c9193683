"""A ring that spans two TensorFlow workers on this machine trains as one device does; workers listen only
where they are told; a lost worker ends training with one line, and the run resumes from its backup.

Two examples/worker.py processes serve on free localhost ports; examples/train.py
connects to them with --cluster and trains GCN on Cora over both workers'
devices, and its history must equal a single-device run's. The workers are
stopped at the end whatever happens.
"""

import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from ngra_tf import parallel

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = [sys.executable, os.path.join(REPO, "examples", "train.py"), "--model=gcn", "--dataset=cora", "--epochs=5",
         "--chunks=4", "--patience=0"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
_store_run = TRAIN[:3] + ["--epochs=5", "--patience=0"]  # (the store gives the data and P)


def _free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("localhost", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def _start_worker(addresses, task, *flags):
    proc = subprocess.Popen([sys.executable, os.path.join(REPO, "examples", "worker.py"),
                             f"--cluster={','.join(addresses)}", f"--task={task}", *flags],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()  # it prints one line once it serves
    while line and "serving at" not in line:
        line = proc.stdout.readline()
    assert "serving at" in line, f"worker {task} did not start (exit {proc.poll()})"
    return proc


@contextlib.contextmanager
def _workers(addresses, *flags):
    procs = []
    try:
        for task in range(len(addresses)):
            procs.append(_start_worker(addresses, task, *flags))
        yield procs
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(timeout=30)


def _listening(pid):
    """(address, port) of every TCP socket process `pid` listens on, read from /proc (no traffic)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    found = []
    for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        with open(table) as stream:
            for line in stream.readlines()[1:]:
                fields = line.split()
                if fields[3] != "0A" or fields[9] not in inodes:  # 0A: LISTEN
                    continue
                hexaddr, hexport = fields[1].split(":")
                raw = bytes.fromhex(hexaddr)  # host-order 32-bit words
                raw = b"".join(raw[k:k + 4][::-1] for k in range(0, len(raw), 4))
                found.append((socket.inet_ntop(family, raw), int(hexport, 16)))
    return found


def _outward_address():
    """This machine's address toward other hosts (no packet is sent), or None if it has only loopback."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.255", 9))
            address = probe.getsockname()[0]
        except OSError:
            return None
    return None if address.startswith("127.") else address


def _loopback(address):
    return address in ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def _reachable(address, port):
    try:
        socket.create_connection((address, port), timeout=2).close()
        return True
    except OSError:
        return False


def test_a_worker_listens_only_on_its_own_address():
    """TensorFlow listens on every interface; a worker of a loopback cluster must not, while one told to listen
    everywhere does (so that the check can fail)."""
    (port,) = _free_ports(1)
    outward = _outward_address()
    for flags, everywhere in (((), False), (("--listen=*",), True)):
        with _workers([f"localhost:{port}"], *flags) as (proc,):
            listening = _listening(proc.pid)
            assert port in {p for _, p in listening}, listening
            assert all(_loopback(a) for a, p in listening if p == port) != everywhere, listening
            assert _reachable("127.0.0.1", port)
            if outward is not None:
                assert _reachable(outward, port) == everywhere, (outward, listening)


@pytest.mark.parametrize("cluster, task, listen, message", [
    (["198.51.100.7:2222"], 0, None, "task 0 (198.51.100.7:2222): 198.51.100.7 is not an address of this machine"),
    (["localhost:2222"], 0, "198.51.100.7", "listen='198.51.100.7': 198.51.100.7 is not an address"),
    (["localhost:2222"], 0, "no-such-host.invalid", "cannot resolve 'no-such-host.invalid'"),
    (["localhost:2222"], 1, None, "task must lie in [0, 1)"),
])
def test_a_worker_refuses_an_address_that_is_not_this_machines(cluster, task, listen, message):
    # Checked before anything starts (no restart, no server): in-process.
    with pytest.raises(ValueError) as raised:
        parallel.serve(cluster, task, listen=listen)
    assert message in str(raised.value)


def test_waiting_for_a_worker_that_never_comes_ends_with_its_name():
    (port,) = _free_ports(1)
    start = time.monotonic()
    with pytest.raises(ValueError, match=rf"worker task 0 at localhost:{port} did not answer within 0.5 s .*--task=0"):
        parallel.cluster.wait_for_workers(parallel.cluster_spec([f"localhost:{port}"]), 0.5)
    assert time.monotonic() - start < 10


def test_worker_and_train_py_faults_on_the_command_line():
    """The same refusals as one line each from the scripts, without a traceback."""
    (port,) = _free_ports(1)
    worker = [sys.executable, os.path.join(REPO, "examples", "worker.py")]
    for command, message in ((worker + ["--cluster=198.51.100.7:2222", "--task=0"], "not an address of this machine"),
                             (TRAIN + [f"--cluster=localhost:{port}", "--devices=1", "--worker_wait=2"],
                              f"worker task 0 at localhost:{port} did not answer within 2 s")):
        done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr


def _train(tmp_path, name, *flags, train=TRAIN):
    out = tmp_path / f"{name}.json"
    done = subprocess.run(train + [f"--history_json={out}", *flags], env=ENV, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text()), done.stdout


def test_ring_across_two_workers_equals_one_device(tmp_path):
    addresses = [f"localhost:{port}" for port in _free_ports(2)]
    expected, _ = _train(tmp_path, "one")
    with _workers(addresses):
        got, stdout = _train(tmp_path, "cluster", f"--cluster={','.join(addresses)}", "--devices=2")
    # The traffic report names both workers' devices, with what each worker's own copy ops counted.
    loaded = dict(re.findall(r"(/job:worker/replica:0/task:\d)/device:CPU:0: from the host ([0-9.]+) MiB", stdout))
    assert sorted(loaded) == ["/job:worker/replica:0/task:0", "/job:worker/replica:0/task:1"], stdout
    assert all(float(mib) > 0 for mib in loaded.values()), stdout
    for name, values in expected["history"].items():
        np.testing.assert_allclose(got["history"][name], values, rtol=1e-5, atol=1e-5, err_msg=name)
    assert got["test"]["accuracy"] == pytest.approx(expected["test"]["accuracy"], abs=1e-6)


@pytest.mark.slow
def test_a_store_with_csr_features_trains_across_two_workers_as_on_one_device(tmp_path):
    """The same store read over the distributed engine: its CSR feature tiles move to the workers' devices as
    tf.SparseTensor parts (indices and values, copied)."""
    done = subprocess.run([sys.executable, os.path.join(REPO, "tools", "partition_graph.py"), "--preset=cora",
                           "--chunks=4", f"--output={tmp_path / 'cora'}", "--noprogress"], env=ENV,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    store = [f"--store={tmp_path / 'cora'}", "--memory_budget=1GB"]
    addresses = [f"localhost:{port}" for port in _free_ports(2)]
    expected, _ = _train(tmp_path, "one", *store, train=_store_run)
    with _workers(addresses):
        got, stdout = _train(tmp_path, "cluster", *store, f"--cluster={','.join(addresses)}", "--devices=2",
                             train=_store_run)
    assert "/job:worker/replica:0/task:1" in stdout
    for name, values in expected["history"].items():
        np.testing.assert_allclose(got["history"][name], values, rtol=1e-5, atol=1e-5, err_msg=name)


def test_bad_cluster_flags(tmp_path):
    for flags, message in ((["--cluster=localhost"], "host:port"),
                           (["--cluster=localhost:1", "--store=/nonexistent"], "--devices"),):
        done = subprocess.run(TRAIN + flags, env=ENV, capture_output=True, text=True, timeout=120)
        assert done.returncode != 0 and message in done.stderr, done.stderr[-2000:]
        assert "Traceback" not in done.stderr
    done = subprocess.run(TRAIN, env=dict(ENV, TF_CONFIG="{not json"), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "TF_CONFIG must be JSON" in done.stderr and "Traceback" not in done.stderr


def test_a_lost_worker_ends_training_with_one_line_and_the_run_resumes(tmp_path):
    """Kill worker 1 once an epoch is backed up: one line names it and the epoch; the same command, run again
    (before the worker is back: it is waited for), resumes and ends with the losses of an uninterrupted run."""
    addresses = [f"localhost:{port}" for port in _free_ports(2)]
    expected, _ = _train(tmp_path, "one", "--epochs=12")
    backup, record = tmp_path / "backup", tmp_path / "cluster.json"
    command = TRAIN + ["--epochs=12", f"--cluster={','.join(addresses)}", "--devices=2", f"--backup_dir={backup}",
                       f"--history_json={record}"]
    with _workers(addresses) as procs:
        trainer = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 300
        while not (backup / "latest").is_dir() and trainer.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        procs[1].kill()
        procs[1].wait(timeout=30)
        _, stderr = trainer.communicate(timeout=300)
        assert trainer.returncode not in (0, None) and "Traceback" not in stderr, stderr[-3000:]
        (line,) = [line for line in stderr.splitlines() if line.startswith("train.py:")]
        assert f"lost worker task 1 ({addresses[1]}) during epoch" in line and "--task=1" in line, line
        assert "training resumes from the last finished epoch" in line, line
        resumed = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(5)  # the trainer is up and waiting for worker 1
        procs[1] = _start_worker(addresses, 1)
        stdout, stderr = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, stderr[-3000:]
    got = json.loads(record.read_text())
    first = got["epoch"][0]
    assert first > 0 and f"resumed from the backup in {backup} after epoch {first}" in stdout
    for name, values in expected["history"].items():
        np.testing.assert_allclose(got["history"][name], values[first:], rtol=1e-5, atol=1e-5, err_msg=name)
    assert not backup.exists()


def test_the_processes_whose_counters_a_traffic_report_reads():
    """This process, then one CPU of each worker the devices run in (in their order), none twice."""
    devices = ["/job:worker/replica:0/task:1/device:GPU:0", "/job:worker/replica:0/task:0/device:GPU:0",
               "/job:worker/replica:0/task:0/device:GPU:1"]
    assert parallel.processes(devices) == ["/cpu:0", "/job:worker/replica:0/task:1/device:CPU:0",
                                           "/job:worker/replica:0/task:0/device:CPU:0"]
    assert parallel.processes(["/device:CPU:0", "/device:CPU:1"]) == ["/cpu:0"]
