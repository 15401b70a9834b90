"""MkDocs hooks of the documentation site (``hooks:`` in mkdocs.yml).

* **Included pages.** Text that lives elsewhere in the repository is rendered where it is, never
  copied into ``docs/``: each ``examples/<name>/README.md`` becomes ``tutorials/<name>.md``,
  ``benchmarks/RESULTS.md`` ``benchmarks.md``, ``RELIABILITY.md`` ``reliability.md`` and each
  ``examples/notebooks/*.ipynb`` ``tutorials/notebooks/<name>.ipynb`` (rendered by
  mkdocs-jupyter, not executed). A tutorial that mkdocs.yml's nav does not list is appended to
  its Tutorials section; any other included page missing from the nav fails the build.
* **The CLI reference** (``reference/cli.md``): the line ``<!-- kestrel-cli -->`` is replaced by
  every sub-command's usage and arguments, read from ``kestrel.cli.build_parser()`` at build
  time, so the page cannot drift from the parser.
* **The lazy public faces.** ``kestrel`` and ``kestrel_ray`` export their names through a
  PEP 562 ``__getattr__`` (``_HOMES``: name → module) that static analysis cannot follow; their
  API pages name each object where it is defined, and a name of ``_HOMES`` missing from its page
  fails the build.
* **Sphinx roles in docstrings** (``:class:`~kestrel_core.Product```) are shown as code, linked
  to the API reference where the target is documented there.

Only kestrel-core (numpy) needs to be installed: the packages' ``src/`` folders are put on
``sys.path`` to build the CLI parser, which imports neither Ray nor PyTorch.
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from pathlib import Path

from mkdocs.exceptions import PluginError
from mkdocs.plugins import event_priority
from mkdocs.structure.files import File

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [
    ROOT / "packages" / name / "src"
    for name in ("kestrel-core", "kestrel-ray", "kestrel-torch", "kestrel")
]
CLI_MARKER = "<!-- kestrel-cli -->"
#: API page → (the package's __init__.py whose _HOMES it must cover)
LAZY_FACES = {
    "reference/api/kestrel.md": ROOT / "packages/kestrel/src/kestrel/__init__.py",
    "reference/api/kestrel_ray.md": ROOT / "packages/kestrel-ray/src/kestrel_ray/__init__.py",
}


def included() -> dict[str, Path]:
    """Site path → the repository file it renders."""
    pages: dict[str, Path] = {}
    for readme in sorted((ROOT / "examples").glob("*/README.md")):
        # a folder of notebooks keeps its README beside them (its links name them)
        notebooks = any(readme.parent.glob("*.ipynb"))
        name = f"{readme.parent.name}/index" if notebooks else readme.parent.name
        pages[f"tutorials/{name}.md"] = readme
    for notebook in sorted((ROOT / "examples" / "notebooks").glob("*.ipynb")):
        pages[f"tutorials/notebooks/{notebook.name}"] = notebook
    pages["benchmarks.md"] = ROOT / "benchmarks" / "RESULTS.md"
    pages["reliability.md"] = ROOT / "RELIABILITY.md"
    return pages


def on_config(config):
    for src in reversed(SOURCES):
        if str(src) not in sys.path:
            sys.path.insert(0, str(src))
    _add_tutorials(config["nav"])
    return config


def _nav_paths(nav) -> set[str]:
    if isinstance(nav, str):
        return {nav}
    if isinstance(nav, dict):
        return set().union(*(_nav_paths(v) for v in nav.values()))
    if isinstance(nav, list):
        return set().union(set(), *(_nav_paths(v) for v in nav))
    return set()


def _add_tutorials(nav: list) -> None:
    """A tutorial page (an example's README, a notebook) that mkdocs.yml's nav does not list is
    appended to the Tutorials section, titled by its first heading: a new example or notebook
    is on the site without an edit here."""
    listed = _nav_paths(nav)
    section = next(
        entry["Tutorials"] for entry in nav if isinstance(entry, dict) and "Tutorials" in entry
    )
    for uri in included():
        if uri.startswith("tutorials/") and uri not in listed:
            section.append(uri)


@event_priority(-100)  # after mkdocs-jupyter's on_files: the notebooks are wrapped here
def on_files(files, config):
    for uri, path in included().items():
        if files.get_file_from_path(uri) is not None:
            raise PluginError(f"docs/{uri} exists: it is rendered from {path.relative_to(ROOT)}")
        file = File.generated(config, uri, abs_src_path=str(path))
        if uri.endswith(".ipynb"):
            from mkdocs_jupyter.plugin import NotebookFile

            file = NotebookFile(file, **config)
            # the wrapper recomputes abs_src_path from src_dir, which a generated file lacks
            file.__dict__["abs_src_path"] = str(path)
        files.append(file)
    return files


def on_nav(nav, config, files):
    listed = {page.file.src_uri for page in nav.pages}
    missing = sorted(set(included()) - listed)
    if missing:
        raise PluginError(f"mkdocs.yml: nav lacks the included pages {missing}")
    return nav


def on_page_markdown(markdown, page, config, files):
    uri = page.file.src_uri
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    if uri in LAZY_FACES:
        homes = _lazy_homes(LAZY_FACES[uri])
        absent = [
            f"::: {home}.{name}"
            for name, home in homes.items()
            if f"::: {home}.{name}" not in markdown
        ]
        if absent:
            raise PluginError(
                f"docs/{uri} lacks public names of {LAZY_FACES[uri].parent.name}: {absent}"
            )
    return markdown


def _lazy_homes(init: Path) -> dict[str, str]:
    """The ``_HOMES`` mapping of a package ``__init__``; names re-exported from another package
    (``RunError``: ``kestrel_ray``) are left to that package's page."""
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            getattr(t, "id", "") == "_HOMES" for t in node.targets
        ):
            homes = ast.literal_eval(node.value)
            package = init.parent.name
            return {k: v for k, v in homes.items() if v.startswith(package + ".")}
    raise PluginError(f"{init}: no _HOMES mapping")


