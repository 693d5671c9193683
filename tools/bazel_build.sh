#!/usr/bin/env bash
# Builds the op library (ops/cc/*.cc -> _ngra_ops.so) with Bazel, offline, and
# copies it to build/bazel/_ngra_ops.so, whose path is printed last.
#
#   PYTHON=...           interpreter whose TensorFlow to build against
#                        (default: .venv/bin/python)
#   NGRA_TF_PORTABLE=1   no -march=native (same switch as the pip build)
#   extra arguments      passed to `bazel build`, e.g. --jobs=4
#
# Only the path goes to stdout: NGRA_TF_OPS_LIBRARY=$(bash tools/bazel_build.sh).
set -euo pipefail

cd "$(dirname "$0")/.."

# Bazel 4.2.3 from Debian; the rules packages let the build run without
# network (see WORKSPACE).
if ! command -v bazel >/dev/null || [ ! -d /usr/share/bazel/rules/java ] ||
    [ ! -d /usr/share/bazel/rules/proto ]; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    pkgs=(bazel-bootstrap bazel-rules-java bazel-rules-proto)
    # Only refresh the package lists when the install fails without it.
    $sudo apt-get install -y "${pkgs[@]}" >&2 ||
        { $sudo apt-get update >&2 && $sudo apt-get install -y "${pkgs[@]}" >&2; }
fi

python="${PYTHON:-.venv/bin/python}"
if [ ! -x "$python" ] && ! python="$(command -v "$python")"; then
    echo "bazel_build.sh: no Python at ${PYTHON:-.venv/bin/python}" >&2
    exit 1
fi
python="$(cd "$(dirname "$python")" && pwd)/$(basename "$python")"
# Reading the version from package metadata is instant (no TensorFlow import).
tf_version="$("$python" -c 'import importlib.metadata as m; print(m.version("tensorflow"))')"

args=(
    # Tell third_party/tf_configure.bzl which TensorFlow to use; a new
    # version makes Bazel re-run it.
    "--repo_env=NGRA_TF_PYTHON=$python"
    "--repo_env=NGRA_TF_VERSION=$tf_version"
)
if [ "${NGRA_TF_PORTABLE:-0}" = 1 ]; then
    # Separate output dir (k8-opt-portable), so switching back and forth
    # does not rebuild either variant.
    args+=(--define=portable=1 --platform_suffix=portable)
fi

bazel build "${args[@]}" "$@" //:_ngra_ops.so >&2

# Copy rather than link: Bazel's output tree changes under `bazel clean` and
# its files are read-only. Replace via rename so that a process that has the
# old library mapped keeps a valid file.
src="$(bazel info "${args[@]}" "$@" bazel-bin)/_ngra_ops.so"
dst=build/bazel/_ngra_ops.so
mkdir -p build/bazel
if ! cmp -s "$src" "$dst"; then
    cp -f "$src" "$dst.tmp"
    chmod u+w "$dst.tmp"
    mv -f "$dst.tmp" "$dst"
fi
echo "$PWD/$dst"
