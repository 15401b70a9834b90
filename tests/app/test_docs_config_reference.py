"""The config reference of the documentation site (docs/reference/config.md) against the code:
every key of the schema has a row and every row names a key, with the schema's, the node
fields' and the estimators' defaults. A key added to the code without its row fails here."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from kestrel_core import Node
from kestrel_core.config import _schema as schema

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "reference" / "config.md"
ESTIMATORS = ROOT / "packages" / "kestrel-torch" / "src" / "kestrel_torch" / "estimators"
_ROW = re.compile(r"^\| `([^`]+)` \| ([^|]*) \|")


def _tables() -> dict[str, dict[str, str]]:
    """Section heading → key → the default cell, for every table of the page."""
    tables: dict[str, dict[str, str]] = {}
    heading = ""
    for line in PAGE.read_text().splitlines():
        if line.startswith("#"):
            heading = line.lstrip("#").strip().strip("`")
        elif (row := _ROW.match(line)) and row.group(1) != "key":
            tables.setdefault(heading, {})[row.group(1)] = row.group(2).strip()
    return tables


def _value(cell: str):
    """A default cell as YAML (`` `[64, 64]` `` → [64, 64]); None for prose cells."""
    if not (cell.startswith("`") and cell.endswith("`")):
        return None
    value = yaml.safe_load(cell.strip("`"))
    if isinstance(value, str):  # YAML 1.1 reads 1e-20 (without a dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    return value


def _plain(value):
    return list(value) if isinstance(value, tuple) else value


TABLES = _tables()
CONFIG_SECTIONS = ["Top level", "paths", "buffer", "budget", "graph.<node>", "sample.<mode>",
                   "logging", "tracking"]  # fmt: skip


def test_every_schema_key_has_a_row_and_every_row_a_key():
    documented = {key for section in CONFIG_SECTIONS for key in TABLES[section]}
    expected = set(schema.TOP_KEYS)
    expected |= {f"paths.{k}" for k in schema.PATH_KEYS}
    expected |= {f"buffer.{k}" for k in schema.BUFFER_KEYS}
    expected |= {f"budget.{k}" for k in schema.BUDGET_KEYS}
    expected |= {f"graph.<node>.{k}" for k in schema.NODE_KEYS}
    expected |= {f"sample.<mode>.{k}" for k in schema.SAMPLE_KEYS}
    expected |= {f"logging.{k}" for k in schema.LOGGING_KEYS}
    expected |= {f"tracking.{k}" for k in schema.TRACKING_KINDS}
    expected |= {f"tracking.mlflow.{k}" for k in schema.MLFLOW_KEYS}
    assert documented - expected == set(), "rows for keys the schema does not have"
    assert expected - documented == set(), "schema keys without a row in docs/reference/config.md"
    *modes, last = (f"`{m}`" for m in schema.SAMPLE_MODES)
    assert f"`<mode>` is {', '.join(modes)} or {last}." in PAGE.read_text()


@pytest.mark.parametrize(
    ("section", "defaults"),
    [("buffer", schema.BUFFER_DEFAULTS), ("budget", schema.BUDGET_DEFAULTS)],
)
def test_section_defaults_are_the_schemas(section, defaults):
    rows = TABLES[section]
    for key, default in defaults.items():
        assert _value(rows[f"{section}.{key}"]) == default, f"{section}.{key}"
    for key in schema.BUFFER_REQUIRED if section == "buffer" else ():
        assert rows[f"buffer.{key}"] == "required"


def test_node_defaults_are_the_node_fields():
    rows = TABLES["graph.<node>"]
    for field in dataclasses.fields(Node):
        key = f"graph.<node>.{field.name}"
        if key not in rows or field.name in ("simulator", "observed"):
            continue  # the config's simulator is required; observed is an array
        default = field.default_factory() if field.default is dataclasses.MISSING else field.default  # type: ignore[misc]
        assert _value(rows[key]) == _plain(default), key


def _options(path: Path) -> dict[str, dict[str, object]]:
    """Options class → {field: default} of the ``option(default, …)`` fields in its body."""
    classes: dict[str, dict[str, object]] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef) and node.name.endswith("Options"):
            fields = {}
            for item in node.body:
                call = getattr(item, "value", None)
                if (
                    isinstance(item, ast.AnnAssign)
                    and isinstance(call, ast.Call)
                    and getattr(call.func, "id", "") == "option"
                ):
                    fields[item.target.id] = _plain(ast.literal_eval(call.args[0]))  # type: ignore[attr-defined]
            classes[node.name] = fields
    return classes


def test_estimator_options_are_the_estimators():
    options = _options(ESTIMATORS / "_options.py") | _options(ESTIMATORS / "_flow_matching.py")
    tables = {
        "Estimator options": "EstimatorOptions",
        "GaussianPosterior": "GaussianOptions",
        "FlowPosterior": "FlowOptions",
        "FlowLikelihood": "LikelihoodOptions",
        "FlowMatchingPosterior": "FlowMatchingOptions",
    }
    assert set(options) == set(tables.values()), "an options class without a table"
    for heading, cls in tables.items():
        rows = TABLES[heading]
        assert set(rows) == set(options[cls]), heading
        for key, default in options[cls].items():
            assert _value(rows[key]) == default, f"{heading}: {key}"
