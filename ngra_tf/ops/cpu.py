"""The CPU that code built with -march=native is for, as Linux describes it (/proc/cpuinfo).

The op library records the instruction sets of the CPU it was built on (setup.py) and refuses to load on one
that lacks any of them (ngra_tf/ops/_loader.py): running it there would stop the process on an illegal
instruction. Generated edge code keys its cache by the CPU's identity (ngra_tf/ops/generated.py). Standard
library only: setup.py loads this file by path, before the package can be imported.
"""

from __future__ import annotations

import functools
import platform
import re

_IDENTITY = ("vendor_id", "cpu family", "model", "CPU implementer", "CPU architecture", "CPU variant", "CPU part")
_FLAGS = ("flags", "Features")  # x86's name, Arm's
# The x86 flags that name instructions a compiler may emit for -march=native; the rest ("hypervisor",
# "constant_tsc", ...) describe the machine, and differ between hosts that run the same code.
_X86_INSTRUCTIONS = re.compile(r"(avx|sse|ssse3|fma|f16c|bmi|adx|aes|pclmulqdq|vpclmulqdq|vaes|gfni|sha|movbe|"
                               r"popcnt|abm|lzcnt|cx16|amx)")


@functools.lru_cache(maxsize=None)
def _first_processor() -> dict:
    """The first processor's fields in /proc/cpuinfo ({} where there is none), read once: the file holds an
    entry per core, and only the first is wanted."""
    fields = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break
                name, _, value = line.partition(":")
                fields[name.strip()] = value.strip()
    except OSError:
        return {}
    return fields


def identity() -> str:
    """Vendor, family, model and instruction sets, in one string: two CPUs that -march=native treats alike
    give the same one."""
    fields = _first_processor()
    if not fields:
        return f"{platform.machine()} {platform.processor()}"
    return "\n".join(f"{name}: {fields[name]}" for name in _IDENTITY + _FLAGS if name in fields)


def instruction_sets() -> frozenset:
    """The instruction-set flags of this CPU (x86's that a compiler uses, or Arm's Features); empty where
    Linux does not say."""
    fields = _first_processor()
    if "Features" in fields:
        return frozenset(fields["Features"].split())
    return frozenset(flag for flag in fields.get("flags", "").split() if _X86_INSTRUCTIONS.match(flag))
