"""Kestrel against sbi's NPE on the SBI benchmark's tasks: same simulations, same machine, one table.

    hatch run bench:compare                                   # every task, 10^4 simulations, obs. 1
    hatch run bench:compare --simulations 1000 10000 --observations 1 2 3 4 5 6 7 8 9 10
    hatch run bench:compare --tasks two_moons --simulations 1000 --seeds 1 2

The tasks (:mod:`kestrel_bench.tasks`): two_moons, slcp, gaussian_linear,
gaussian_linear_uniform and sir of the benchmark (Lueckmann et al. 2021, ``sbibm`` 1.1), each
scored on the benchmark's own observations and reference posterior samples
(:mod:`kestrel_bench.sbibm_files`; the rows record the package's version). For every task,
budget, observation, seed and tool, one fresh Python process:

- ``kestrel``: ``kestrel.launch`` of the task's ``config.yml`` (a FlowPosterior with
  proposals, on a local Ray) with its buffer scaled to the budget: a tenth of the simulations
  for training and a tenth for validation from the prior, then a hundredth from the current
  proposal per epoch until nine tenths are training samples; ``budget.simulations`` set to the
  budget and the node ``x`` observed at the benchmark's observation. The wall time runs from the
  call to ``launch`` (Ray's start included) to the posterior samples on disk.
- ``kestrel-amortized``: the task's ``amortized.yml`` where it has one (else its
  ``config.yml``), launched with ``amortized: true`` and every training sample simulated from
  the prior at the start (the setting of amortised NPE), the budget scaled as above.
- ``sbi``: sbi's ``NPE`` (Greenberg et al. 2019; sbi 0.27, its default density estimator and
  training loop, ``torch.set_num_threads(--threads)``) on the same number of prior simulations of
  the same simulator, from simulation to the posterior samples.

Each posterior sample set (``--samples``, default 10 000) is scored against the observation's
reference samples by :func:`kestrel_core.c2st` (0.5 is perfect; ``--c2st early-stopping``: sbi's
classifier variant, minutes instead of an hour a score in 10 dimensions); scoring is not timed.
The rows (task, tool, simulations, observation, seed, epochs, wall time, C2ST) are printed as
Markdown, then their means over observations and seeds per task, tool and budget (the
benchmark's figure); ``--json FILE`` writes the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from kestrel_bench import sbibm_files
from kestrel_bench.tasks import ALIASES, TASKS, Task, load_model, sbi_prior, task

TOOLS = ("kestrel", "kestrel-amortized", "sbi")


@dataclass
class Row:
    """One launch: wall time in seconds from the first simulation to the posterior samples;
    ``reference``: where the reference samples came from (``sbibm <version>``)."""

    task: str
    tool: str
    seed: int
    simulations: int
    epochs: int
    wall_s: float
    c2st: float
    observation: int = 1
    reference: str = ""


def buffer_overrides(simulations: int, amortized: bool) -> list[str]:
    """The config overrides that give a task's launch a budget of ``simulations``.

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


def config_file(spec: Task, amortized: bool) -> Path:
    """The task's config: its ``amortized.yml`` for an amortized launch where it has one
    (settings tuned for training on prior draws), else its ``config.yml``."""
    if amortized and (spec.folder / "amortized.yml").is_file():
        return spec.folder / "amortized.yml"
    return spec.folder / "config.yml"


def reference_source() -> str:
    """``sbibm <version>``: the package the observations and reference samples come from."""
    return f"sbibm {sbibm_files.version()}"


def run_kestrel(
    spec: Task,
    num: int,
    simulations: int,
    seed: int,
    n: int,
    amortized: bool,
    extra: list[str],
    variant: str = "benchmark",
) -> Row:
    """Launch the task with Kestrel on observation ``num`` (``extra``: more config overrides,
    applied last); the row of its posterior samples."""
    from kestrel import launch

    with tempfile.TemporaryDirectory(prefix=f"kestrel-compare-{spec.name}-") as tmp:
        observed = Path(tmp) / "observation.npy"
        np.save(observed, sbibm_files.observation(spec.name, num))
        overrides = buffer_overrides(simulations, amortized)
        overrides += [f"graph.x.observed={observed}", f"sample.posterior.n={n}", *extra]
        run_dir = Path(tmp) / "run"
        start = time.monotonic()
        result = launch(config_file(spec, amortized), run_dir, overrides=overrides, seed=seed)
        wall = time.monotonic() - start
        files = sorted(run_dir.glob("samples/posterior/*/0*.npz"))
        with np.load(files[-1]) as data:
            theta = data["theta"].reshape(-1, spec.dim)
        tool = "kestrel-amortized" if amortized else "kestrel"
        epochs = int(result.epochs["theta"])
        c2st = score(spec, num, theta, variant)
        return Row(
            spec.name,
            tool,
            seed,
            int(result.simulated),
            epochs,
            wall,
            c2st,
            num,
            reference_source(),
        )


def run_sbi(
    spec: Task,
    num: int,
    simulations: int,
    seed: int,
    n: int,
    threads: int,
    variant: str = "benchmark",
) -> Row:
    """sbi's NPE on ``simulations`` prior simulations, observation ``num``; the row of its
    posterior samples."""
    import torch
    from sbi.inference import NPE
    from torch.utils.tensorboard import SummaryWriter

    torch.set_num_threads(threads)
    torch.manual_seed(seed)
    simulator = getattr(load_model(spec), spec.simulator)(**dict(spec.kwargs))
    x_o = sbibm_files.observation(spec.name, num)
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
    c2st = score(spec, num, samples, variant)
    return Row(spec.name, "sbi", seed, simulations, epochs, wall, c2st, num, reference_source())