# ---- Sphinx roles ----------------------------------------------------------------------------

_ROLE = re.compile(
    r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj|const):<code>(~?)([^<]+)</code>"
)


def _role(match: re.Match) -> str:
    tilde, target = match.groups()
    target = target.strip().rstrip("()")
    shown = target.rsplit(".", 1)[-1] if tilde else target
    if "." in target and target.split(".")[0] in (
        "kestrel",
        "kestrel_core",
        "kestrel_ray",
        "kestrel_torch",
    ):
        return f'<autoref optional identifier="{target}"><code>{shown}</code></autoref>'
    return f"<code>{shown}</code>"


def on_page_content(html, page, config, files):
    return _ROLE.sub(_role, html)


# ---- the CLI reference -----------------------------------------------------------------------


def cli_reference() -> str:
    os.environ["COLUMNS"] = "100"  # argparse wraps usage lines to the terminal's width
    from kestrel.cli import build_parser

    parser, unavailable = build_parser()
    if unavailable:
        raise PluginError(f"kestrel.cli: commands that did not load: {unavailable}")
    parts = [_usage_block(parser, level=2, name="kestrel")]
    parts += [_command(sub, level=2) for _, sub in _subcommands(parser)]
    return "\n\n".join(parts)


def _subcommands(parser: argparse.ArgumentParser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield from action.choices.items()


def _command(parser: argparse.ArgumentParser, level: int) -> str:
    parts = [_usage_block(parser, level, parser.prog)]
    parts += [_command(sub, level + 1) for _, sub in _subcommands(parser)]
    return "\n\n".join(parts)


def _usage_block(parser: argparse.ArgumentParser, level: int, name: str) -> str:
    lines = [f"{'#' * level} `{name}`", ""]
    if parser.description:
        lines += [_escape(parser.description), ""]
    usage = parser.format_usage().strip()
    lines += ["```text", usage, "```", ""]
    rows = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        rows.append(_row(parser, action))
    if rows:
        lines += ["| argument | default | meaning |", "|---|---|---|", *rows]
    return "\n".join(lines)


def _row(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    if isinstance(action, argparse._SubParsersAction):
        name = action.metavar or action.dest  # the help names each choice
        help_text = "; ".join(f"`{c.dest}`: {c.help}" for c in action._choices_actions)
    else:
        name = parser._get_formatter()._format_action_invocation(action)
        help_text = action.help or ""
    if "%(" in help_text:
        params = {**vars(action), "prog": parser.prog}
        params["choices"] = ", ".join(map(str, action.choices or ()))
        help_text = help_text % params
    default = action.default
    shown = ""
    if default not in (None, False, argparse.SUPPRESS, []) and action.nargs != 0:
        shown = f"`{default}`"
        help_text = help_text.replace(f"(default: {default})", "").strip()
    return f"| `{name}` | {shown} | {_escape(help_text)} |"


def _escape(text: str) -> str:
    """Plain argparse text in a Markdown table cell or paragraph."""
    text = " ".join(text.split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace("*", "\\*")
