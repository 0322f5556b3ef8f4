"""The documentation site: its pages' code runs and the site builds in strict mode.

Each tutorial and migration page's python blocks run in order in one namespace (see
``tests/_docs_blocks.py``), so a page cannot drift from the code; the reference is
generated from every public module's ``__all__`` (``docs/gen_ref.py``) and the whole site
builds with ``mkdocs build --strict`` (broken links and missing pages are errors).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import tempfile
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _docs_blocks import DOCS, ROOT, SKIP_MARK, blocks, pages, run_page  # noqa: E402


def _load_gen_ref():
    spec = importlib.util.spec_from_file_location("_rl_docs_gen_ref", DOCS / "gen_ref.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gen_ref = _load_gen_ref()

PAGES = pages()


class TestPages:
    def test_every_tutorial_and_migration_page_exists(self):
        names = {p.relative_to(DOCS).as_posix() for p in PAGES}
        expected = {
            "tutorials/getting-started.md",
            "tutorials/transforms-and-specs.md",
            "tutorials/custom-env.md",
            "tutorials/ppo.md",
            "tutorials/sac.md",
            "tutorials/multiprocess-collection.md",
            "tutorials/checkpoints.md",
            "tutorials/loggers.md",
            "tutorials/probes.md",
            "migration/torchrl.md",
            "migration/sb3.md",
            "migration/cleanrl.md",
        }
        assert expected <= names
        for page in PAGES:
            assert sum(not b.skip for b in blocks(page)) >= 2, f"{page} runs fewer than 2 blocks"

    def test_only_the_other_library_side_is_skipped(self):
        for page in PAGES:
            skipped = [b for b in blocks(page) if b.skip]
            if page.parent.name != "migration":
                assert not skipped, f"{page}:{skipped[0].line} skips a block outside migration"
            for b in skipped:
                # a skipped block is the Stable-Baselines3 / CleanRL side: it never uses rl
                assert "import rl" not in b.code and "from rl" not in b.code, (
                    f"{page}:{b.line} is marked {SKIP_MARK!r} but uses rl"
                )

    @pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(DOCS).as_posix() for p in PAGES])
    def test_code_blocks_run(self, page, tmp_path, monkeypatch):
        # files the pages write (relative paths, tempfile.mkdtemp()) land in tmp_path
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
        assert run_page(page) == sum(not b.skip for b in blocks(page))


class TestBlockExtraction:
    def test_fences_indentation_and_skip_mark(self, tmp_path):
        page = tmp_path / "p.md"
        page.write_text(
            "text\n\n```python\nx = 1\n```\n\n"
            '=== "tab"\n\n    ```python\n    y = x + 1\n    ```\n\n'
            f"{SKIP_MARK}\n```python\nimport stable_baselines3\n```\n\n"
            "```bash\nls\n```\n"
        )
        found = blocks(page)
        assert [(b.code, b.skip, b.line) for b in found] == [
            ("x = 1\n", False, 3),
            ("y = x + 1\n", False, 9),
            ("import stable_baselines3\n", True, 14),
        ]
        assert run_page(page) == 2

    def test_a_failing_block_names_its_page_and_line(self, tmp_path):
        page = tmp_path / "bad.md"
        page.write_text("```python\nx = 1\n```\n\n```python\nraise ValueError('boom')\n```\n")
        with pytest.raises(ValueError, match="boom") as info:
            run_page(page)
        assert str(info.traceback[-1].path).endswith("bad.md:5")


class TestReference:
    def test_every_public_name_is_documented(self):
        documented = {}
        for page in gen_ref.build_pages():
            assert (
                page.version
                == importlib.import_module(".".join(page.module.split(".")[:2])).__version__
            )
            for entry in page.entries:
                documented[(page.module, entry.name)] = entry
        for module_name in gen_ref.discover_modules():
            module = importlib.import_module(module_name)
            for name in gen_ref.public_names(module):
                assert (module_name, name) in documented, f"{module_name}.{name} not documented"
        # pages for every package the task names (those that exist in this checkout)
        modules = {m for m, _ in documented}
        for required in (
            "rl.core",
            "rl.envs",
            "rl.envs.transforms",
            "rl.data",
            "rl.collectors",
            "rl.modules",
            "rl.objectives",
            "rl.objectives.value",
            "rl.cpp",
        ):
            assert required in modules

    def test_entry_kinds(self):
        pages = {p.module: p for p in gen_ref.build_pages()}
        kinds = {(m, e.name): e for m, p in pages.items() for e in p.entries}
        assert kinds["rl.core", "Bounded"].kind == "object"
        assert kinds["rl.core", "Bounded"].path.startswith("rl.core._specs")
        assert kinds["rl.envs", "StepCounter"].kind == "link"  # documented in rl.envs.transforms
        assert kinds["rl.envs.transforms", "StepCounter"].kind == "object"
        assert kinds["rl.modules", "TensorDictModule"].kind == "external"
        assert kinds["rl.collectors", "SyncDataCollector"].kind == "alias"
        assert kinds["rl.core.trainers", "HOOK_POINTS"].kind == "constant"
        text = gen_ref.render(pages["rl.collectors"])
        assert "Provided by the `rl-collectors` wheel, version" in text
        assert "::: rl.collectors." in text

    def test_sphinx_roles_in_docstrings_render_as_code(self):
        html = "an :class:<code>~rl.envs.EnvBase</code>, :meth:<code>shutdown</code>"
        assert gen_ref._ROLE.sub(gen_ref._strip_role, html) == (
            "an <code>EnvBase</code>, <code>shutdown</code>"
        )

    def test_a_name_whose_library_is_missing_renders_a_note(self, monkeypatch):
        fake = types.ModuleType("rl.fakepkg")
        fake.__all__ = ["Present", "NeedsLib"]
        fake._LAZY = {"NeedsLib": "rl.fakepkg.libs.envpool"}

        class Present:
            """A class."""

        Present.__module__ = "rl.fakepkg._present"
        Present.__qualname__ = "Present"
        fake.Present = Present

        def __getattr__(name):
            if name == "NeedsLib":
                raise ModuleNotFoundError("No module named 'envpool'", name="envpool")
            raise AttributeError(name)

        fake.__getattr__ = __getattr__
        fake.__version__ = "9.9.9"
        monkeypatch.setitem(sys.modules, "rl.fakepkg", fake)
        monkeypatch.setattr(gen_ref, "discover_modules", lambda: ["rl.fakepkg"])
        (page,) = gen_ref.build_pages()
        assert (page.wheel, page.version) == ("rl-fakepkg", "9.9.9")
        entries = {e.name: e for e in page.entries}
        assert entries["Present"].kind == "object"
        assert entries["NeedsLib"].kind == "missing"
        text = gen_ref.render(page)
        assert 'pip install "rl-envs[envpool]"' in text
        assert "::: rl.fakepkg._present.Present" in text
        assert "NeedsLib" in text and "::: rl.fakepkg.libs" not in text


def test_site_builds_strict(tmp_path):
    """``mkdocs build --strict``: broken links, missing pages and failed references fail."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    config = load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(tmp_path / "site"))
    build(config)
    site = tmp_path / "site"
    assert (site / "index.html").is_file()
    for page in PAGES:
        html = site / page.relative_to(DOCS).with_suffix("") / "index.html"
        assert html.is_file(), html
    reference = site / "reference"
    for page in gen_ref.build_pages():
        text = (reference / page.module / "index.html").read_text()
        assert f"Provided by the <code>{page.wheel}</code> wheel, version {page.version}" in text
    # a rendered docstring, not only the directive
    assert "doc doc-heading" in (reference / "rl.envs.transforms" / "index.html").read_text()
    assert ":class:<code>" not in (reference / "rl.collectors" / "index.html").read_text()
