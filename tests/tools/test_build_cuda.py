"""tools/build_cuda.py's architecture flags: SASS per architecture with PTX for the newest, or PTX alone; a bad
architecture is one line."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import build_cuda  # noqa: E402  (tools/ is not a package)


def test_each_architecture_gets_sass_and_the_newest_ptx():
    assert build_cuda.gencode_flags(["sm_90", "80"]) == ["-gencode=arch=compute_80,code=sm_80",
                                                         "-gencode=arch=compute_90,code=sm_90",
                                                         "-gencode=arch=compute_90,code=compute_90"]


def test_compute_architectures_get_ptx_alone():
    assert build_cuda.gencode_flags(["compute_90"]) == ["-gencode=arch=compute_90,code=compute_90"]
    assert build_cuda.gencode_flags(["80", "compute_90"]) == ["-gencode=arch=compute_80,code=sm_80",
                                                              "-gencode=arch=compute_80,code=compute_80",
                                                              "-gencode=arch=compute_90,code=compute_90"]


@pytest.mark.parametrize("archs", [[], ["ninety"], ["compute_"], ["sm_9x"]])
def test_bad_architectures_are_named(archs):
    with pytest.raises(ValueError, match=r"numbers like 80 or sm_90, or compute_90 for PTX alone; got"):
        build_cuda.gencode_flags(archs)


def test_the_environment_overrides_the_check_architectures(monkeypatch):
    monkeypatch.setenv("NGRA_TF_CUDA_ARCHS", "compute_80;sm_90")
    assert build_cuda.check_archs() == ["compute_80", "90"]
    monkeypatch.delenv("NGRA_TF_CUDA_ARCHS")
    monkeypatch.setattr(build_cuda, "gpu_visible", lambda: False)
    assert build_cuda.check_archs() == ["compute_90"]
    monkeypatch.setattr(build_cuda, "gpu_visible", lambda: True)
    assert build_cuda.check_archs() == ["90"]


@pytest.mark.parametrize("args, env, named", [(["--arch", "nine"], {}, "--arch"),
                                               (["--harness"], {"NGRA_TF_CUDA_ARCHS": "compute_x"},
                                                "NGRA_TF_CUDA_ARCHS")])
def test_the_tool_refuses_a_bad_architecture_in_one_line(args, env, named):
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "build_cuda.py"), *args], capture_output=True,
                          text=True, timeout=60, env=dict(os.environ, **env))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert f"error: {named}: CUDA architectures must be numbers like 80" in done.stderr.splitlines()[-1]


def test_setup_refuses_a_bad_architecture_in_one_line(tmp_path):
    """The pip/setup.py build checks NGRA_TF_CUDA_ARCHS before it compiles anything, and says so in one line."""
    done = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(tmp_path / "lib"),
                           "--build-temp", str(tmp_path / "temp")], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, NGRA_TF_CUDA="1", NGRA_TF_CUDA_ARCHS="sm_9x"))
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("NGRA_TF_CUDA_ARCHS: CUDA architectures must be numbers")
    assert not (tmp_path / "lib" / "ngra_tf" / "ops" / "_ngra_ops.so").exists()
