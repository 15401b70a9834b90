"""Run config: YAML / mapping / DictConfig → validated, resolved :class:`RunConfig`.

Sections (unknown keys anywhere are errors with a "did you mean …?" suggestion)::

    paths:    graph, samples, buffer (default ${run_dir}/<name>), imports (default [config dir])
    buffer:   min_samples, max_samples, validation_samples (required), simulate_count (64),
              simulate_interval (0 s), simulate_when_full (true), snapshot_every (0),
              initial_samples_path (null), journal (true), storage (auto),
              cache_samples (null)
    graph:    <node>: simulator, estimator, parents, evidence, scaffolds, observed,
              num_actors, sample_chunk_size, ray, on_error (raise | skip), dry_run (true),
              timeout (seconds per simulator call), names (component names for plots and
              exports)
    sample:   prior | posterior | proposal | ppd: n, exclude_keys, add_keys
    ray:      keyword arguments of ray.init (passed through)
    logging:  level
    tracking: tensorboard (event-file folder, relative: in the run directory), mlflow
              (tracking_uri, experiment): experiment trackers of a launch (kestrel[tracking])

Everything is checked at load, before anything runs: schema, node fields, graph structure,
and (``check_targets``) that each simulator/estimator ``_target_`` imports and accepts its
kwargs; a :class:`~kestrel_core.Product` prior is constructed so invalid parameters fail here.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kestrel_core._errors import ConfigError, GraphError
from kestrel_core.config._io import apply_override, read_source, resolve, yamlable
from kestrel_core.config._schema import (
    BUDGET_DEFAULTS,
    BUFFER_DEFAULTS,
    SAMPLE_MODES,
    name_list,
    schema_problems,
)
from kestrel_core.config._targets import spec_problems
from kestrel_core.config._trust import untrusted_problems
from kestrel_core.graph._graph import Graph
from kestrel_core.graph._spec import Spec
from kestrel_core.graph._topology import structure_problems
from kestrel_core.priors._mvnormal import MultivariateNormal
from kestrel_core.priors._product import Product

__all__ = [
    "load_config",
    "RunConfig",
    "BufferConfig",
    "BudgetConfig",
    "PathsConfig",
    "SampleConfig",
]

_ROLES = ("simulator", "estimator")


@dataclass(frozen=True)
class PathsConfig:
    """Where a run writes; ``None`` when not set and no run directory was given.

    Attributes:
        graph: estimator weights and logs. samples: sample files. buffer: buffer snapshots.
        imports: absolute directories put on ``sys.path`` before targets are imported.
    """

    graph: str | None
    samples: str | None
    buffer: str | None
    imports: tuple[str, ...] = ()


@dataclass(frozen=True)
class BufferConfig:
    """The training buffer (see :func:`kestrel_core.rotate` for the rules).

    Attributes:
        min_samples: floor of TRAINING + DISFAVOURED; also the initial simulation size.
        max_samples: cap on TRAINING samples. validation_samples: newest samples kept for
            validation. simulate_count: samples per re-simulation round.
        epochs_per_round: a round is due every this many training epochs (its proposal is the
            best model at that epoch; :class:`kestrel_core.Rounds`); 0: rounds paced by
            ``simulate_interval`` alone.
        simulate_interval: the least number of seconds between rounds (0: none).
        simulate_when_full: keep simulating when
            TRAINING is at ``max_samples``. snapshot_every: write every n-th sample (0 = off).
        initial_samples_path: absolute path of samples to start from, or ``None``.
        journal: after every append, the launch writes its rows to ``RUN/buffer/journal/``
            until a checkpoint's snapshot holds them, so a killed store or driver loses no row
            (``false``: rows since the last checkpoint are lost then; saves the driver reading
            every block).
        storage: where the buffer's rows live: ``memory`` (all in Ray's object store; a buffer
            that does not fit is refused), ``disk`` (the object store keeps the newest
            ``cache_samples`` rows, the others are read back from the journal by the loader's
            background fetch; needs ``journal: true``), ``auto`` (``disk`` only when the buffer
            would not fit in the object store and the journal is on, else ``memory``).
        cache_samples: rows a buffer that trains from disk keeps in the object store; ``None``:
            half the object store's bytes (:data:`kestrel_core.store.CACHE_SHARE`).
    """

    min_samples: int
    max_samples: int
    validation_samples: int
    simulate_count: int = 64
    epochs_per_round: int = 1
    simulate_interval: float = 0.0
    simulate_when_full: bool = True
    snapshot_every: int = 0
    initial_samples_path: str | None = None
    journal: bool = True
    storage: str = "auto"
    cache_samples: int | None = None

    @property
    def pace(self) -> str:
        """How re-simulation rounds are spaced, in words (for logs): ``"a round every 2
        epochs"``, ``"a round every 2 epochs, at least 0.5 s apart"``, ``"a round every
        0.05 s"`` or ``"rounds back to back"``."""
        interval = f"{self.simulate_interval:g} s"
        if self.epochs_per_round:
            every = f"a round every {self.epochs_per_round} epochs"
            return f"{every}, at least {interval} apart" if self.simulate_interval else every
        return f"a round every {interval}" if self.simulate_interval else "rounds back to back"


