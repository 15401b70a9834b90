"""The config schema: which keys exist where, and the checks on resolved values.

Every unknown key, anywhere, is an error naming its full key path with a "did you mean …?"
suggestion; :func:`schema_problems` collects them all so one load reports every mistake.
Values of node fields are checked where nodes are built (:meth:`Graph.add_node`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from numbers import Integral, Real
from typing import Any

from kestrel_core.config._suggest import did_you_mean, key_path, unknown
from kestrel_core.graph._node import RAY_OPTIONS

__all__ = [
    "TOP_KEYS",
    "PATH_KEYS",
    "BUFFER_KEYS",
    "BUDGET_KEYS",
    "SAMPLE_MODES",
    "SAMPLE_KEYS",
    "NODE_KEYS",
    "LOGGING_KEYS",
    "TRACKING_KINDS",
    "MLFLOW_KEYS",
    "schema_problems",
    "override_problem",
    "split_key_path",
    "name_list",
]

TOP_KEYS = (
    "run_dir",
    "reuse",
    "paths",
    "buffer",
    "budget",
    "deterministic",
    "graph",
    "sample",
    "ray",
    "logging",
    "tracking",
)
PATH_KEYS = ("graph", "samples", "buffer", "imports")
BUFFER_REQUIRED = ("min_samples", "max_samples", "validation_samples")
#: optional buffer keys and their defaults
BUFFER_DEFAULTS: dict[str, Any] = {
    "simulate_count": 64,
    "epochs_per_round": 1,
    "simulate_interval": 0.0,
    "simulate_when_full": True,
    "snapshot_every": 0,
    "initial_samples_path": None,
    "journal": True,
    "storage": "auto",
    "cache_samples": None,
}
BUFFER_KEYS = BUFFER_REQUIRED + tuple(BUFFER_DEFAULTS)
#: the ``budget`` section's keys and their defaults
BUDGET_DEFAULTS: dict[str, Any] = {"simulations": None, "stop_early": False}
BUDGET_KEYS = tuple(BUDGET_DEFAULTS)
SAMPLE_MODES = ("prior", "posterior", "proposal", "ppd")
SAMPLE_KEYS = ("n", "exclude_keys", "add_keys")
NODE_KEYS = (
    "simulator",
    "estimator",
    "parents",
    "evidence",
    "scaffolds",
    "observed",
    "num_actors",
    "sample_chunk_size",
    "ray",
    "on_error",
    "dry_run",
    "timeout",
    "names",
)
LOGGING_KEYS = ("level",)
#: the level names ``logging.level`` takes (the driver log's threshold, :mod:`logging`'s names)
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
#: the experiment trackers a ``tracking`` section may select (each optional, any together)
TRACKING_KINDS = ("tensorboard", "mlflow")
#: the keys of ``tracking.mlflow`` (each optional)
MLFLOW_KEYS = ("tracking_uri", "experiment")
_FREE = ("simulator", "estimator")  # kwargs beneath these are checked against signatures

_SEGMENT = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def split_key_path(key: str) -> list[str | int]:
    """``"graph.x.parents[0]"`` → ``["graph", "x", "parents", 0]``."""
    return [int(idx) if idx else name for name, idx in _SEGMENT.findall(key)]


def _is_int(value: Any, minimum: int = 0) -> bool:
    return not isinstance(value, bool) and isinstance(value, Integral) and int(value) >= minimum


def name_list(value: Any) -> tuple[str, ...] | None:
    """A list of names, or a comma-separated string; ``None`` if neither."""
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(s.strip() for s in value.split(",") if s.strip())
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _keys(
    section: Any, allowed: tuple[str, ...], where: str, problems: list[str], what: str = "key"
) -> bool:
    if section is None:
        return False
    if not isinstance(section, Mapping):
        problems.append(f"{where}: expected a mapping, found {type(section).__name__} {section!r}")
        return False
    for key in section:
        if key not in allowed:
            problems.append(f"{key_path(where, str(key))}: {unknown(what, str(key), allowed)}")
    return True


def _buffer_problems(buf: Any, problems: list[str]) -> None:
    if not _keys(buf, BUFFER_KEYS, "buffer", problems):
        return
    for key in BUFFER_REQUIRED:
        if key not in buf or buf[key] is None:
            problems.append(f"buffer.{key}: required (an integer ≥ 0)")
        elif not _is_int(buf[key]):
            problems.append(f"buffer.{key}: expected an integer ≥ 0, found {buf[key]!r}")
    lo, hi = buf.get("min_samples"), buf.get("max_samples")
    if _is_int(lo) and _is_int(hi) and lo > hi:
        problems.append(f"buffer.min_samples: {lo} is larger than buffer.max_samples {hi}")
    checks = {
        "simulate_count": (lambda v: _is_int(v, 1), "an integer ≥ 1"),
        "epochs_per_round": (
            lambda v: _is_int(v, 0),
            "an integer ≥ 0 (epochs between rounds; 0: the clock alone)",
        ),
        "simulate_interval": (
            lambda v: isinstance(v, Real) and not isinstance(v, bool) and float(v) >= 0,
            "seconds ≥ 0",
        ),
        "simulate_when_full": (lambda v: isinstance(v, bool), "true or false"),
        "snapshot_every": (lambda v: _is_int(v), "an integer ≥ 0"),
        "initial_samples_path": (lambda v: v is None or isinstance(v, str), "a path or null"),
        "journal": (lambda v: isinstance(v, bool), "true or false"),
        "storage": (
            lambda v: v in ("auto", "memory", "disk"),
            "auto, memory or disk (where the buffer's rows live)",
        ),
        "cache_samples": (
            lambda v: v is None or _is_int(v, 1),
            "an integer ≥ 1 (rows kept in the object store) or null (half the store)",
        ),
    }
    for key, (ok, expected) in checks.items():
        if key in buf and not ok(buf[key]):
            problems.append(f"buffer.{key}: expected {expected}, found {buf[key]!r}")
    if buf.get("storage") == "disk" and buf.get("journal") is False:
        problems.append(
            "buffer.storage: disk trains from the journal's files, but buffer.journal is false "
            "(no journal is written): set buffer.journal: true, or buffer.storage: memory"
        )


def _budget_problems(budget: Any, problems: list[str]) -> None:
    if not _keys(budget, BUDGET_KEYS, "budget", problems):
        return
    sims = budget.get("simulations")
    if sims is not None and not _is_int(sims, 1):
        problems.append(
            f"budget.simulations: expected an integer ≥ 1 (simulations for the whole run) or "
            f"null (no budget), found {sims!r}"
        )
    if "stop_early" in budget and not isinstance(budget["stop_early"], bool):
        problems.append(
            f"budget.stop_early: expected true or false, found {budget['stop_early']!r}"
        )


def _paths_problems(paths: Any, problems: list[str]) -> None:
    if not _keys(paths, PATH_KEYS, "paths", problems):
        return
    for key in ("graph", "samples", "buffer"):
        if key in paths and paths[key] is not None and not isinstance(paths[key], str):
            problems.append(f"paths.{key}: expected a path, found {paths[key]!r}")
    if "imports" in paths and name_list(paths["imports"]) is None:
        problems.append(
            f"paths.imports: expected a list of directories, found {paths['imports']!r}"
        )


def _sample_problems(sample: Any, nodes: list[str], problems: list[str]) -> None:
    if not _keys(sample, SAMPLE_MODES, "sample", problems, "sample mode"):
        return
    for mode, entry in sample.items():
        where = f"sample.{mode}"
        if mode not in SAMPLE_MODES or not _keys(entry, SAMPLE_KEYS, where, problems):
            continue
        n = entry.get("n")
        if n is not None and not _is_int(n, 1):
            problems.append(
                f"{where}.n: expected an integer ≥ 1 (the number of samples to draw; leave it "
                f"out to draw none), found {n!r}"
            )
        for key in ("exclude_keys", "add_keys"):
            names = name_list(entry.get(key))
            if names is None:
                problems.append(
                    f"{where}.{key}: expected a list of node names, found {entry[key]!r}"
                )
                continue
            for i, name in enumerate(names):
                if nodes and name not in nodes:
                    problems.append(f"{key_path(where, key, i)}: {unknown('node', name, nodes)}")


def _tracking_kind(kind: str) -> str:
    """``tracking.<kind>``'s message for a kind no tracker has (names the known kinds)."""
    hint = did_you_mean(kind, TRACKING_KINDS)
    return (
        f"tracking.{kind}: unknown tracking kind {kind!r}{hint}; known kinds: "
        f"{', '.join(TRACKING_KINDS)}"
    )


