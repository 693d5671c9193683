"""Every command and code block of README.md and docs/**/*.md, run as a user would type it.

Python blocks run as programs of their own in an empty directory, with the
Python that runs this suite (the project's .venv) and without PYTHONPATH, so
`import ngra_tf` must work as installed. Shell blocks run line by line from
the repository root, where the documents say to type them, also without
PYTHONPATH. Test ids name the document and the block's first line
(`README.md@88`, `docs/guide/stores.md@123`). A block identical to an earlier
one (same language, code and marks: the front page's examples repeated in a
guide) runs once, under the first one's id. A comment on the line before a
block marks it:

    <!-- readme-test: slow -->         run by `make test-slow` only
    <!-- readme-test: fresh-clone -->  run in a copy of the checkout (its
                                        tracked and untracked, not ignored
                                        files: no build outputs) with a new
                                        venv (install instructions); implies slow

Unmarked blocks run in the default suite. `make test` itself is not run from
inside the suite it starts. Blocks without a language are printed output,
or commands shown but not run (a benchmark that takes hours, a GPU's, a results
page's reproduction, whose tool the suite runs smaller).

Every relative link of the same documents must point to a file or directory
of the repository that exists, and a `#anchor` to a heading of the Markdown
file it names (GitHub's anchors), so that moving a page leaves no dead link.
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
DOCS = ROOT / "docs"
MARK = re.compile(r"<!--\s*readme-test:\s*(.*?)\s*-->")
SELF = "make test"  # this suite: CI runs it, running it here would recurse
TIMEOUT = 1800


def documents() -> list[pathlib.Path]:
    """README.md, then every Markdown file under docs/, in path order."""
    return [README] + sorted(DOCS.rglob("*.md"))


def name(path: pathlib.Path) -> str:
    return path.relative_to(ROOT).as_posix()


class Block:
    def __init__(self, language, code, line, marks, document="README.md"):
        self.language, self.code, self.line, self.marks = language, code, line, marks
        self.document = document

    @property
    def id(self):
        return f"{self.document}@{self.line}"

    @property
    def where(self):
        return f"{self.document} line {self.line}"


def readme_blocks(text: str, document: str = "README.md") -> list[Block]:
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
        blocks.append(Block(fence.group(1), "\n".join(lines[start + 1:i]), start + 1, marks, document))
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


BLOCKS = [block for path in documents() for block in readme_blocks(path.read_text(), name(path))]
RUNNABLE = [b for b in BLOCKS if b.language in ("python", "sh")]


def unique(blocks):
    """The blocks, each (language, code, marks) once: the first occurrence."""
    seen = set()
    for block in blocks:
        key = (block.language, block.code, frozenset(block.marks))
        if key not in seen:
            seen.add(key)
            yield block


def params():
    for block in unique(RUNNABLE):
        slow = bool(block.marks & {"slow", "fresh-clone"})
        yield pytest.param(block, id=block.id, marks=[pytest.mark.slow] if slow else [])


def test_readme_has_blocks_and_known_marks():
    assert len([b for b in RUNNABLE if b.document == "README.md"]) >= 5
    assert {b.document for b in RUNNABLE} > {"README.md"}, "no runnable block under docs/"
    for block in BLOCKS:
        assert block.marks <= {"slow", "fresh-clone"}, f"unknown mark at {block.where}: {block.marks}"
        assert block.language in ("python", "sh", ""), f"{block.where}: unknown language {block.language!r}"


@pytest.mark.parametrize("block", params())
def test_readme_block(block, tmp_path):
    if block.language == "python":
        program = tmp_path / "readme_block.py"
        program.write_text(block.code + "\n")
        done, where, output = run([sys.executable, str(program)], tmp_path, user_env())
        assert done.returncode == 0, f"{block.where} {where}\n{output}"
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
        assert done.returncode == expected_status(command), f"{block.where} {where}\n{output}"


def test_shell_commands_parse():
    assert shell_commands("a  # c\n# only\nb \\\n  c\n\n") == ["a  # c", "b    c"]
    assert expected_status(".venv/bin/python x.py --helpfull") == 1
    assert expected_status(".venv/bin/python x.py --help_me=1") == 0


def test_readme_blocks_parse_marks():
    text = "x\n<!-- readme-test: slow -->\n```sh\necho hi\n```\n```\nout\n```\n"
    blocks = readme_blocks(text)
    assert [(b.language, b.code, b.marks) for b in blocks] == [("sh", "echo hi", {"slow"}), ("", "out", set())]


def test_identical_blocks_run_once():
    text = "```sh\necho hi\n```\n```sh\necho hi\n```\n<!-- readme-test: slow -->\n```sh\necho hi\n```\n"
    assert [b.id for b in unique(readme_blocks(text, "docs/a.md"))] == ["docs/a.md@1", "docs/a.md@8"]


# ---------------------------------------------------------------- links

LINK = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> str:
    """The text outside fenced blocks and code spans (where a bracket is not a link)."""
    kept, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            kept.append("")
            continue
        kept.append("" if fenced else re.sub(r"`[^`]*`", "", line))
    return "\n".join(kept)


def links(text: str) -> list[tuple[int, str]]:
    """(line, target) of every inline link and image of a Markdown text."""
    return [(number, match.group(1)) for number, line in enumerate(prose(text).splitlines(), 1)
            for match in LINK.finditer(line)]


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives a Markdown text's headings: lower case, punctuation (code spans'
    backticks included) dropped, spaces to hyphens, a repeated one numbered (-1, -2, ...)."""
    found, counts, fenced = set(), {}, False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            continue
        heading = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).lower()).replace(" ", "-")
        number = counts.get(slug, 0)
        counts[slug] = number + 1
        found.add(slug if number == 0 else f"{slug}-{number}")
    return found


def link_problem(document: pathlib.Path, target: str) -> str | None:
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not checked here
        return None
    path, _, anchor = target.partition("#")
    resolved = (document.parent / path).resolve() if path else document
    if ROOT not in resolved.parents and resolved != ROOT:
        return f"{target}: outside the repository"
    if not resolved.exists():
        return f"{target}: no such file or directory"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved.read_text()):
        return f"{target}: no heading with the anchor #{anchor} in {name(resolved)}"
    return None


def test_every_relative_link_points_to_a_file_and_heading_that_exist():
    problems = [f"{name(path)} line {line}: {problem}"
                for path in documents() for line, target in links(path.read_text())
                if (problem := link_problem(path, target))]
    assert not problems, "\n".join(problems)


def test_links_and_anchors_parse():
    text = "# A `b` c: d\n## A `b` c: d\n[x](y.md#z) `[no](link)` ![i](p.png)\n```\n[no](link)\n```\n"
    assert links(text) == [(3, "y.md#z"), (3, "p.png")]
    assert anchors(text) == {"a-b-c-d", "a-b-c-d-1"}
    assert anchors("### Spill or recompute (`spill=`)\n```\n# not a heading\n```\n") == {"spill-or-recompute-spill"}