@dataclass(frozen=True)
class BudgetConfig:
    """The run's simulation budget (``budget`` section).

    Attributes:
        simulations: the total number of simulations the run may use over all its launches —
            every latent draw whose row reached the store, valid or not (``None``: no budget;
            the run simulates until training ends).
        stop_early: let training end with budget left, by early stopping or at
            ``max_epochs``; the rest of the budget is then drawn from the final proposals (one
            warning) and never trained on. Default ``False``: neither early stopping nor
            ``max_epochs`` ends training while the budget's rounds still come — training goes
            on past ``max_epochs`` until every budgeted simulation was in a training epoch.
    """

    simulations: int | None = None
    stop_early: bool = False


@dataclass(frozen=True)
class SampleConfig:
    """One ``sample.<mode>`` entry: ``n`` (``None`` = not set) and node names to drop / add."""

    n: int | None = None
    exclude_keys: tuple[str, ...] = ()
    add_keys: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunConfig:
    """A validated, resolved run config (build it with :func:`load_config`).

    Attributes:
        paths, buffer (``None`` if the config has no ``buffer`` section), graph, sample (all four
        modes), ray (``ray.init`` kwargs), logging, run_dir (``None`` if not given), base_dir
        (the config file's directory, or the current directory for a mapping), budget,
        deterministic (the deterministic round schedule, :class:`kestrel_core.Rounds`;
        ``None``: not set, false unless the launch asks for it), tracking (the ``tracking``
        section as a mapping: kind → its settings; empty: no tracker).
    """

    paths: PathsConfig
    buffer: BufferConfig | None
    graph: Graph
    sample: dict[str, SampleConfig]
    ray: dict[str, Any]
    run_dir: str | None
    base_dir: str
    logging: dict[str, Any] = field(default_factory=dict)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    deterministic: bool | None = None
    tracking: dict[str, Any] = field(default_factory=dict)
    _data: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _source: Any = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        """The resolved config as plain containers: defaults filled in, relative ``observed``
        and import paths made absolute, unset paths left out (so a reload with another
        ``run_dir`` puts them there). Classes appear as dotted paths; live instances and
        in-memory observations as ``"<…>"`` placeholders (those do not load back)."""
        data = yamlable(self._data)
        if data.get("run_dir") is None:
            data.pop("run_dir", None)
        data["paths"] = {k: v for k, v in data["paths"].items() if v is not None}
        return data

    def to_yaml(self) -> str:
        """:meth:`to_dict` as YAML; ``load_config`` of it gives an equal config."""
        import yaml

        return yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)

    def require_sample(self, mode: str) -> SampleConfig:
        """The ``sample.<mode>`` entry, which must set ``n``.

        Raises:
            ConfigError: unknown mode, or ``n`` not set (names the key to set).
        """
        if mode not in SAMPLE_MODES:
            from kestrel_core.config._suggest import unknown

            raise ConfigError(f"sample: {unknown('sample mode', mode, SAMPLE_MODES)}")
        entry = self.sample[mode]
        if entry.n is None:
            raise ConfigError(
                f"sample.{mode}.n: required to sample {mode!r}; set it in the config or pass "
                f"sample.{mode}.n=<count>"
            )
        return entry


