"""MkDocs hook: the API reference, generated from each package's ``__all__`` at build time.

One page per public module (``rl.core``, ``rl.envs``, ``rl.envs.transforms``, ...), each
naming the wheel that provides it and that wheel's version (the package's ``__version__``).
Every name of the module's ``__all__`` gets an entry:

- classes and functions defined in ``rl``: a mkdocstrings directive on the object's defining
  path, so its docstring, signature and members are rendered;
- names defined elsewhere (tensordict's modules re-exported by ``rl.modules``): a line that
  says where they come from;
- constants (``HOOK_POINTS``): their value;
- names whose optional library is missing (a simulator back-end without its extra): a note
  naming the extra, so the build succeeds wherever it runs;
- a name already documented on a more specific page (the transforms, re-exported by
  ``rl.envs``): a link to that entry;
- a second name for the same object (``SyncDataCollector`` for ``Collector``): "alias of".

New names and new top-level packages are picked up without touching this file. The module
is also imported by ``tests/test_docs.py`` to check that every public name is documented.
"""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import re
from dataclasses import dataclass, field

log = logging.getLogger("mkdocs.hooks.gen_ref")

# Pages in the order of the navigation; a public top-level ``rl.X`` missing here is added
# after them. Sub-modules name the wheel of their top-level package.
MODULES = [
    "rl.core",
    "rl.core.trainers",
    "rl.core.trainers.algorithms",
    "rl.core.trainers.helpers",
    "rl.core.loggers",
    "rl.core.checkpoint",
    "rl.core.plot",
    "rl.core.workers",
    "rl.core.datafiles",
    "rl.core.files",
    "rl.core.ray_runtime",
    "rl.core.inference_server",
    "rl.cpp",
    "rl.envs",
    "rl.envs.transforms",
    "rl.data",
    "rl.data.datasets",
    "rl.collectors",
    "rl.collectors.distributed",
    "rl.modules",
    "rl.objectives",
    "rl.objectives.value",
    "rl.objectives.value.functional",
]

# Import package -> distribution (wheel). ``rl-objectives`` ships two import packages.
WHEELS = {
    "core": "rl-core",
    "cpp": "rl-cpp",
    "envs": "rl-envs",
    "data": "rl-data",
    "collectors": "rl-collectors",
    "modules": "rl-objectives",
    "objectives": "rl-objectives",
}

# Extras that install the library a lazily imported back-end needs (by module).
EXTRAS = {
    "envpool": "rl-envs[envpool]",
    "dm_control": "rl-envs[dm-control]",
    "pettingzoo": "rl-envs[pettingzoo]",
    "vmas": "rl-envs[vmas]",
    "openspiel": "rl-envs[open_spiel]",
    "mo_gym": "rl-envs[mo_gymnasium]",
    "lbforaging": "rl-envs[lbforaging]",
    "jumanji": "rl-envs[jumanji]",
    "brax": "rl-envs[brax]",
    "_ray": "rl-collectors[ray]",
}

REF_DIR = "reference"


@dataclass
class Entry:
    """One public name of a module and how its reference entry is rendered."""

    name: str
    kind: str  # "object", "module", "external", "constant", "missing", "alias", "link"
    path: str = ""  # defining path (object/module/external) or target (alias/link)
    detail: str = ""


@dataclass
class Page:
    """The reference page of one public module."""

    module: str
    wheel: str
    version: str
    doc: str
    entries: list[Entry] = field(default_factory=list)

    @property
    def src_uri(self) -> str:
        return f"{REF_DIR}/{self.module}.md"


def page_uri(module: str) -> str:
    return f"{REF_DIR}/{module}.md"


def discover_modules() -> list[str]:
    """``MODULES`` plus any public top-level package of the ``rl`` namespace not listed."""
    import rl

    modules = list(MODULES)
    for info in pkgutil.iter_modules(rl.__path__):
        name = f"rl.{info.name}"
        if not info.name.startswith("_") and name not in modules:
            modules.append(name)
    present = []
    for name in modules:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as err:
            # a page listed here whose package does not exist (yet) in this checkout
            if err.name is not None and name.startswith(err.name):
                continue
            raise
        present.append(name)
    return present


