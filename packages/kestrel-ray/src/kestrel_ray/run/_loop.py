"""The launch loop: train every estimator while simulations keep arriving.

The loop (the driver handles ObjectRefs only; data moves between actors and the store):

1. load and check the config before Ray starts (``check_targets=("simulator", "estimator")``);
   write ``RUN/config.yml`` (a resume reads that file instead of the given config);
2. start or join Ray, deploy one actor per node, load saved weights (resume);
3. simulate ``min_samples + validation_samples`` from the prior, in chunks, and append;
4. start training on every estimator node;
5. while training runs, every ``simulate_interval`` seconds: draw ``simulate_count`` latents
   from the proposals (fewer, down to none, when ``simulate_when_full`` is false and the
   buffer is full), simulate the rest of the graph from them and append — at most one append
   in flight; poll the training calls every ~50 ms, so an actor's error surfaces at once;
6. when every estimator has stopped (or on Ctrl-C / timeout, after asking them to stop):
   save, then draw ``sample.posterior.n`` posterior samples (and ``sample.ppd.n``).

Rows with a NaN or ±inf in any key are dropped before an append and counted per node (K09).
"""

from __future__ import annotations

import time
import traceback
from typing import Any

import ray
from kestrel_core import KestrelError, RunConfig

from .._finite import drop_nonfinite, merge_counts
from ._initial import append_initial_samples
from ._progress import Snapshot
from .._resources import unwrap_error
from ._result import RunError, RunResult
from ._rundir import RunDir
from ._sampling import draw_samples, shapes_text
from ._session import cluster_nodes, deploy_run
from ._stop import StopControl
from .._store import appended

__all__ = ["Launcher", "INITIAL_CHUNK"]

#: rows per call of the initial prior simulation
INITIAL_CHUNK = 4096
_POLL = 0.05  # seconds: how long one ray.wait on the training calls may block
_STATUS_EVERY = 0.5  # seconds between progress polls