def _tracking_problems(tracking: Any, problems: list[str]) -> None:
    if tracking is None:
        return
    if not isinstance(tracking, Mapping):
        problems.append(
            f"tracking: expected a mapping of tracker kinds ({', '.join(TRACKING_KINDS)}) to "
            f"their settings, e.g. {{tensorboard: tb}}; found {tracking!r}"
        )
        return
    for kind in tracking:
        if kind not in TRACKING_KINDS:
            problems.append(_tracking_kind(str(kind)))
    tb = tracking.get("tensorboard")
    if "tensorboard" in tracking and (not isinstance(tb, str) or not tb.strip()):
        problems.append(
            f"tracking.tensorboard: expected the folder of the event files (relative: inside "
            f"the run directory, e.g. tb), found {tb!r}"
        )
    ml = tracking.get("mlflow")
    if ml is not None and _keys(ml, MLFLOW_KEYS, "tracking.mlflow", problems):
        for key in MLFLOW_KEYS:
            if ml.get(key) is not None and (not isinstance(ml[key], str) or not ml[key]):
                what = "a tracking URI or folder" if key == "tracking_uri" else "a name"
                problems.append(f"tracking.mlflow.{key}: expected {what}, found {ml[key]!r}")


def schema_problems(data: Any) -> list[str]:
    """Every schema problem of a resolved config, one message each.

    Args:
        data: the resolved config as plain containers.

    Returns:
        Messages such as ``"buffer.max_sample: unknown key 'max_sample' (did you mean
        'max_samples'?)"``; empty when the config is well-formed.
    """
    if not isinstance(data, Mapping):
        return [f"config: expected a mapping at the top level, found {type(data).__name__}"]
    problems: list[str] = []
    _keys(data, TOP_KEYS, "", problems, "top-level key")
    graph = data.get("graph")
    nodes: list[str] = []
    if graph is None:
        problems.append("graph: required (a mapping of node names to node settings)")
    elif not isinstance(graph, Mapping) or not graph:
        problems.append(f"graph: expected a non-empty mapping of nodes, found {graph!r}")
    else:
        nodes = [str(n) for n in graph]
        for name, node in graph.items():
            where = key_path("graph", str(name))
            if node is None:
                node = {}
            if not isinstance(node, Mapping):
                problems.append(f"{where}: expected a mapping of node settings, found {node!r}")
                continue
            _keys(node, NODE_KEYS, where, problems, "node key")
            if node.get("simulator") is None:
                problems.append(f"{where}.simulator: required (every node needs a simulator)")
    _paths_problems(data.get("paths"), problems)
    _buffer_problems(data.get("buffer"), problems)
    _budget_problems(data.get("budget"), problems)
    det = data.get("deterministic")
    if det is not None and not isinstance(det, bool):
        problems.append(f"deterministic: expected true or false, found {det!r}")
    _sample_problems(data.get("sample"), nodes, problems)
    if data.get("ray") is not None and not isinstance(data["ray"], Mapping):
        problems.append(f"ray: expected a mapping of ray.init arguments, found {data['ray']!r}")
    if _keys(data.get("logging"), LOGGING_KEYS, "logging", problems):
        level = data["logging"].get("level")
        if level is not None and not (isinstance(level, str) and level.upper() in LOG_LEVELS):
            problems.append(
                f"logging.level: expected one of {', '.join(LOG_LEVELS)} (any case), "
                f"found {level!r}"
            )
    if "run_dir" in data and data["run_dir"] is not None and not isinstance(data["run_dir"], str):
        problems.append(f"run_dir: expected a path, found {data['run_dir']!r}")
    reuse = data.get("reuse")
    if reuse is not None and not (
        isinstance(reuse, str) or isinstance(reuse, list) and all(isinstance(r, str) for r in reuse)
    ):
        problems.append(
            "reuse: expected a list of run folders (relative: to the config file's folder) "
            f"whose simulation banks the run starts from, found {reuse!r}"
        )
    _tracking_problems(data.get("tracking"), problems)
    return problems