def score(spec: Task, num: int, theta: np.ndarray, variant: str = "benchmark") -> float:
    """C2ST of posterior samples ``(m, dim)`` against the reference samples of observation
    ``num`` (``variant``: ``"benchmark"`` or ``"early-stopping"``, see
    :func:`kestrel_core.c2st`)."""
    from kestrel_core import c2st

    reference = sbibm_files.reference_samples(spec.name, num)
    m = min(len(theta), len(reference))
    return float(c2st(reference[:m], theta[:m], seed=1, early_stopping=variant == "early-stopping"))


def run_one(tool: str, name: str, args: argparse.Namespace, seed: int) -> Row:
    """One launch of one tool in this process (``args.simulations`` and ``args.observations``:
    their first values)."""
    spec, num, sims = task(name), args.observations[0], args.simulations[0]
    if tool == "sbi":
        return run_sbi(spec, num, sims, seed, args.samples, args.threads, args.c2st)
    amortized = tool == "kestrel-amortized"
    return run_kestrel(spec, num, sims, seed, args.samples, amortized, args.set, args.c2st)


def run_isolated(
    tool: str, name: str, args: argparse.Namespace, seed: int, simulations: int, num: int
) -> Row:
    """:func:`run_one` in a fresh Python process (its own Ray, its own torch threads).

    Raises:
        RuntimeError: the process failed (its stderr's tail in the message).
    """
    cmd = [sys.executable, "-m", "kestrel_bench.compare", "--one", tool, name]
    cmd += ["--simulations", str(simulations), "--seeds", str(seed), "--observations", str(num)]
    cmd += ["--samples", str(args.samples), "--threads", str(args.threads)]
    cmd += [f"--set={override}" for override in args.set] + ["--c2st", args.c2st]
    done = subprocess.run(cmd, capture_output=True, text=True, env=dict(os.environ))
    if done.returncode != 0:
        where = f"{tool} on {name} (observation {num}, {simulations} simulations, seed {seed})"
        raise RuntimeError(f"{where} failed:\n{done.stderr[-3000:]}")
    return Row(**json.loads(done.stdout.strip().splitlines()[-1]))


def table(rows: list[Row]) -> str:
    """The rows as a Markdown table."""
    lines = [
        "| task | tool | seed | simulations | observation | epochs | wall time | C2ST |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r.task} | {r.tool} | {r.seed} | {r.simulations} | {r.observation} | {r.epochs} "
            f"| {r.wall_s:.0f} s | {r.c2st:.3f} |"
        )
    return "\n".join(lines)


def summary(rows: list[Row]) -> str:
    """Mean C2ST and wall time over observations and seeds, per task, tool and budget, as a
    Markdown table (the benchmark's figure is the mean over observations 1-10)."""
    groups: dict[tuple[str, str, int], list[Row]] = defaultdict(list)
    for r in rows:
        groups[(r.task, r.tool, r.simulations)].append(r)
    lines = [
        "| task | tool | simulations | observations | runs | mean C2ST | mean wall time |",
        "|---|---|---|---|---|---|---|",
    ]
    for (name, tool, sims), group in groups.items():
        nums = sorted({r.observation for r in group})
        c2st = float(np.mean([r.c2st for r in group]))
        wall = float(np.mean([r.wall_s for r in group]))
        obs = ", ".join(map(str, nums))
        lines.append(
            f"| {name} | {tool} | {sims} | {obs} | {len(group)} | {c2st:.3f} | {wall:.0f} s |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    names = sorted(TASKS) + sorted(ALIASES)
    parser.add_argument("--tasks", nargs="+", choices=names, default=sorted(TASKS))
    parser.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    parser.add_argument(
        "--simulations", type=int, nargs="+", default=[10_000], help="budgets per launch"
    )
    parser.add_argument(
        "--observations",
        type=int,
        nargs="+",
        default=[1],
        choices=sbibm_files.OBSERVATIONS,
        metavar="N",
        help="the benchmark's observations (1-10) to score",
    )
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
    for sims in args.simulations:
        buffer_overrides(sims, amortized=False)  # a budget too small: refused before any run
    reference = reference_source()  # the benchmark's package missing: refused before any run
    if args.one:
        tool, name = args.one
        row = run_one(tool, name, args, args.seeds[0])
        print("\n" + json.dumps(asdict(row)))
        return 0
    print(f"reference posterior samples and observations: {reference}", flush=True)
    rows = []
    for name in args.tasks:
        for sims in args.simulations:
            for num in args.observations:
                for seed in args.seeds:
                    for tool in args.tools:
                        r = run_isolated(tool, name, args, seed, sims, num)
                        rows.append(r)
                        print(
                            f"{r.task} {tool} {sims} simulations, observation {num}, seed {seed}: "
                            f"{r.wall_s:.0f} s, C2ST {r.c2st:.3f}",
                            flush=True,
                        )
    print(table(rows))
    print()
    print(summary(rows))
    if args.json:
        Path(args.json).write_text(json.dumps([asdict(r) for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
