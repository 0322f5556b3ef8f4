"""Extract and run the fenced python blocks of the documentation pages.

A page's blocks run in order in one namespace, as a reader would paste them. A block
preceded by the comment ``<!-- docs-test: skip -->`` is not run: the migration pages use it
for the Stable-Baselines3 / CleanRL side of a comparison (those libraries are not
dependencies); everything written with ``rl`` runs.

    uv run python tests/_docs_blocks.py docs/tutorials/ppo.md   # run one page by hand
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SKIP_MARK = "<!-- docs-test: skip -->"
# Pages whose code blocks must run (the API reference is generated and has none).
RUN_DIRS = ("tutorials", "migration")

_FENCE = re.compile(
    r"^(?P<indent>[ \t]*)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$",
    re.MULTILINE | re.DOTALL,
)


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    code: str
    skip: bool


def blocks(page: Path) -> list[Block]:
    """Every fenced ``python`` block of a page, with its line and whether it is skipped."""
    text = page.read_text()
    found = []
    for match in _FENCE.finditer(text):
        language = match["info"].strip().split(" ", 1)[0].strip("{}.")
        if language not in ("python", "py"):
            continue
        before = text[: match.start()].rstrip().splitlines()
        skip = bool(before) and before[-1].strip() == SKIP_MARK
        line = text.count("\n", 0, match.start()) + 1
        found.append(Block(page, line, textwrap.dedent(match["body"]), skip))
    return found


def pages() -> list[Path]:
    return sorted(p for d in RUN_DIRS for p in (DOCS / d).glob("*.md"))


def run_page(page: Path) -> int:
    """Run the page's blocks in order in one namespace; returns how many ran."""
    namespace: dict = {"__name__": "__main__"}
    ran = 0
    for block in blocks(page):
        if block.skip:
            continue
        where = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
        name = f"{where}:{block.line}"
        exec(compile(block.code, name, "exec"), namespace)  # noqa: S102 - the docs' own code
        ran += 1
    return ran


if __name__ == "__main__":
    import os
    import tempfile
    import time

    targets = [Path(a).resolve() for a in sys.argv[1:]] or pages()
    os.chdir(tempfile.mkdtemp())  # files the pages write do not land in the checkout
    for target in targets:
        start, cpu = time.perf_counter(), time.process_time()
        count = run_page(target)
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu
        print(f"{target.relative_to(ROOT)}: {count} blocks, {wall:.1f} s ({cpu:.1f} s CPU)")