class Launcher:
    """One launch: its phases (deploy, resume, initial simulation, training loop, save, sample)."""

    def __init__(self, cfg: RunConfig, run: RunDir, seed: int, *, auto_sample: bool):
        self.cfg, self.run_dir, self.seed = cfg, run, seed
        self.buffer = cfg.buffer
        self.auto_sample = auto_sample
        self.log: Any = None
        self.dg: Any = None
        self.result = RunResult(run.root, "running", seed, config=cfg)
        self.t0 = time.monotonic()
        self.phase = "starting"
        self.stats: dict[str, int] = {}
        self.rates: list[tuple[float, int]] = []
        self.progress: Any = None
        self.cluster: dict[str, dict[str, float]] = {}
        self._last_status = 0.0
        self._node_status: dict[str, dict[str, Any]] = {}

    # -- the run -------------------------------------------------------------------------------
    def run(self, stop: StopControl, progress: Any) -> RunResult:
        self.stop, self.progress = stop, progress
        cfg, log = self.cfg, self.log
        self._write_status()
        log.info("launch: run %s, seed %d, nodes %s, estimators %s", self.run_dir.root, self.seed,
                 list(cfg.graph.nodes), cfg.graph.latents)
        progress.start()
        try:
            self.dg, self.result.placement = deploy_run(cfg, self.run_dir, seed=self.seed, buffer=self.buffer)
            self.cluster = cluster_nodes()
            self._write_status()
            self._resume()
            self._initial_simulation()
            if not stop.requested:
                self._train()
            self._finish()
        except KeyboardInterrupt:
            self._end("aborted", "second Ctrl-C")
            raise
        except KestrelError as err:
            self._end("failed", f"{type(err).__name__}: {err}")
            if isinstance(err, RunError):
                err.result = self.result
            raise
        except Exception as err:  # a user exception from a node: add what the driver knows
            self._end("failed", f"{type(err).__name__}: {err}")
            raise RunError(_describe(err), result=self.result) from err
        finally:
            progress.stop()
            if self.dg is not None:
                self.dg.shutdown()
        return self.result

    def _end(self, status: str, reason: str) -> None:
        self.result.status, self.result.reason = status, reason
        self.result.wall_time = time.monotonic() - self.t0
        self._write_status()
        if self.log is not None:
            self.log.error("launch %s: %s", status, reason.splitlines()[0] if reason else "")

    def _write_status(self) -> None:
        r = self.result
        self.run_dir.write_status({
            "status": r.status, "reason": r.reason, "seed": r.seed, "resumed": r.resumed,
            "epochs": r.epochs, "samples": r.samples, "simulated": r.simulated, "nonfinite": r.nonfinite,
            "buffer": self.stats, "wall_time": round(time.monotonic() - self.t0, 3),
            "placement": r.placement, "cluster": self.cluster,
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S"),
        })

    # -- phases --------------------------------------------------------------------------------
    def _estimator_files(self, node: str, method: str) -> str:
        """Call the node actor's ``load`` or ``save`` on its run folder; returns the folder.

        Raises:
            KestrelError: the actor's error, naming the node (see :func:`unwrap_error`).
        """
        directory = self.run_dir.node_dir(node)
        try:
            ray.get(getattr(self.dg.handle(node).actor, method).remote(directory))
        except ray.exceptions.RayError as err:
            raise unwrap_error(err, node, f"{method}({directory!r})") from err
        return directory

    def _resume(self) -> None:
        for node in self.cfg.graph.latents:
            if not self.run_dir.has_weights(node):
                continue
            self._estimator_files(node, "load")
            self.result.resumed.append(node)
        if self.result.resumed:
            self.log.info("resume: loaded saved weights of %s", self.result.resumed)
        else:
            self.log.info("starting fresh (no saved weights in %s)", self.run_dir.graph)

    def _initial_simulation(self) -> None:
        self.phase = "initial simulation"
        total = self.buffer.min_samples + self.buffer.validation_samples
        loaded = 0
        if self.buffer.initial_samples_path:
            loaded = append_initial_samples(self.dg, self.buffer.initial_samples_path)
            self.result.simulated += loaded
            self.log.info("initial samples: %d loaded from %s", loaded, self.buffer.initial_samples_path)
        left = max(0, total - loaded)
        self.log.info("initial simulation: %d samples from the prior", left)
        while left > 0 and not self.stop.requested:
            n = min(INITIAL_CHUNK, left)
            trace = self.dg.sample(n)
            self._append(trace, "initial simulation", wait=True)
            left -= n
            self._report(force=True)

    def _train(self) -> None:
        self.phase = "training"
        futures = self.dg.start_training()
        pending = {ref: node for node, ref in futures.items()}
        self.log.info("training: started on %s", list(futures))
        interval = float(self.buffer.simulate_interval)
        next_round = time.monotonic() + interval
        append_ref = None
        stopping = False
        while pending:
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=_POLL)
            for ref in done:
                node = pending.pop(ref)
                try:
                    status = ray.get(ref)
                except ray.exceptions.RayError as err:
                    self.dg.request_stop()
                    raise self._node_error(err, node) from err
                self.result.epochs[node] = int((status.get("estimator") or {}).get("epoch", 0))
                self.log.info("node %s: training ended (%s, epoch %s)", node,
                              (status.get("estimator") or {}).get("state"), self.result.epochs[node])
            if self.stop.requested and not stopping:
                stopping = True
                self.phase = "stopping"
                self.log.info("stop: %s; asking the estimators to stop after their current step", self.stop.reason)
                self.dg.request_stop()
            if append_ref is not None and _ready(append_ref):
                self._finish_append(append_ref)
                append_ref = None
            if pending and not stopping and append_ref is None and time.monotonic() >= next_round:
                next_round = time.monotonic() + interval
                n = self._round_size()
                if n > 0:
                    trace = self.dg.simulate_from_proposal(n)
                    append_ref = self._append(trace, "resimulation", wait=False)
            self._report()
        if append_ref is not None:
            self._finish_append(append_ref)

    def _finish(self) -> None:
        status = "interrupted" if self.stop.requested else "completed"
        self.phase = "saving"
        self._save()
        self._report(force=True)
        if self.auto_sample:
            self.phase = "sampling"
            for mode in ("posterior", "ppd"):
                entry = self.cfg.sample[mode]
                if not entry.n:
                    if mode == "posterior":
                        self.log.info("sampling: sample.posterior.n is not set; no posterior samples drawn")
                    continue
                try:
                    arrays = draw_samples(self.dg, mode, entry.n, entry)
                except KestrelError as err:
                    if status == "completed":
                        raise
                    self.log.warning("sampling %s skipped: %s", mode, err)
                    continue
                path = self.run_dir.write_samples(mode, arrays)
                self.result.samples[mode] = path
                self.log.info("sampling: %d %s samples → %s (%s)", entry.n, mode, path, shapes_text(arrays))
        self.result.status = status
        self.result.reason = self.stop.reason
        self.result.wall_time = time.monotonic() - self.t0
        self._write_status()
        self.log.info("launch %s in %.1f s: epochs %s, %d samples simulated%s", status, self.result.wall_time,
                      self.result.epochs, self.result.simulated,
                      f", non-finite dropped {self.result.nonfinite}" if any(self.result.nonfinite.values()) else "")

    def _save(self) -> None:
        status = self._poll_status(timeout=10.0)
        for node in self.cfg.graph.latents:
            est = (status.get(node) or {}).get("estimator") or {}
            self.result.epochs[node] = int(est.get("epoch", self.result.epochs.get(node, 0)))
            if not est.get("epoch"):
                self.log.warning("node %s: no epoch finished; nothing to save", node)
                continue
            directory = self._estimator_files(node, "save")
            self.run_dir.mark_saved(node, {"epoch": self.result.epochs[node], "seed": self.seed})
            self.log.info("node %s: weights saved to %s (epoch %d)", node, directory, self.result.epochs[node])

    # -- helpers -------------------------------------------------------------------------------
    def _round_size(self) -> int:
        count = int(self.buffer.simulate_count)
        if self.buffer.simulate_when_full:
            return count
        stats = ray.get(self.dg.store.stats.remote())
        self.stats = stats
        return max(0, min(count, int(self.buffer.max_samples) - int(stats.get("training", 0))))

    def _append(self, trace: Any, what: str, *, wait: bool) -> Any:
        clean, counts = drop_nonfinite(trace, what)
        if any(counts.values()):
            self.result.nonfinite = merge_counts(self.result.nonfinite, counts)
            self.log.warning("%s: dropped %d of %d samples with non-finite values (per node: %s)", what,
                             trace.n - clean.n, trace.n, {k: v for k, v in counts.items() if v})
        ref = self.dg.store.append_blocks.remote(clean.blocks())
        if wait:
            self._finish_append(ref)
            return None
        return ref

    def _finish_append(self, ref: Any) -> None:
        ids, notes = appended(ref)
        for note in notes:
            self.log.warning("buffer: %s", note)
        self.result.simulated += len(ids)
        self.rates.append((time.monotonic(), self.result.simulated))

    def _node_error(self, err: BaseException, node: str) -> RunError:
        cause = unwrap_error(err, node, "train")
        remote = getattr(err, "traceback_str", None) or "".join(traceback.format_exception(err))
        message = f"node {node!r} failed while training: {type(cause).__name__}: {cause}"
        message += f"\n\nTraceback in the actor of node {node!r}:\n{remote.rstrip()}"
        self.result.status = "failed"
        return RunError(message, node=node, result=self.result)

    def _poll_status(self, timeout: float = 2.0) -> dict[str, Any]:
        try:
            status = self.dg.status(timeout=timeout)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError):
            return {}
        self.stats = dict(status.get("_store") or {})
        return status

    def _report(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_status < _STATUS_EVERY:
            return
        self._last_status = now
        status = self._poll_status()
        nodes = {m: dict((status.get(m) or {}).get("estimator") or self._node_status.get(m) or {})
                 for m in self.cfg.graph.latents}
        self._node_status.update({m: v for m, v in nodes.items() if v})
        for m, st in nodes.items():
            if st.get("epoch") is not None:
                self.result.epochs[m] = int(st["epoch"])
        self.rates = [(t, c) for t, c in self.rates if now - t <= 10.0]
        rate = 0.0
        if len(self.rates) >= 2 and self.rates[-1][0] > self.rates[0][0]:
            rate = (self.rates[-1][1] - self.rates[0][1]) / (self.rates[-1][0] - self.rates[0][0])
        self.progress.update(Snapshot(now - self.t0, self.phase, nodes, dict(self.stats), self.result.simulated,
                                      rate, dict(self.result.nonfinite)))


def _describe(err: BaseException) -> str:
    """One error of a node call: its text, the notes naming the node, the actor's traceback."""
    lines = [f"{type(err).__name__}: {err}", *getattr(err, "__notes__", [])]
    remote = getattr(err.__cause__, "traceback_str", None)
    if remote:
        lines += ["", "Traceback in the actor:", remote.rstrip()]
    return "\n".join(lines)


def _ready(ref: Any) -> bool:
    done, _ = ray.wait([ref], timeout=0)
    return bool(done)