def _join(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems in the config:\n" + "\n".join(f"  {p}" for p in problems)


def _build_graph(
    nodes: Mapping[str, Any], base_dir: str, imports: tuple[str, ...], problems: list[str]
) -> Graph:
    graph = Graph(base_dir=base_dir)
    for name, node in nodes.items():
        node = dict(node or {})
        try:
            where = f"graph.{name}"
            sim = Spec.coerce(node.pop("simulator"), f"{where}.simulator", imports)
            est = node.pop("estimator", None)
            est = None if est is None else Spec.coerce(est, f"{where}.estimator", imports)
            graph.add_node(name, sim, estimator=est, **node)
        except (ConfigError, GraphError) as err:
            problems.append(str(err))
    return graph


def _check_targets(graph: Graph, roles: Sequence[str]) -> list[str]:
    problems: list[str] = []
    for name, node in graph.nodes.items():
        for role in roles:
            spec = getattr(node, role)
            if spec is not None:
                problems += spec_problems(spec, f"graph.{name}.{role}", build=_is_prior)
    return problems


def _check_trust(data: Mapping[str, Any], origin: Any, roles: Sequence[str]) -> None:
    """Raise for what a config that is not trusted may not do (before anything is imported;
    only the targets of ``roles`` are imported to be checked)."""
    imports = (data.get("paths") or {}).get("imports") if isinstance(data, Mapping) else None
    folders = [imports] if isinstance(imports, str) else list(imports or [])
    run_dir = data.get("run_dir") if isinstance(data, Mapping) else None
    problems = untrusted_problems(data, [str(f) for f in folders], run_dir, roles)
    if not problems:
        return
    where = (
        os.path.abspath(os.path.expanduser(os.fspath(origin)))
        if isinstance(origin, (str, os.PathLike))
        else "the config"
    )
    remedy = (
        "a run folder's config may only use Kestrel's config classes and the code of its code "
        "folders; if you trust whoever wrote it, pass --trust (Python: trust=True)"
    )
    if len(problems) == 1:
        raise ConfigError(f"{where}: refused: {problems[0]}; {remedy}")
    lines = "\n".join(f"  {p}" for p in problems)
    raise ConfigError(f"{where}: refused, {len(problems)} problems ({remedy}):\n{lines}")


def _is_prior(target: Any) -> bool:
    return isinstance(target, type) and issubclass(target, (Product, MultivariateNormal))


def load_config(
    source: Any,
    overrides: Iterable[str] = (),
    *,
    run_dir: str | os.PathLike[str] | None = None,
    check_targets: Sequence[str] = ("simulator",),
    base_dir: str | os.PathLike[str] | None = None,
    trust: bool = True,
    origin: str | os.PathLike[str] | None = None,
) -> RunConfig:
    """Load, override, resolve and validate a run config.

    Args:
        source: path of a YAML file, a mapping, an OmegaConf ``DictConfig`` or a
            :class:`RunConfig` (re-resolved, e.g. for another ``run_dir``); never modified.
            A mapping's ``graph`` may be a :class:`~kestrel_core.Graph` built in Python
            (``{"graph": g, "buffer": {...}}``): the config its YAML would be
            (:meth:`Graph.to_yaml <kestrel_core.Graph.to_yaml>`), relative paths resolved
            against the Graph's ``base_dir`` (when set).
        overrides: dotlist items ``"graph.x.simulator.sigma=0.2"``. The key must exist in the
            schema (new kwargs beneath ``simulator``/``estimator`` and keys beneath ``ray`` are
            allowed); overrides cannot add nodes.
        run_dir: the run directory; ``${run_dir}`` resolves to it and the ``paths`` default to
            folders inside it.
        check_targets: roles (``"simulator"``, ``"estimator"``) whose ``_target_`` is imported
            and whose kwargs are checked against the constructor signature now.
        base_dir: the directory relative paths (``observed``, ``paths.imports``,
            ``buffer.initial_samples_path``) are resolved against; default: the config file's
            folder, or the current directory for a mapping.
        trust: whether the config is the user's own (default). ``False`` for a config
            someone else may have written (a run folder's ``config.yml``): before anything is
            imported, every ``_target_`` must name one of Kestrel's config classes or code of
            the config's code folders (``paths.imports``, outside ``run_dir`` and the Python
            installation), and the ``ray`` sections may not fetch or run code or join another
            cluster (:mod:`kestrel_core.config._trust`); a config that names no
            ``paths.imports`` then has no code folder (not its own folder). The file is
            checked as written, without ``overrides`` (they are the user's own). Targets of
            roles outside ``check_targets`` are checked as names only, not imported: build
            only the roles of ``check_targets`` from such a config.
        origin: the file the config came from, named in the errors of ``trust=False``
            (default: ``source`` when it is a path).

    A path given as ``source``, ``run_dir`` or ``base_dir``, and the paths in the config
    (``paths.*``, ``observed``, ``buffer.initial_samples_path``), may start with ``~``: it is
    expanded as a shell does (:func:`os.path.expanduser`), never a folder named ``~``.

    Returns:
        The frozen :class:`RunConfig`.

    Raises:
        ConfigError: unreadable source, bad override, failed interpolation, unknown or invalid
            keys, unimportable targets, bad kwargs or prior parameters — every problem found,
            one per line, each starting with its key path; an empty config file (naming it);
            with ``trust=False``, a target or ``ray`` setting the config may not use (naming
            the file, the key and the target; nothing imported).
        GraphError: the config is well-formed but the graph is not (unknown node reference,
            cycle, estimator without evidence, …).

    Example:
        >>> cfg = load_config({"graph": {"x": {"simulator": "collections.OrderedDict"}}})
        >>> cfg.graph.forward_order
        ['x']
    """
    for role in check_targets:
        if role not in _ROLES:
            raise ConfigError(f"check_targets: unknown role {role!r} (expected {_ROLES})")
    cfg, source_dir = read_source(source)
    if base_dir is not None:
        base_dir = os.path.abspath(os.path.expanduser(os.fspath(base_dir)))
    base_dir = source_dir if base_dir is None else base_dir
    if run_dir is not None:
        run_dir = os.path.expanduser(os.fspath(run_dir))
    nodes = list(cfg.get("graph") or {}) if hasattr(cfg.get("graph"), "keys") else []
    # a config that is not trusted is checked as its file says, without the overrides: what
    # the user gives on the command line is the user's own
    own = None if trust else cfg.copy()
    problems = []
    for item in [overrides] if isinstance(overrides, str) else overrides:
        try:
            apply_override(cfg, item, nodes)
        except ConfigError as err:
            problems.append(str(err))
    if problems:
        raise ConfigError(_join(problems))
    unresolved = cfg.copy()
    data = resolve(cfg, run_dir, base_dir)
    if own is not None:
        own_paths = own.get("paths")  # (before resolve() fills in the defaults)
        named = hasattr(own_paths, "keys") and "imports" in own_paths
        checked = resolve(own, run_dir, base_dir)
        if not named and isinstance(checked.get("paths"), dict):
            checked["paths"]["imports"] = []  # no code folder it does not name (not its own)
        _check_trust(checked, source if origin is None else origin, check_targets)
    problems = schema_problems(data)
    if problems:
        raise ConfigError(_join(problems))
    paths = data["paths"]
    imports = tuple(paths["imports"])
    graph = _build_graph(data["graph"], base_dir, imports, problems)
    if problems:
        raise ConfigError(_join(problems))
    structure = structure_problems(graph.nodes)
    if structure:
        raise GraphError(_join(structure))
    problems = _check_targets(graph, check_targets)
    if problems:
        raise ConfigError(_join(problems))
    buffer = None
    if data.get("buffer") is not None:
        data["buffer"] = {
            **data["buffer"],
            **{k: v for k, v in BUFFER_DEFAULTS.items() if k not in data["buffer"]},
        }
        buffer = BufferConfig(**data["buffer"])
    sample = {}
    for mode in SAMPLE_MODES:
        entry = (data.get("sample") or {}).get(mode) or {}
        sample[mode] = SampleConfig(
            n=entry.get("n"),
            exclude_keys=name_list(entry.get("exclude_keys")) or (),
            add_keys=name_list(entry.get("add_keys")) or (),
        )
    return RunConfig(
        paths=PathsConfig(paths["graph"], paths["samples"], paths["buffer"], imports),
        buffer=buffer,
        graph=graph,
        sample=sample,
        ray=dict(data.get("ray") or {}),
        run_dir=data.get("run_dir"),
        base_dir=base_dir,
        logging=dict(data.get("logging") or {}),
        budget=BudgetConfig(**{**BUDGET_DEFAULTS, **(data.get("budget") or {})}),
        deterministic=data.get("deterministic"),
        tracking=dict(data.get("tracking") or {}),
        _data=data,
        _source=(unresolved, base_dir),
    )
