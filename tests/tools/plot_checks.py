"""What a benchmark tool's --plot/--out leaves: a PNG where matplotlib is installed, else one line that says so.
`make test`'s environment has no matplotlib (requirements.txt says why); `make test-slow` installs it."""

import importlib.util


def assert_plot(done, path):
    if importlib.util.find_spec("matplotlib") is None:
        assert f"matplotlib is not installed (pip install matplotlib): {path} not written" in done.stdout
        assert not path.exists()
    else:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