def wheel_of(module: str) -> tuple[str, str]:
    """The distribution that provides ``module`` and its version (``rl.X.__version__``)."""
    top = module.split(".")[1]
    package = importlib.import_module(f"rl.{top}")
    return WHEELS.get(top, f"rl-{top}"), getattr(package, "__version__", "unknown")


def public_names(module) -> list[str]:
    names = [n for n in getattr(module, "__all__", []) if not n.startswith("__")]
    return list(dict.fromkeys(names))  # a name listed twice is documented once


def defining_path(obj) -> str | None:
    """``module.qualname`` of a class, function or module; ``None`` for other values."""
    if inspect.ismodule(obj):
        return obj.__name__
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if not isinstance(module, str) or not isinstance(qualname, str) or "<" in qualname:
        return None
    return f"{module}.{qualname}"


def missing_note(module, name: str, err: BaseException) -> str:
    lazy = getattr(module, "_LAZY", {})
    source = lazy.get(name, "")
    extra = next((e for key, e in EXTRAS.items() if source.rsplit(".", 1)[-1] == key), None)
    where = f" (defined in `{source}`)" if source else ""
    hint = f' Install it with `pip install "{extra}"`.' if extra else ""
    return (
        f"Needs an optional library that is not installed where these pages were built"
        f"{where}: `{type(err).__name__}: {err}`.{hint}"
    )


def build_pages() -> list[Page]:
    """Import every public module and classify each name of its ``__all__``."""
    modules = discover_modules()
    # The most specific page exporting an object documents it; broader pages link to it.
    owner: dict[int, tuple[str, str]] = {}
    for module_name in sorted(modules, key=lambda m: -m.count(".")):
        module = importlib.import_module(module_name)
        for name in public_names(module):
            try:
                obj = getattr(module, name)
            except Exception:  # noqa: BLE001 - an optional library is missing
                continue
            if defining_path(obj) is not None:
                owner.setdefault(id(obj), (module_name, name))
    pages = []
    for module_name in modules:
        module = importlib.import_module(module_name)
        wheel, version = wheel_of(module_name)
        doc = inspect.getdoc(module) or ""
        page = Page(module_name, wheel, version, doc.split("\n\n", 1)[0])
        seen: dict[int, str] = {}
        for name in public_names(module):
            try:
                obj = getattr(module, name)
            except Exception as err:  # noqa: BLE001 - an optional library is missing
                page.entries.append(Entry(name, "missing", detail=missing_note(module, name, err)))
                continue
            path = defining_path(obj)
            if path is None:
                page.entries.append(Entry(name, "constant", detail=repr(obj)))
                continue
            if id(obj) in seen:
                page.entries.append(Entry(name, "alias", path=seen[id(obj)]))
                continue
            seen[id(obj)] = name
            home, home_name = owner[id(obj)]
            if home != module_name:
                page.entries.append(Entry(name, "link", path=home, detail=home_name))
            elif inspect.ismodule(obj) and obj.__name__ in modules:
                page.entries.append(Entry(name, "link", path=obj.__name__, detail=""))
            elif not path.startswith("rl."):
                page.entries.append(Entry(name, "external", path=path))
            else:
                page.entries.append(
                    Entry(name, "module" if inspect.ismodule(obj) else "object", path)
                )
        pages.append(page)
    return pages


def _anchor(name: str) -> str:
    return name.lower()


