"""Every command and code block of README.md, run as a user would type it.

Python blocks run as programs of their own in an empty directory, with the
Python that runs this suite (the project's .venv) and without PYTHONPATH, so
`import ngra_tf` must work as installed. Shell blocks run line by line from
the repository root, where the README says to type them, also without
PYTHONPATH. A comment on the line before a block marks it:

    <!-- readme-test: slow -->         run by `make test-slow` only
    <!-- readme-test: fresh-clone -->  run in a copy of the checkout (its
                                        tracked and untracked, not ignored
                                        files: no build outputs) with a new
                                        venv (install instructions); implies slow

Unmarked blocks run in the default suite. `make test` itself is not run from
inside the suite it starts. Blocks without a language are printed output,
not commands.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARK = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
SELF = "make test"  # this suite: CI runs it, running it here would recurse
TIMEOUT = 1800


class Block:
    def __init__(self, language, code, line, marks):
        self.language, self.code, self.line, self.marks = language, code, line, marks

    @property
    def id(self):
        return f"{self.language}@{self.line}"


def readme_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text, with the marks of the comment just before each."""
    blocks, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\w*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        start = i
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            i += 1
        previous = lines[start - 1] if start > 0 else ""
        mark = MARK.search(previous)
        marks = {m.strip() for m in mark.group(1).split(",")} if mark else set()
        blocks.append(Block(fence.group(1), "\n".join(lines[start + 1:i]), start + 1, marks))
        i += 1
    return blocks


def shell_commands(code: str) -> list[str]:
    """The commands of a shell block: one per line, `\\` continuing a line, comments dropped."""
    commands, current = [], ""
    for line in code.splitlines():
        current += line[:-1] + " " if line.endswith("\\") else line
        if line.endswith("\\"):
            continue
        command = current.strip()
        current = ""
        if command and not command.startswith("#"):
            commands.append(command)
    return commands


def user_env(**extra) -> dict:
    """The environment of a user's shell: no PYTHONPATH, nothing of this test run's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("PYTEST")}
    env.update(TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **extra)
    return env


def run(command, cwd, env, shell=False):
    done = subprocess.run(command, cwd=cwd, env=env, shell=shell, executable="/bin/bash" if shell else None,
                          capture_output=True, text=True, timeout=TIMEOUT)
    where = f"in {cwd}:\n{command}"
    output = f"--- stdout ---\n{done.stdout[-4000:]}\n--- stderr ---\n{done.stderr[-6000:]}"
    return done, where, output


def copy_checkout(to: pathlib.Path):
    """The working tree as a fresh clone of it would be, uncommitted changes included."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():  # a deleted but still indexed file is not copied
            (to / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, to / name)


def expected_status(command: str) -> int:
    # absl's --help/--helpfull print the flags and exit with 1 (its convention).
    return 1 if re.search(r"\s--help(full|short)?\b", command) else 0


BLOCKS = readme_blocks(README.read_text())
RUNNABLE = [b for b in BLOCKS if b.language in ("python", "sh")]


def params():
    for block in RUNNABLE:
        slow = bool(block.marks & {"slow", "fresh-clone"})
        yield pytest.param(block, id=block.id, marks=[pytest.mark.slow] if slow else [])


def test_readme_has_blocks_and_known_marks():
    assert len(RUNNABLE) >= 5
    for block in BLOCKS:
        assert block.marks <= {"slow", "fresh-clone"}, f"unknown mark at README line {block.line}: {block.marks}"
        assert block.language in ("python", "sh", ""), f"README line {block.line}: unknown language"


@pytest.mark.parametrize("block", params())
def test_readme_block(block, tmp_path):
    if block.language == "python":
        program = tmp_path / "readme_block.py"
        program.write_text(block.code + "\n")
        done, where, output = run([sys.executable, str(program)], tmp_path, user_env())
        assert done.returncode == 0, f"README line {block.line} {where}\n{output}"
        return
    cwd, env = ROOT, user_env()
    if "fresh-clone" in block.marks:
        cwd = tmp_path / "clone"
        copy_checkout(cwd)
        venv = tmp_path / "venv"
        # The system's Python, as a new user has it (not this suite's venv).
        subprocess.run([shutil.which("python3") or sys.executable, "-m", "venv", str(venv)], check=True)
        env = user_env(PATH=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}", VIRTUAL_ENV=str(venv))
    for command in shell_commands(block.code):
        if command == SELF or command.startswith(SELF + " "):
            continue
        done, where, output = run(command, cwd, env, shell=True)
        assert done.returncode == expected_status(command), f"README line {block.line} {where}\n{output}"


def test_shell_commands_parse():
    assert shell_commands("a  # c\n# only\nb \\\n  c\n\n") == ["a  # c", "b    c"]
    assert expected_status(".venv/bin/python x.py --helpfull") == 1
    assert expected_status(".venv/bin/python x.py --help_me=1") == 0


def test_readme_blocks_parse_marks():
    text = "x\n<!-- readme-test: slow -->\n```sh\necho hi\n```\n```\nout\n```\n"
    blocks = readme_blocks(text)
    assert [(b.language, b.code, b.marks) for b in blocks] == [("sh", "echo hi", {"slow"}), ("", "out", set())]
