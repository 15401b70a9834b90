"""The SBI benchmark's tasks as `bench:compare` runs them: a task is a folder and a prior.

A task (Lueckmann et al. 2021, ``sbibm`` 1.1) is:

- a **folder** holding Kestrel's ``config.yml`` (a FlowPosterior with proposals) and, where the
  amortised setting needs other training settings, ``amortized.yml``, plus the simulator in
  ``model.py`` (the class the config names; a task whose simulator another task has names that
  task's folder in ``paths.imports`` and :attr:`Task.model_folder`) — ``examples/07_two_moons`` … ``09_gaussian_linear``
  for the example tasks, ``benchmarks/tasks/<name>`` for the others;
- its **prior** again as a torch distribution for sbi (:func:`sbi_prior`);
- its **observations 1-10 and reference posterior samples**, read from the benchmark's own
  package (:mod:`kestrel_bench.sbibm_files`).

Adding a task of the benchmark is a folder with those three files and one line in
:data:`TASKS`; nothing in the estimators knows the task.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Task", "TASKS", "ALIASES", "task", "load_model", "sbi_prior"]

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples"
BENCH_TASKS = ROOT / "benchmarks" / "tasks"

#: one dimension of a prior: ``("uniform", low, high)``, ``("normal", mean, std)`` or
#: ``("lognormal", mu, sigma)`` (of log theta)
Dim = tuple[str, float, float]


@dataclass(frozen=True)
class Task:
    """One benchmark task.

    Attributes:
        name: the benchmark's name (``sbibm``'s folder name, e.g. ``"two_moons"``).
        folder: the folder of ``config.yml`` / ``amortized.yml`` / ``model.py``.
        simulator: the simulator class in the task's ``model.py`` (``simulate_batch(n, theta,
            rng)``).
        prior: one :data:`Dim` per parameter, as the config's ``Product`` prior.
        kwargs: the simulator's keyword arguments (as in the config).
    """

    name: str
    folder: Path
    simulator: str
    prior: tuple[Dim, ...]
    kwargs: tuple[tuple[str, Any], ...] = ()
    #: the folder of the simulator's ``model.py`` when it is not ``folder`` (the config's
    #: ``paths.imports`` names the same one)
    model_folder: Path | None = None

    @property
    def dim(self) -> int:
        """The number of parameters."""
        return len(self.prior)


TASKS = {
    t.name: t
    for t in (
        Task("two_moons", EXAMPLES / "07_two_moons", "TwoMoons", (("uniform", -1.0, 1.0),) * 2),
        Task("slcp", EXAMPLES / "08_slcp", "SLCP", (("uniform", -3.0, 3.0),) * 5),
        Task(
            "gaussian_linear",
            EXAMPLES / "09_gaussian_linear",
            "GaussianNoise",
            (("normal", 0.0, 0.1**0.5),) * 10,
            (("variance", 0.1),),
        ),
        Task(
            "gaussian_linear_uniform",
            BENCH_TASKS / "gaussian_linear_uniform",
            "GaussianNoise",
            (("uniform", -1.0, 1.0),) * 10,
            (("variance", 0.1),),
            model_folder=EXAMPLES / "09_gaussian_linear",  # gaussian_linear's simulator
        ),
        Task(
            "sir",
            BENCH_TASKS / "sir",
            "SIR",
            (("lognormal", -0.916290731874155, 0.5), ("lognormal", -2.0794415416798357, 0.2)),
        ),
    )
}

#: the example folders' names, accepted for the tasks they hold (the commands in RESULTS.md)
ALIASES = {"07_two_moons": "two_moons", "08_slcp": "slcp", "09_gaussian_linear": "gaussian_linear"}


def task(name: str) -> Task:
    """The task called ``name`` (a benchmark name or an :data:`ALIASES` key).

    Raises:
        KeyError: no such task; the message lists the known ones.
    """
    key = ALIASES.get(name, name)
    if key not in TASKS:
        known = ", ".join(sorted(TASKS))
        raise KeyError(f"task {name!r}: expected one of {known} (or {', '.join(ALIASES)})")
    return TASKS[key]


def load_model(spec: Task) -> Any:
    """The task's ``model.py`` as a module.

    Raises:
        FileNotFoundError: the folder has no ``model.py``.
    """
    path = (spec.model_folder or spec.folder) / "model.py"
    module_spec = importlib.util.spec_from_file_location(f"kestrel_compare_{spec.name}", path)
    if module_spec is None or module_spec.loader is None or not path.is_file():
        raise FileNotFoundError(f"{spec.name}: no simulator at {path}")
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return module


def sbi_prior(spec: Task) -> Any:
    """The task's prior as a torch distribution over float32 ``(dim,)`` (sbi's ``BoxUniform``
    for a box, else an independent product)."""
    import torch
    from sbi.utils import BoxUniform

    kinds = {kind for kind, _, _ in spec.prior}
    a = torch.tensor([d[1] for d in spec.prior])
    b = torch.tensor([d[2] for d in spec.prior])
    if kinds == {"uniform"}:
        return BoxUniform(a, b)
    if kinds == {"normal"}:
        return torch.distributions.MultivariateNormal(a, covariance_matrix=torch.diag(b**2))
    if kinds == {"lognormal"}:
        return torch.distributions.Independent(torch.distributions.LogNormal(a, b), 1)
    raise ValueError(f"{spec.name}: a prior mixing {sorted(kinds)} is not supported for sbi")