def render(page: Page) -> str:
    """The markdown of one reference page."""
    lines = [
        f"# `{page.module}`",
        "",
        f'!!! info "Provided by the `{page.wheel}` wheel, version {page.version}"',
        f"    `pip install {page.wheel}` and `import {page.module}`. Generated from the "
        "docstrings of every name in the module's `__all__`.",
        "",
    ]
    if page.doc:
        lines += [page.doc, ""]
    documented = [e for e in page.entries if e.kind in ("object", "module")]
    others = [e for e in page.entries if e.kind not in ("object", "module")]
    links = [e for e in others if e.kind == "link"]
    if links:
        lines += ["## Documented on other pages", "", "| name | documented in |", "| --- | --- |"]
        for e in links:
            target = page_uri(e.path).removeprefix(f"{REF_DIR}/")
            anchor = f"#{_anchor(e.detail)}" if e.detail else ""
            label = f"`{e.path}.{e.detail}`" if e.detail else f"`{e.path}`"
            lines.append(f"| `{e.name}` | [{label}]({target}{anchor}) |")
        lines.append("")
    rest = [e for e in others if e.kind != "link"]
    if rest:
        lines += ["## Other names", ""]
        for e in rest:
            if e.kind == "alias":
                lines.append(f"- `{e.name}`: alias of [`{e.path}`](#{_anchor(e.path)}).")
            elif e.kind == "external":
                lines.append(
                    f"- `{e.name}`: re-exported from `{e.path}` (see the "
                    "[tensordict documentation](https://pytorch.org/tensordict/))."
                    if e.path.startswith("tensordict")
                    else f"- `{e.name}`: re-exported from `{e.path}`."
                )
            elif e.kind == "constant":
                value = e.detail if len(e.detail) < 400 else e.detail[:400] + " ..."
                lines.append(f"- `{e.name}` = `{value}`")
            else:
                lines.append(f"- `{e.name}`: {e.detail}")
        lines.append("")
    if documented:
        lines += ["## API", ""]
    for e in sorted(documented, key=lambda e: e.name.lower()):
        # an explicit anchor with the public name, so links from other pages are stable
        lines += [f'<a id="{_anchor(e.name)}"></a>', "", f"::: {e.path}"]
        mixed_in = _mixin_members(e.path)
        if mixed_in:
            lines += ["    options:", f"      inherited_members: [{', '.join(mixed_in)}]"]
        lines.append("")
    return "\n".join(lines)


def _mixin_members(path: str) -> list[str]:
    """The public methods a class of ``rl`` takes from its private mixins (``_Lockable``,
    ``_CompositeValues``, ...): parts of its own API that mkdocstrings would leave out
    (it renders inherited members only when told which)."""
    module, _, name = path.rpartition(".")
    try:
        obj = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return []
    if not inspect.isclass(obj):
        return []
    names: set[str] = set()
    for base in obj.__mro__[1:]:
        if base.__name__.startswith("_") and base.__module__.startswith("rl."):
            names.update(n for n in vars(base) if not n.startswith("_") and n not in vars(obj))
    return sorted(names)


# ----------------------------------------------------------------------------- mkdocs hooks

_PAGES: list[Page] = []


def on_config(config, **kwargs):
    """Build the pages and put them in the navigation under "API reference"."""
    _PAGES[:] = build_pages()
    ref_nav = [{p.module: p.src_uri} for p in _PAGES]
    nav = config.get("nav") or []
    for item in nav:
        if isinstance(item, dict) and "API reference" in item:
            item["API reference"] = [{"Overview": f"{REF_DIR}/index.md"}, *ref_nav]
            break
    else:
        nav.append({"API reference": [{"Overview": f"{REF_DIR}/index.md"}, *ref_nav]})
    config["nav"] = nav
    return config


def _overview() -> str:
    lines = [
        "# API reference",
        "",
        "Generated at build time from the docstrings of every name in each public module's "
        "`__all__`. The import path tells you the wheel you need.",
        "",
        "| module | wheel | version | public names |",
        "| --- | --- | --- | ---: |",
    ]
    for p in _PAGES:
        target = p.src_uri.removeprefix(f"{REF_DIR}/")
        lines.append(f"| [`{p.module}`]({target}) | `{p.wheel}` | {p.version} | {len(p.entries)} |")
    return "\n".join(lines) + "\n"


# Sphinx roles some docstrings use (":class:`~rl.envs.EnvBase`"), as mkdocstrings renders
# them: the role prefix is dropped and a "~" target shows its last component only.
_ROLE = re.compile(
    r":(?:class|meth|func|attr|mod|data|obj|exc|py:\w+):(<code>)(~?)([^<]*)(</code>)"
)


def _strip_role(match: re.Match) -> str:
    target = match[3].rsplit(".", 1)[-1] if match[2] else match[3]
    return f"{match[1]}{target}{match[4]}"


def on_page_content(html, page, **kwargs):
    if page.file.src_uri.startswith(f"{REF_DIR}/"):
        return _ROLE.sub(_strip_role, html)
    return html


def on_files(files, config, **kwargs):
    from mkdocs.structure.files import File

    files.append(File.generated(config, f"{REF_DIR}/index.md", content=_overview()))
    for page in _PAGES:
        files.append(File.generated(config, page.src_uri, content=render(page)))
    return files