def override_problem(parts: list[str | int], nodes: list[str]) -> str | None:
    """Why an override key path does not name a config key, or ``None`` if it does.

    New kwargs beneath ``graph.<node>.simulator`` / ``.estimator`` and any key beneath ``ray``
    are allowed; everything else must be a schema key and ``graph.<node>`` an existing node.
    """
    names = [p for p in parts if isinstance(p, str)]
    if not names:
        return "empty key"
    top = names[0]
    if top not in TOP_KEYS:
        return unknown("top-level key", top, TOP_KEYS)
    table = {
        "paths": PATH_KEYS,
        "buffer": BUFFER_KEYS,
        "budget": BUDGET_KEYS,
        "logging": LOGGING_KEYS,
        "run_dir": (),
        "deterministic": (),
        "reuse": (),
    }
    if top == "ray":
        return None
    if top == "tracking":
        if len(names) > 1 and names[1] not in TRACKING_KINDS:
            return _tracking_kind(names[1])
        if len(names) > 2 and (names[1] != "mlflow" or names[2] not in MLFLOW_KEYS):
            if names[1] != "mlflow":
                return f"{key_path(*names)}: tracking.{names[1]} has no sub-keys"
            return f"{key_path(*names[:3])}: {unknown('key', names[2], MLFLOW_KEYS)}"
        if len(names) > 3:
            return f"{key_path(*names)}: {key_path(*names[:3])} has no sub-keys"
        return None
    if top in table:
        if len(names) > 1 and names[1] not in table[top]:
            return f"{key_path(*names[:2])}: {unknown('key', names[1], table[top])}"
        if len(names) > 2 or (top in ("run_dir", "deterministic", "reuse") and len(names) > 1):
            return f"{key_path(*names)}: {key_path(*names[:-1])} has no sub-keys"
        return None
    if top == "sample":
        if len(names) > 1 and names[1] not in SAMPLE_MODES:
            return f"{key_path(*names[:2])}: {unknown('sample mode', names[1], SAMPLE_MODES)}"
        if len(names) > 2 and names[2] not in SAMPLE_KEYS:
            return f"{key_path(*names[:3])}: {unknown('key', names[2], SAMPLE_KEYS)}"
        return None
    if len(names) > 1 and names[1] not in nodes:
        return f"{key_path(*names[:2])}: {unknown('node', names[1], nodes)} (overrides cannot add nodes)"
    if len(names) > 2:
        key = names[2]
        if key not in NODE_KEYS:
            return f"{key_path(*names[:3])}: {unknown('node key', key, NODE_KEYS)}"
        if key == "ray" and len(names) > 3 and names[3] not in RAY_OPTIONS:
            return f"{key_path(*names[:4])}: {unknown('Ray actor option', names[3], RAY_OPTIONS)}"
    return None
