"""The graph of random variables: :class:`Node`, :class:`Graph` (and :class:`Spec`).

A graph is built from YAML by :func:`~kestrel_core.load_config` or in Python::

    g = (Graph()
         .add_node("theta", prior=Product([["normal", 0, 1]]),
                   estimator="kestrel_torch.GaussianPosterior", evidence=["x"])
         .add_node("x", (model.Noise, {"sigma": 0.1}), parents=["theta"],
                   observed="data/obs.npy"))
    buffer = {"min_samples": 256, "max_samples": 1024, "validation_samples": 64}
    cfg = load_config({"graph": g, "buffer": buffer})   # or kestrel.launch({...}, RUN)
    print(g.to_yaml(buffer=buffer))                      # the same config as YAML

A Graph is a config's ``graph`` section (:func:`~kestrel_core.load_config` and
``kestrel.launch`` take it there), written as its YAML would be
(:mod:`kestrel_core.graph._record`): classes by import path, priors by their parameters, so
``RUN/config.yml`` records it and a run resumes from it.

Shape symbols: N samples, D a node's per-sample shape.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np

import kestrel_core.graph._topology as _topology
from kestrel_core._errors import ConfigError, GraphError
from kestrel_core.config._suggest import key_path, unknown
from kestrel_core.graph._names import node_names
from kestrel_core.graph._node import (
    ON_ERROR,
    RAY_OPTIONS,
    Node,
    choice,
    count,
    flag,
    name_tuple,
    ray_options,
    seconds,
)
from kestrel_core.graph._observe import (
    absolute_observation_spec,
    check_observation,
    load_observation,
)
from kestrel_core.graph._record import graph_section, observed_file, record_value
from kestrel_core.graph._spec import Spec

__all__ = ["Graph", "Node", "Spec", "RAY_OPTIONS"]


class Graph:
    """A mutable builder of nodes; validated by :meth:`validate` (and by ``load_config``).

    Built in Python (a notebook), a Graph is the ``graph`` section of a config mapping:
    ``kestrel.launch({"graph": g, "buffer": {...}}, RUN)`` and
    :func:`~kestrel_core.load_config` take it there (with every check of a YAML config, and
    its error messages), as the config its YAML would be; :meth:`to_yaml` / :meth:`save`
    write that YAML — the record of the graph, which ``RUN/config.yml`` keeps.

    Args:
        base_dir: directory that relative paths are resolved against: ``observed`` paths (at
            :meth:`add_node` time), and those of a config mapping holding the graph
            (``paths.imports`` defaults to it). Default: the current directory at that time.

    Example:
        >>> from kestrel_core import Product
        >>> from kestrel_core.testing import models
        >>> g = Graph()
        >>> g = g.add_node("theta", prior=Product([["uniform", 0, 1], ["uniform", 0, 1]]),
        ...                estimator=("kestrel_torch.GaussianPosterior", {"max_epochs": 20}),
        ...                evidence=["x"])
        >>> g = g.add_node("x", (models.Noise, {"sigma": 0.1}), parents=["theta"],
        ...                observed=np.array([0.4, 0.6]))
        >>> print(g.to_yaml(buffer={"min_samples": 64, "max_samples": 256,
        ...                         "validation_samples": 16}), end="")
        buffer: {min_samples: 64, max_samples: 256, validation_samples: 16}
        graph:
          theta:
            simulator:
              _target_: kestrel_core.Product
              priors:
              - [uniform, 0.0, 1.0, {repeat: 2}]
            evidence: [x]
            estimator: {_target_: kestrel_torch.GaussianPosterior, max_epochs: 20}
          x:
            simulator: {_target_: kestrel_core.testing.models.Noise, sigma: 0.1}
            parents: [theta]
            observed: observed_x.npy
    """

    def __init__(self, base_dir: str | os.PathLike[str] | None = None) -> None:
        self.base_dir = None if base_dir is None else os.fspath(base_dir)
        self._nodes: dict[str, Node] = {}
        self._observed_from: dict[str, str] = {}

    def add_node(
        self,
        name: str,
        simulator: Any = None,
        *,
        prior: Any = None,
        estimator: Any = None,
        parents: Iterable[str] = (),
        evidence: Iterable[str] = (),
        scaffolds: Iterable[str] = (),
        observed: Any = None,
        num_actors: int | str = 1,
        sample_chunk_size: int = 0,
        ray: Mapping[str, Any] | None = None,
        on_error: str = "raise",
        dry_run: bool = True,
        timeout: float | None = None,
        names: Iterable[str] | None = None,
    ) -> Graph:
        """Add a node; returns the graph so calls chain.

        Args:
            name: identifier without dots.
            simulator: a :class:`Spec`, dotted path, ``{"_target_": …, **kwargs}`` mapping,
                ``(class or path, kwargs)`` pair, class or live instance. For a graph to be
                recorded (in a config, :meth:`to_yaml`), classes must import back by
                their path (not defined in ``__main__``) and live instances must be
                kestrel-core priors: give a class with its arguments,
                ``(model.Noise, {"sigma": 0.1})``.
            prior: the same forms as ``simulator``, for a node without parents (a latent
                root, e.g. :class:`~kestrel_core.Product`): its prior is its simulator (the
                YAML says ``simulator``). Give ``prior`` or ``simulator``, not both.
            estimator: the same forms as ``simulator``, or ``None``.
            parents, evidence, scaffolds: node names (checked by :meth:`validate`).
            observed: an array (shape ``D``) or a path spec ``"file.npz['key']"``.
            num_actors: ≥ 1, or ``"auto"`` (one replica per slot of what a replica requests
                over the cluster's nodes, resolved by the Ray layer; see :class:`Node`).
                sample_chunk_size: ≥ 0 (0 = one call for all samples).
            ray: Ray actor options, keys from :data:`RAY_OPTIONS`.
            on_error: ``"raise"`` or ``"skip"`` (samples whose simulation raised are dropped).
            dry_run: simulate the node in-process before a launch starts Ray (default true).
            timeout: seconds one simulator call (one chunk) may take on Ray (``None``: no
                limit); see :class:`Node`.
            names: names of the node's flattened components (``[beta, gamma]``); their number
                must match the node's dimension where it is known here (the observation's
                size, or a kestrel-core prior's), and is checked again against samples.

        Raises:
            GraphError: the name is not an identifier or already used.
            ConfigError: a field has the wrong type or value, or the observation cannot be
                loaded (messages start with ``graph.<name>.<field>``); no simulator (nor
                prior), both, or a prior with parents.
        """
        if not _topology.is_identifier_name(name):
            raise GraphError(
                f"{key_path('graph', str(name))}: node name {name!r} must be an identifier "
                "(letters, digits, '_'; no '.')"
            )
        if name in self._nodes:
            raise GraphError(f"graph.{name}: node {name!r} is already in the graph")
        where = f"graph.{name}"
        if prior is not None:
            if simulator is not None:
                raise ConfigError(
                    f"{where}: give prior= or simulator=, not both (a root node's prior is its "
                    "simulator)"
                )
            if name_tuple(parents, f"{where}.parents"):
                raise ConfigError(
                    f"{where}.parents: a node with a prior= has no parents; give a node whose "
                    "distribution depends on its parents a simulator= instead"
                )
            simulator = prior
        if simulator is None:  # the words of the config schema's check
            raise ConfigError(f"{where}.simulator: required (every node needs a simulator)")
        auto = isinstance(num_actors, str)
        if auto and num_actors != "auto":
            raise ConfigError(
                f"{where}.num_actors: expected an integer ≥ 1 or 'auto', got {num_actors!r}"
            )
        obs = None
        source = None
        if observed is not None:
            base = self.base_dir if self.base_dir is not None else os.getcwd()
            try:
                obs = load_observation(observed, base, node=name)
            except ConfigError as err:
                raise ConfigError(f"{where}.observed: {err}") from err
            if isinstance(observed, (str, os.PathLike)):
                source = absolute_observation_spec(os.fspath(observed), base)
        node = Node(
            name=name,
            simulator=Spec.coerce(simulator, f"{where}.simulator"),
            estimator=None if estimator is None else Spec.coerce(estimator, f"{where}.estimator"),
            parents=name_tuple(parents, f"{where}.parents"),
            evidence=name_tuple(evidence, f"{where}.evidence"),
            scaffolds=name_tuple(scaffolds, f"{where}.scaffolds"),
            observed=obs,
            num_actors=1 if auto else count(num_actors, f"{where}.num_actors", 1),
            sample_chunk_size=count(sample_chunk_size, f"{where}.sample_chunk_size", 0),
            ray=ray_options(ray, f"{where}.ray"),
            on_error=choice(on_error, f"{where}.on_error", ON_ERROR),
            dry_run=flag(dry_run, f"{where}.dry_run"),
            timeout=seconds(timeout, f"{where}.timeout"),
            names=node_names(names, f"{where}.names", simulator, obs),
            auto_actors=auto,
        )
        self._nodes[name] = node
        if source is not None:
            self._observed_from[name] = source
        return self

    def observed_source(self, name: str) -> str | None:
        """The file node ``name``'s observation was loaded from, as an absolute path spec
        (``"/data/obs.npz['x']"``); ``None`` when it was given as an array (or has none).

        Raises:
            GraphError: no such node.
        """
        self[name]
        return self._observed_from.get(name)

    # -- the config of a graph built in Python ---------------------------------------------------
    def to_yaml(self, **sections: Any) -> str:
        """The config of this graph and ``sections`` as YAML text: the graph's record.

        The text is what a YAML file in ``base_dir`` would say: classes as
        ``module.QualName`` with their arguments, priors by their parameters (``to_config()``),
        numpy values as lists and numbers, observation files inside ``base_dir`` by relative
        paths; an observation given as an array is named ``observed_<node>.npy``, the file
        :meth:`save` writes beside the YAML. A launch of what :meth:`save` writes is the launch
        of ``{"graph": graph, **sections}`` (the same results for a seed).

        Args:
            sections: the config's other top-level sections, as mappings (or the config's
                dataclasses): ``buffer`` (``min_samples``, ``max_samples``,
                ``validation_samples``, …), ``budget``, ``sample`` (``{"posterior": {"n":
                1000}}``), ``deterministic``, ``paths``, ``ray``, ``logging``; ``None`` values
                are left out.

        Raises:
            ConfigError: a class that does not import back by its path (defined in
                ``__main__`` — a notebook or a script —, inside a function, a lambda), a live
                object other than a kestrel-core prior, an argument YAML cannot hold (each
                naming the node and the remedy); a problem of the config schema (unknown
                keys, bad section values: the messages of :func:`~kestrel_core.load_config`).
            GraphError: as :meth:`validate` (unknown node references, a cycle, …).
        """
        base = self._base()
        return _yaml_text(self._config_data(sections, base, base))

    def save(self, path: str | os.PathLike[str], **sections: Any) -> str:
        """Write :meth:`to_yaml` to ``path`` and each observation given as an array beside it
        as ``observed_<node>.npy``, so the file launches as the graph does.

        A file outside ``base_dir`` names the config's code folder: ``paths.imports`` is
        written (relative to the file) unless ``sections`` set it, and relative paths of
        ``observed`` / ``buffer.initial_samples_path`` are written for the file's folder.

        Returns:
            The absolute path written.

        Raises:
            ConfigError: as :meth:`to_yaml`.
            OSError: a file cannot be written.
        """
        target = os.path.abspath(os.path.expanduser(os.fspath(path)))
        folder = os.path.dirname(target)
        base = self._base()
        data = self._config_data(sections, folder, base)
        if os.path.normpath(folder) != os.path.normpath(base):
            paths = data.setdefault("paths", {})
            if isinstance(paths, dict) and "imports" not in paths:
                paths["imports"] = [os.path.relpath(base, folder).replace(os.sep, "/")]
            buffer = data.get("buffer")
            initial = buffer.get("initial_samples_path") if isinstance(buffer, dict) else None
            if isinstance(initial, str) and buffer is not None:
                full = os.path.join(base, os.path.expanduser(initial))
                buffer["initial_samples_path"] = os.path.normpath(full)
        os.makedirs(folder, exist_ok=True)
        for name, node in self._nodes.items():
            if node.observed is not None and name not in self._observed_from:
                file = os.path.join(folder, observed_file(name))
                with open(file + ".tmp", "wb") as fh:
                    np.save(fh, np.asarray(node.observed), allow_pickle=False)
                os.replace(file + ".tmp", file)
        with open(target + ".tmp", "w", encoding="utf-8") as fh:
            fh.write(_yaml_text(data))
        os.replace(target + ".tmp", target)
        return target

    def _base(self) -> str:
        return os.path.abspath(self.base_dir if self.base_dir is not None else os.getcwd())

    def _config_data(
        self, sections: Mapping[str, Any], folder: str | None, base: str
    ) -> dict[str, Any]:
        """The config mapping: ``sections`` (plain values, in the schema's order) and the
        graph section of :func:`~kestrel_core.graph._record.graph_section`, checked by the
        config schema and :meth:`validate`."""
        from kestrel_core.config._schema import TOP_KEYS, schema_problems

        if "graph" in sections:
            raise ConfigError(
                "graph: the graph is this Graph's nodes; give only the other sections "
                "(buffer=, budget=, sample=, …)"
            )
        plain = {k: record_value(_section(v), k) for k, v in sections.items() if v is not None}
        self.validate()
        plain["graph"] = graph_section(self, folder)
        problems = schema_problems(plain)
        if len(problems) > 1:  # as load_config says them
            lines = "\n".join(f"  {p}" for p in problems)
            raise ConfigError(f"{len(problems)} problems in the config:\n{lines}")
        if problems:
            raise ConfigError(problems[0])
        order = {key: i for i, key in enumerate(TOP_KEYS)}
        return dict(sorted(plain.items(), key=lambda kv: order.get(kv[0], len(order))))

    def validate(self) -> Graph:
        """Check references, cycles and node roles; returns the graph.

        Raises:
            GraphError: listing every problem, one per line, each starting with its key path,
                e.g. ``graph.x.parents[0]: unknown node 'thta' (did you mean 'theta'?)``.
        """
        problems = _topology.structure_problems(self._nodes)
        if not self._nodes:
            problems.append("graph: no nodes")
        if problems:
            raise GraphError(_join(problems))
        return self

    @property
    def nodes(self) -> dict[str, Node]:
        """Nodes by name, in the order they were added (config order)."""
        return dict(self._nodes)

    @property
    def forward_order(self) -> list[str]:
        """Names in topological order of ``parents`` (ties in config order).

        Raises:
            GraphError: the parents form a cycle.
        """
        return _topology.forward_order(self._nodes)

    @property
    def inference_order(self) -> list[str]:
        """Observed nodes, then latents after their evidence, with deterministic intermediates
        between them (scaffolds are not inference dependencies).

        Raises:
            GraphError: a latent's evidence depends on the latent itself.
        """
        return _topology.inference_order(self._nodes)

    @property
    def latents(self) -> list[str]:
        """Names of the nodes with an estimator, in config order."""
        return [n for n, node in self._nodes.items() if node.estimator is not None]

    @property
    def observations(self) -> dict[str, np.ndarray]:
        """``{name: x_o}`` of the observed nodes; arrays of shape ``D``, read-only."""
        return {n: node.observed for n, node in self._nodes.items() if node.observed is not None}

    def fit_observation(self, name: str, sample_shape: Iterable[int]) -> np.ndarray:
        """Fit node ``name``'s observation to its per-sample shape ``D``, once it is known.

        The one rule of :func:`~kestrel_core.check_observation`: an observation of
        shape ``D`` is kept; one of shape ``(1, *D)`` is replaced by its only row, with a
        :class:`UserWarning` naming both shapes (so every later step — the observation saved
        in the run, the conditions of the estimators — sees ``D``, never ``(1, 1, *D)``);
        anything else is refused.

        Args:
            name: an observed node. sample_shape: ``D``, e.g. from a dry run's output.

        Returns:
            The node's observation, now of shape ``D``.

        Raises:
            ShapeError: several observations (``(k, *D)``, k > 1) or another shape; the message
                names the node and both shapes.
            GraphError: no such node, or it has no observation.
        """
        node = self[name]
        if node.observed is None:
            raise GraphError(f"graph.{name}: node {name!r} has no observation to fit")
        fitted = check_observation(name, node.observed, tuple(sample_shape))
        if fitted.shape != node.observed.shape:
            self._nodes[name] = dataclasses.replace(node, observed=fitted)
        return fitted

    def __getitem__(self, name: str) -> Node:
        try:
            return self._nodes[name]
        except KeyError:
            raise GraphError(unknown("node", name, self._nodes)) from None

    def __contains__(self, name: object) -> bool:
        return name in self._nodes

    def __iter__(self) -> Iterator[str]:
        return iter(self._nodes)

    def __len__(self) -> int:
        return len(self._nodes)

    def __repr__(self) -> str:
        return f"Graph({', '.join(self._nodes)})"

    def describe(self) -> str:
        """Text of the graph: one line per node in forward order, then a summary line.

        Each line shows the edges ``parents → node``, ``(observed, shape D)``, the simulator
        target, ``← evidence`` and the estimator target. Example (05)::

            theta                        ~ kestrel_core.Product  ← x  [estimator kestrel_torch.GaussianPosterior; scaffolds mu]
            theta → mu                   ~ model.Signal
            mu → x  (observed (1000,))   ~ model.Noise
            Nodes: 3 | Observed: x | Estimators: theta

        Raises:
            GraphError: the parents form a cycle.
        """
        rows = []
        notes: list[str] = []
        for name in self.forward_order:
            node = self._nodes[name]
            left = f"{', '.join(node.parents)} → {name}" if node.parents else name
            if node.observed is not None:
                shape = tuple(node.observed.shape)
                left += f"  (observed {shape})"
                if len(shape) > 1 and shape[0] == 1:  # told now, settled by the dry run
                    notes.append(
                        f"note: node {name!r}: observation of shape {shape}; if its simulator's "
                        f"per-sample shape is {shape[1:]}, the leading axis of 1 is dropped "
                        "(with a warning) when the graph is first simulated (launch, simulate)"
                    )
            right = f"~ {node.simulator.target_name}"
            if node.evidence:
                right += f"  ← {', '.join(node.evidence)}"
            extra = []
            if node.estimator is not None:
                extra.append(f"estimator {node.estimator.target_name}")
            if node.scaffolds:
                extra.append(f"scaffolds {', '.join(node.scaffolds)}")
            if node.auto_actors:
                extra.append("actors: auto")
            elif node.num_actors > 1:
                extra.append(f"{node.num_actors} actors")
            if extra:
                right += f"  [{'; '.join(extra)}]"
            rows.append((left, right))
        width = max((len(left) for left, _ in rows), default=0)
        lines = [f"{left.ljust(width)}  {right}" for left, right in rows]
        observed = ", ".join(self.observations) or "none"
        latents = ", ".join(self.latents) or "none"
        lines.append(f"Nodes: {len(self._nodes)} | Observed: {observed} | Estimators: {latents}")
        return "\n".join(lines + notes)


def _section(value: Any) -> Any:
    """A section given as one of the config's dataclasses (or a mapping of them) as a mapping."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _section(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {k: _section(v) for k, v in value.items()}
    return value


def _yaml_text(data: Mapping[str, Any]) -> str:
    """YAML as one writes it by hand: a list of numbers (a prior entry with its ``{repeat:
    k}``, a row of a matrix) and a mapping of scalars on one line."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def scalar(v: Any) -> bool:
        return v is None or isinstance(v, (str, bool, int, float))

    def flat(v: Any) -> bool:
        return scalar(v) or (isinstance(v, dict) and all(map(scalar, v.values())))

    def sequence(dumper: yaml.SafeDumper, items: list) -> yaml.Node:
        style = True if all(map(flat, items)) else None
        return dumper.represent_sequence("tag:yaml.org,2002:seq", items, flow_style=style)

    Dumper.add_representer(list, sequence)
    return yaml.dump(
        dict(data), Dumper=Dumper, sort_keys=False, allow_unicode=True, default_flow_style=None
    )


def _join(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems:\n" + "\n".join(f"  {p}" for p in problems)
