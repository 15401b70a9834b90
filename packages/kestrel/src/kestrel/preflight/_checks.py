"""Checks of a run config that ``load_config`` cannot make, done before Ray starts.

* ``ray:`` — its keys are ``ray.init`` keyword arguments: an unknown one (``num_gpu``) is an
  error with a suggestion, instead of a ``TypeError`` from inside ``ray.init``.
* estimators — each node's estimator is constructed once on the driver (construction only
  validates keyword arguments; models are built later, in the node's actor), so a misspelt
  keyword (``num_epochs``) or an out-of-range value fails here, naming the key path, rather
  than when the actor starts; an estimator with a ``check_conditions`` method (kestrel-torch's
  build their embedding with it) also checks the config of its conditions there, so an
  embedding's misspelt keyword or ``_input_`` fails before Ray starts too. After a dry run it
  gets the simulated rows of the node's evidence as well (``rows=``, numpy arrays), and calls
  the embedding once on them: a wrong ``in_features`` or a forward that raises is a
  ``ConfigError`` naming ``graph.<node>.estimator.embedding`` before Ray starts.
* simulators (a launch) — the dry run of kestrel-core (:func:`kestrel.preflight._dryrun.dry_run`):
  every simulator once on two prior draws, in this process, its output checked against the
  node's observation, so a 59-vs-60 simulator or one that raises is blamed by node, ``_target_``
  and the user's file and line before Ray starts. ``dry_run: false`` on a node skips it (and
  its descendants). The per-sample shape it finds settles an observed node's observation
  (:meth:`~kestrel_core.Graph.fit_observation`): one of shape ``(1, *D)`` is used —
  and saved in the run — as ``D``, with a warning, so no later step sees ``(1, 1, *D)``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from kestrel.preflight._dryrun import dry_run as _dry_run
from kestrel_core import ConfigError, KestrelError, Node, RunConfig
from kestrel_core.internal import unknown

__all__ = ["preflight", "ray_init_problems", "estimator_problems"]


def ray_init_problems(ray_kwargs: dict[str, Any]) -> list[str]:
    """Problems with the ``ray`` section (``ray.init`` keyword arguments)."""
    import ray

    params = inspect.signature(ray.init).parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        known = [name for name, p in params.items() if p.kind is not inspect.Parameter.VAR_KEYWORD]
    else:
        known = list(params)
    # ray.init takes private ``_name`` options through **kwargs
    return [
        f"ray.{key}: {unknown('ray.init argument', key, known)}"
        for key in ray_kwargs
        if key not in known and not str(key).startswith("_")
    ]


def estimator_problems(
    config: RunConfig, outputs: Mapping[str, Mapping[str, Any]] | None = None
) -> list[str]:
    """Problems found by constructing each node's estimator from its config.

    With ``outputs`` (the dry run's fields per node), an estimator's ``check_conditions`` also
    gets ``rows``: node → numpy array ``(k, *D)`` of the dry run's values, so that it can call
    its embedding on them; numpy only, the estimator converts.
    """
    problems = []
    imports = tuple(config.paths.imports or ())
    for name in config.graph.latents:
        node = config.graph[name]
        path = f"graph.{name}.estimator"
        assert node.estimator is not None  # a latent is a node with an estimator
        try:
            estimator = node.estimator.build()
        except (TypeError, ValueError, KestrelError) as err:
            problems.append(f"{path}: {type(err).__name__}: {err}")
            continue
        # optional: an estimator that can check its conditions' config (its embedding)
        check = getattr(estimator, "check_conditions", None)
        if check is None:
            continue
        kwargs: dict[str, Any] = {}
        if outputs is not None:
            if not _takes_rows(check):
                continue
            rows = {c: outputs[c]["value"] for c in conditions(node) if c in outputs}
            if not all(c in rows for c in node.evidence):
                continue  # an evidence node the dry run did not check: nothing to call on
            kwargs["rows"] = rows
        try:
            check(node.evidence, node.scaffolds, path=path, imports=imports, **kwargs)
        except KestrelError as err:
            problems.append(str(err))
    return problems


def preflight(
    config: RunConfig, *, dry_run: bool = False, outputs: dict[str, dict[str, Any]] | None = None
) -> list[str]:
    """Run every check; raise one :class:`ConfigError` listing all problems.

    Args:
        config: the run's :class:`~kestrel_core.RunConfig`.
        dry_run: also dry-run the simulators (after the config checks passed).
        outputs: filled with the dry run's output fields per node (see
            :func:`kestrel.preflight._dryrun.dry_run`); the launch sizes its buffer from them.

    Returns:
        The dry run's notes on nodes it did not check (empty without ``dry_run``).

    Raises:
        ConfigError: unknown ``ray.init`` arguments, or an estimator that cannot be built.
        GraphError: (dry run) a simulator's output does not fit its observation.
        SimulatorError: (dry run) a simulator raised, with the user's frames of the traceback.
    """
    problems = ray_init_problems(dict(config.ray)) + estimator_problems(config)
    if problems:
        raise ConfigError(_joined(problems))
    if not dry_run:
        return []
    outputs = {} if outputs is None else outputs
    notes = _dry_run(config.graph, outputs=outputs)
    for name, fields in outputs.items():  # the simulator's shape settles the observation's
        if config.graph.nodes[name].observed is not None:
            config.graph.fit_observation(name, fields["value"].shape[1:])
    problems = estimator_problems(config, outputs)  # the embeddings on the dry run's rows
    if problems:
        raise ConfigError(_joined(problems))
    return notes


def _takes_rows(check: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(check).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == "rows" or p.kind is p.VAR_KEYWORD for p in params)


def conditions(node: Node) -> tuple[str, ...]:
    """A latent node's evidence and scaffolds."""
    return (*node.evidence, *node.scaffolds)


def _joined(problems: list[str]) -> str:
    if len(problems) == 1:
        return problems[0]
    return f"{len(problems)} problems in the config:\n" + "\n".join(f"  {p}" for p in problems)
