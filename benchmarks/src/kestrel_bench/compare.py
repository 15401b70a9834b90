"""Kestrel against sbi's NPE on the reference tasks: same simulations, same machine, one table.

    hatch run bench:compare                                  # 07, 08, 09 at 10 000 simulations
    hatch run bench:compare --tasks 07_two_moons --simulations 1000 --seeds 1 2

For every task (``examples/<task>``: its simulator ``model.py``, its observation and reference
posterior samples ``data/obs.npz``), every seed and every tool, one fresh Python process:

- ``kestrel``: ``kestrel.launch`` of the example's ``config.yml`` (a FlowPosterior with
  proposals, on a local Ray) with its buffer scaled to the budget: a tenth of the simulations
  for training and a tenth for validation from the prior, then a hundredth from the current
  proposal per epoch until nine tenths are training samples; ``budget.simulations`` set to the
  budget. The wall time runs from the call to ``launch`` (Ray's start included) to the
  posterior samples on disk.
- ``kestrel-amortized``: the example's ``amortized.yml`` where it has one (else its
  ``config.yml``), launched with ``amortized: true`` and every training sample simulated from
  the prior at the start (the setting of amortised NPE), the budget scaled as above.
- ``sbi``: sbi's ``NPE`` (Greenberg et al. 2019; sbi 0.27, its default density estimator and
  training loop, ``torch.set_num_threads(--threads)``) on the same number of prior simulations of
  the same simulator, from simulation to the posterior samples.

Each posterior sample set (``--samples``, default 10 000) is scored against the task's
reference samples by :func:`kestrel_core.c2st` (0.5 is perfect; ``--c2st early-stopping``: sbi's
classifier variant, minutes instead of an hour a score in 10 dimensions); scoring is not timed. The
table (task, tool, seed, simulations, epochs, wall time, C2ST) is printed as Markdown, and
``--json FILE`` writes the rows.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
TOOLS = ("kestrel", "kestrel-amortized", "sbi")


@dataclass(frozen=True)
class Task:
    """A reference task: its simulator class in ``model.py`` and its prior for sbi.

    ``prior`` is ``("uniform", low, high)`` per dimension or ``("normal", mean, std)``.
    """

    simulator: str
    dim: int
    prior: tuple[str, float, float]
    kwargs: tuple[tuple[str, Any], ...] = ()


TASKS = {
    "07_two_moons": Task("TwoMoons", 2, ("uniform", -1.0, 1.0)),
    "08_slcp": Task("SLCP", 5, ("uniform", -3.0, 3.0)),
    "09_gaussian_linear": Task(
        "GaussianNoise", 10, ("normal", 0.0, 0.1**0.5), (("variance", 0.1),)
    ),
}


@dataclass
class Row:
    """One launch: wall time in seconds from the first simulation to the posterior samples."""

    task: str
    tool: str
    seed: int
    simulations: int
    epochs: int
    wall_s: float
    c2st: float


def buffer_overrides(simulations: int, amortized: bool) -> list[str]:
    """The config overrides that give an example's launch a budget of ``simulations``.

    Raises:
        ValueError: fewer than 100 simulations (a hundredth per round would be 0).
    """
    if simulations < 100:
        raise ValueError(f"--simulations: at least 100 expected, got {simulations}")
    tenth = simulations // 10
    train = simulations - tenth
    out = [
        f"budget.simulations={simulations}",
        f"buffer.validation_samples={tenth}",
        f"buffer.max_samples={train}",
        f"buffer.simulate_count={simulations // 100}",
    ]
    if amortized:
        out += [f"buffer.min_samples={train}", "graph.theta.estimator.amortized=true"]
    else:
        out.append(f"buffer.min_samples={tenth}")
    return out


def load_model(task: str) -> Any:
    """The task's ``model.py`` as a module (examples/<task>/model.py)."""
    path = EXAMPLES / task / "model.py"
    spec = importlib.util.spec_from_file_location(f"kestrel_compare_{task}", path)
    if spec is None or spec.loader is None:
        raise FileNotFoundError(f"{task}: no simulator at {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def config_file(task: str, amortized: bool) -> Path:
    """The example's config: its ``amortized.yml`` for an amortized launch where it has one
    (settings tuned for training on prior draws), else its ``config.yml``."""
    folder = EXAMPLES / task
    if amortized and (folder / "amortized.yml").is_file():
        return folder / "amortized.yml"
    return folder / "config.yml"


def observation(task: str) -> tuple[np.ndarray, np.ndarray]:
    """The task's observation ``x`` and its reference posterior samples ``(n, dim)``."""
    with np.load(EXAMPLES / task / "data" / "obs.npz") as data:
        return data["x"], data["reference_samples"]


def run_kestrel(
    task: str,
    simulations: int,
    seed: int,
    n: int,
    amortized: bool,
    extra: list[str],
    variant: str = "benchmark",
) -> Row:
    """Launch the example with Kestrel (``extra``: more config overrides, applied last); the
    row of its posterior samples."""
    from kestrel import launch

    overrides = buffer_overrides(simulations, amortized) + [f"sample.posterior.n={n}", *extra]
    with tempfile.TemporaryDirectory(prefix=f"kestrel-compare-{task}-") as run_dir:
        start = time.monotonic()
        result = launch(config_file(task, amortized), run_dir, overrides=overrides, seed=seed)
        wall = time.monotonic() - start
        files = sorted(Path(run_dir).glob("samples/posterior/*/0*.npz"))
        with np.load(files[-1]) as data:
            theta = data["theta"].reshape(-1, TASKS[task].dim)
        tool = "kestrel-amortized" if amortized else "kestrel"
        epochs = int(result.epochs["theta"])
        return Row(
            task, tool, seed, int(result.simulated), epochs, wall, score(task, theta, variant)
        )


def sbi_prior(task: Task) -> Any:
    """The task's prior as a torch distribution over ``(dim,)`` float32."""
    import torch
    from sbi.utils import BoxUniform

    kind, a, b = task.prior
    if kind == "uniform":
        return BoxUniform(torch.full((task.dim,), a), torch.full((task.dim,), b))
    return torch.distributions.MultivariateNormal(
        torch.full((task.dim,), a), covariance_matrix=b**2 * torch.eye(task.dim)
    )


def run_sbi(
    task: str, simulations: int, seed: int, n: int, threads: int, variant: str = "benchmark"
) -> Row:
    """sbi's NPE on ``simulations`` prior simulations; the row of its posterior samples."""
    import torch
    from sbi.inference import NPE
    from torch.utils.tensorboard import SummaryWriter

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    spec = TASKS[task]
    model = load_model(task)
    simulator = getattr(model, spec.simulator)(**dict(spec.kwargs))
    x_o, _ = observation(task)
    start = time.monotonic()
    prior = sbi_prior(spec)
    theta = prior.sample((simulations,))
    rng = np.random.default_rng(seed)
    x = simulator.simulate_batch(simulations, theta.numpy().astype(np.float64), rng)
    with tempfile.TemporaryDirectory(prefix="kestrel-compare-sbi-") as logs:
        # sbi logs to TensorBoard, by default into ./sbi-logs
        writer = SummaryWriter(log_dir=logs)
        inference = NPE(prior=prior, summary_writer=writer, show_progress_bars=False)
        inference.append_simulations(theta, torch.as_tensor(x, dtype=torch.float32))
        inference.train()
        writer.close()
    posterior = inference.build_posterior()
    x_obs = torch.as_tensor(np.asarray(x_o, dtype=np.float32).reshape(1, -1))
    samples = posterior.sample((n,), x=x_obs, show_progress_bars=False).numpy()
    wall = time.monotonic() - start
    epochs = int(inference.summary["epochs_trained"][-1])
    return Row(task, "sbi", seed, simulations, epochs, wall, score(task, samples, variant))


def score(task: str, theta: np.ndarray, variant: str = "benchmark") -> float:
    """C2ST of posterior samples ``(m, dim)`` against the task's reference samples
    (``variant``: ``"benchmark"`` or ``"early-stopping"``, see :func:`kestrel_core.c2st`)."""
    from kestrel_core import c2st

    _, reference = observation(task)
    m = min(len(theta), len(reference))
    return float(c2st(reference[:m], theta[:m], seed=1, early_stopping=variant == "early-stopping"))


def run_one(tool: str, task: str, args: argparse.Namespace, seed: int) -> Row:
    """One launch of one tool in this process."""
    if tool == "sbi":
        return run_sbi(task, args.simulations, seed, args.samples, args.threads, args.c2st)
    amortized = tool == "kestrel-amortized"
    return run_kestrel(task, args.simulations, seed, args.samples, amortized, args.set, args.c2st)


def run_isolated(tool: str, task: str, args: argparse.Namespace, seed: int) -> Row:
    """:func:`run_one` in a fresh Python process (its own Ray, its own torch threads).

    Raises:
        RuntimeError: the process failed (its stderr's tail in the message).
    """
    cmd = [sys.executable, "-m", "kestrel_bench.compare", "--one", tool, task]
    cmd += ["--simulations", str(args.simulations), "--seeds", str(seed)]
    cmd += ["--samples", str(args.samples), "--threads", str(args.threads)]
    cmd += [f"--set={override}" for override in args.set] + ["--c2st", args.c2st]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    if done.returncode != 0:
        raise RuntimeError(f"{tool} on {task} (seed {seed}) failed:\n{done.stderr[-3000:]}")
    return Row(**json.loads(done.stdout.strip().splitlines()[-1]))


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| task | tool | seed | simulations | epochs | wall time | C2ST |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.task} | {r.tool} | {r.seed} | {r.simulations} | {r.epochs} "
            f"| {r.wall_s:.0f} s | {r.c2st:.3f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", choices=sorted(TASKS), default=sorted(TASKS))
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument("--simulations", type=int, default=10_000, help="budget per launch")
    parser.add_argument("--seeds", type=int, nargs="+", default=[1])
    parser.add_argument("--samples", type=int, default=10_000, help="posterior samples scored")
    parser.add_argument("--threads", type=int, default=2, help="torch threads of sbi")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a config override of Kestrel's launches (repeatable)",
    )
    parser.add_argument(
        "--c2st",
        choices=("benchmark", "early-stopping"),
        default="benchmark",
        help="the C2ST classifier: the benchmark's, or sbi's early-stopping variant (10-D tasks)",
    )
    parser.add_argument("--json", default=None, help="write the rows to this file")
    parser.add_argument("--one", nargs=2, metavar=("TOOL", "TASK"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        tool, task = args.one
        row = run_one(tool, task, args, args.seeds[0])
        print("\n" + json.dumps(asdict(row)))
        return 0
    rows = []
    for task in args.tasks:
        for seed in args.seeds:
            for tool in args.tools:
                rows.append(run_isolated(tool, task, args, seed))
                r = rows[-1]
                print(f"{task} {tool} seed {seed}: {r.wall_s:.0f} s, C2ST {r.c2st:.3f}", flush=True)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
