"""``Program``: a node's simulator that is an external command (a compiled code, a script).

Each call of the command gets its own scratch folder, its inputs (arguments from a template,
an input file or stdin), a seed drawn from the generator Kestrel passes, a time limit, and has
its output read back from a file or from stdout. A failure — a non-zero exit status, the time
limit, an output that cannot be read or has the wrong shape — raises
:class:`~kestrel_core.ProgramError` naming the command, the exit status, the scratch folder
(kept) and the last lines of the command's stderr; ``on_error: skip`` skips the samples it
names as it skips those of a Python simulator that raises.

Shape symbols: n samples of the call, D the node's per-sample shape, D_p a parent's.
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import shutil
import subprocess
import tempfile
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from kestrel_core._errors import ConfigError, ProgramError, ShapeError, SimulatorError
from kestrel_core.execute._blame import USER_TRACEBACK
from kestrel_core.program._process import _Guard, _kill_group, _signal_name, _tail
from kestrel_core.program._spec import (
    _FORMATTER,
    CALL_FIELDS,
    INPUT_FORMATS,
    OUTPUT_FORMATS,
    PROGRAM_TARGETS,
    SEED_MAX,
    STDERR,
    STDIN,
    STDOUT,
    _command,
    _scalars,
    _stream_spec,
    _template_fields,
    _Values,
    absolute_program_paths,
)

__all__ = ["Program", "PROGRAM_TARGETS", "absolute_program_paths", "SEED_MAX"]

#: failures of one Program logged at WARNING (later ones at INFO)
LOUD_FAILURES = 10

_log = logging.getLogger("kestrel_core.program")


class Program:
    """A node's simulator that runs an external command, once per sample or once per chunk.

    Each run of the command gets a fresh scratch folder (under ``scratch``, default the system's
    temporary folder): its input file is written there, it runs there (unless ``cwd`` is
    given), its output is read from there, and the folder is removed when the run succeeds and
    **kept** when it fails (its path is in the error). The command is started without a shell,
    in its own session: at its time limit (or when the calling process is killed, e.g. by the
    node's ``timeout``) the whole process group is killed, a shell script's children too.

    Example config (``sim.sh`` next to ``config.yml``; ``paths.imports`` default to that
    folder, so a run folder's config may run it without ``--trust``)::

        graph:
          x:
            parents: [theta]
            on_error: skip             # a failing run of the command skips its sample
            simulator:
              _target_: kestrel_core.Program
              command: ["./sim.sh", "--theta", "{theta}", "--seed", "{seed}", "--out", "{output}"]
              parents: [theta]         # names of the node's parents in templates and files
              per: sample              # sample (default): one run per sample | chunk
              output: {file: out.txt}  # default {stdout: txt}
              shape: [10]              # the per-sample shape the output must have
              time_limit: 60           # seconds per run; past it the run fails
              env: {OMP_NUM_THREADS: "1"}

    Templates (``command`` words and ``env`` values, Python's ``str.format`` syntax):
    ``{seed}`` an integer in ``[0, 2**31 - 1)`` drawn from the generator Kestrel passes (one per
    run: the same run seed gives the same seeds, so a program that draws from its seed is
    reproducible), ``{n}`` the samples of the run (1 per sample), ``{input}`` / ``{output}``
    the absolute paths of the input / output file, ``{scratch}`` the run's folder, and with
    ``per: sample`` the parents' values: ``{theta}`` (a word that is only this becomes one
    word per component; inside a longer word, components are joined by commas),
    ``{theta[0]}``, ``{theta[0]:.3f}``; parents are also ``{0}``, ``{1}`` … in order.

    Args:
        command: the program and its arguments, a list of words (or one string, split as a
            shell splits words; no shell runs it). A program named with a ``/`` in a config
            is relative to the config's folder; a bare name is looked up on ``PATH``.
        per: ``"sample"`` (default): one run per sample, parents' values in the templates;
            a chunk's failing samples are known without running it again. ``"chunk"``: one
            run per chunk of ``n`` samples, the parents in the input file (rows).
        input: where the parents go: ``{file: NAME}`` (in the scratch folder; format from
            its suffix or ``format:``) or ``{stdin: FORMAT}``; ``None`` (default): only in the
            templates. Formats: ``json`` (``{"seed": s, "n": n, "<parent>": values}``),
            ``npz`` (the same keys), ``npy``, ``csv``, ``txt`` (the parents' values flattened
            and side by side: one row per sample, ``%.17g``).
        output: where the result is read: ``{file: NAME}`` (format from the suffix or
            ``format:``) or ``{stdout: FORMAT}``; default ``{stdout: txt}``. Formats:
            ``npy``; ``npz`` and ``json`` (the array under ``key``; default: the only array of
            an npz, ``"value"`` of a json object, or a json list); ``csv``, ``txt`` (rows of
            numbers). A per-chunk output has ``n`` rows.
        parents: names of the node's parents, in the node's ``parents`` order, for templates
            and the keys of json / npz inputs (default ``"0"``, ``"1"``, …).
        shape: the per-sample shape the output must have (its values are reshaped to it when
            their number matches); default: whatever the output holds, a text row being 1-D.
        time_limit: seconds one run may take (default: none). Set it below the node's
            ``timeout`` so that the command, not the node actor, is what is stopped.
        env: environment variables added to this process's for the command (values are
            templates). cwd: the folder the command runs in (default: its scratch folder;
            relative to the config's folder). scratch: the folder the scratch folders are
            made in (default: the system's temporary folder).
        stderr_lines: lines of the command's stderr quoted in an error (default 10).

    Raises:
        ConfigError: at construction, a bad option (naming it): an unknown template field,
            ``{input}`` without an input file, a parent's value in a per-chunk template, …
        ProgramError: (a :class:`~kestrel_core.SimulatorError`) from a call: the command exited
            with a non-zero status or was killed, ran past ``time_limit``, wrote no output or
            one that cannot be read or has the wrong shape; naming the command, the status,
            the scratch folder (kept) and the last lines of its stderr. With ``per: sample`` it
            says which samples of the call failed (``failed``) and carries the others' values,
            so ``on_error: skip`` skips exactly those.
        SimulatorError: the command cannot be started (not found, not executable), or the
            call's parents do not match ``parents``.
        ShapeError: without ``shape``, the samples of a call have different shapes.
    """

    def __init__(
        self,
        command: Any,
        per: str = "sample",
        input: Mapping[str, Any] | None = None,
        output: Mapping[str, Any] | None = None,
        parents: Sequence[str] | None = None,
        shape: Sequence[int] | int | None = None,
        time_limit: float | None = None,
        env: Mapping[str, Any] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        scratch: str | os.PathLike[str] | None = None,
        stderr_lines: int = 10,
    ):
        if os.name != "posix":  # pragma: no cover
            raise ConfigError("Program: external programs run on POSIX systems only")
        self.command = _command(command)
        first = os.path.expanduser(self.command[0])
        self.command[0] = os.path.abspath(first) if "/" in first else first
        if per not in ("sample", "chunk"):
            raise ConfigError(f"per: expected 'sample' or 'chunk', got {per!r}")
        self.per = per
        self.input = _stream_spec(input, "input", "stdin", INPUT_FORMATS, None)
        self.output = _stream_spec(
            output, "output", "stdout", OUTPUT_FORMATS, {"file": None, "format": "txt", "key": None}
        )
        assert self.output is not None
        if parents is not None and (
            isinstance(parents, str) or not all(isinstance(p, str) for p in parents)
        ):
            raise ConfigError(f"parents: expected a list of names, got {parents!r}")
        self.parents = None if parents is None else [str(p) for p in parents]
        for name in self.parents or ():
            if not name.isidentifier() or name in CALL_FIELDS:
                raise ConfigError(
                    f"parents: {name!r} must be an identifier other than {', '.join(CALL_FIELDS)}"
                )
        if shape is not None:
            dims = [shape] if isinstance(shape, int) else list(shape)
            if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in dims):
                raise ConfigError(f"shape: expected a list of sizes ≥ 0, got {shape!r}")
            self.shape: tuple[int, ...] | None = tuple(dims)
        else:
            self.shape = None
        if time_limit is not None and (
            isinstance(time_limit, bool)
            or not isinstance(time_limit, (int, float))
            or not time_limit > 0
            or math.isinf(time_limit)
        ):
            raise ConfigError(f"time_limit: expected seconds > 0, got {time_limit!r}")
        self.time_limit = None if time_limit is None else float(time_limit)
        if env is not None and not isinstance(env, Mapping):
            raise ConfigError(f"env: expected a mapping NAME: value, got {env!r}")
        self.env = {str(k): str(v) for k, v in (env or {}).items()}
        self.cwd = None if cwd is None else os.path.abspath(os.path.expanduser(os.fspath(cwd)))
        self.scratch = (
            None if scratch is None else os.path.abspath(os.path.expanduser(os.fspath(scratch)))
        )
        if isinstance(stderr_lines, bool) or not isinstance(stderr_lines, int) or stderr_lines < 0:
            raise ConfigError(f"stderr_lines: expected an integer ≥ 0, got {stderr_lines!r}")
        self.stderr_lines = stderr_lines
        self._check_templates()
        self.failures = 0  # runs of the command that failed, over this object's life

    # -- templates -------------------------------------------------------------------------

    def _check_templates(self) -> None:
        words = [(f"command[{i}]", w) for i, w in enumerate(self.command)]
        words += [(f"env.{k}", v) for k, v in self.env.items()]
        for where, text in words:
            for name in _template_fields(text, where):
                if name in CALL_FIELDS:
                    if name == "input" and (self.input is None or self.input["file"] is None):
                        raise ConfigError(
                            f"{where}: {{input}} names the input file, but `input` gives none "
                            "(add input: {file: params.json})"
                        )
                    if name == "output" and self.output is not None and not self.output["file"]:
                        raise ConfigError(
                            f"{where}: {{output}} names the output file, but the output is read "
                            "from stdout (add output: {file: out.npy})"
                        )
                    continue
                if name == "":
                    raise ConfigError(f"{where}: {text!r}: write {{0}}, {{1}} … not {{}}")
                parent = name.isdigit() or (self.parents is not None and name in self.parents)
                if not parent:
                    known = [*CALL_FIELDS, *(self.parents or ["0", "1", "…"])]
                    raise ConfigError(
                        f"{where}: unknown template field {{{name}}} in {text!r}; known: "
                        f"{', '.join(known)}"
                    )
                if self.per == "chunk":
                    raise ConfigError(
                        f"{where}: {{{name}}} is a parent's value, which a per-chunk run gets in "
                        "its input file (input: {file: …}), not in its arguments"
                    )

    def _names(self, count: int) -> list[str]:
        if self.parents is None:
            return [str(i) for i in range(count)]
        if len(self.parents) != count:
            raise SimulatorError(
                f"Program {self.command[0]}: called with {count} parent(s) but `parents` names "
                f"{len(self.parents)} ({self.parents}); list the node's parents in order"
            )
        return list(self.parents)

    def _expand(self, text: str, fields: dict[str, Any], args: list[Any]) -> str:
        try:
            return _FORMATTER.vformat(text, args, fields)
        except (IndexError, KeyError, TypeError, ValueError, AttributeError) as err:
            raise SimulatorError(
                f"Program {self.command[0]}: template {text!r} cannot be filled in: "
                f"{type(err).__name__}: {err}"
            ) from err

    def _argv(self, fields: dict[str, Any], args: list[Any], names: list[str]) -> list[str]:
        argv = [self.command[0]]
        for word in self.command[1:]:
            inner = word[1:-1] if word.startswith("{") and word.endswith("}") else None
            value = None
            if inner is not None and inner.isdigit() and int(inner) < len(args):
                value = args[int(inner)]
            elif inner is not None and inner in names:
                value = fields[inner]
            if isinstance(value, _Values):  # a word that is only a parent: one per component
                argv += [format(v) for v in value]
            else:
                argv.append(self._expand(word, fields, args))
        return argv

    # -- files -----------------------------------------------------------------------------

    def _write_input(self, path: str, fmt: str, values: dict[str, np.ndarray], seed: int, n: int):
        if fmt == "json":
            data: dict[str, Any] = {"seed": seed, "n": n}
            data.update({k: np.asarray(v).tolist() for k, v in values.items()})
            with open(path, "w") as f:
                json.dump(data, f)
            return
        if fmt == "npz":
            with open(path, "wb") as f:
                arrays: dict[str, Any] = {"seed": np.int64(seed), "n": np.int64(n), **values}
                np.savez(f, **arrays)
            return
        lead = () if self.per == "sample" else (n,)
        parts = [np.asarray(v, dtype=np.float64).reshape(*lead, -1) for v in values.values()]
        matrix = np.concatenate(parts, axis=-1) if parts else np.zeros((*lead, 0))
        if fmt == "npy":
            with open(path, "wb") as f:
                np.save(f, matrix)
            return
        rows = matrix.reshape(1, -1) if self.per == "sample" else matrix.reshape(n, -1)
        np.savetxt(path, rows, fmt="%.17g", delimiter="," if fmt == "csv" else " ")

    def _read_output(self, path: str, n: int | None) -> np.ndarray:
        """The output as an array ``D`` (per sample) or ``(n, *D)``; ``ValueError`` when unusable."""
        spec = self.output
        assert spec is not None
        fmt, key = spec["format"], spec["key"]
        if not os.path.exists(path):
            raise ValueError("wrote no output file")
        if fmt == "npy":
            arr = np.load(path, allow_pickle=False)
        elif fmt == "npz":
            with np.load(path, allow_pickle=False) as z:
                names = list(z.files)
                if key is None and len(names) != 1:
                    raise ValueError(f"wrote an npz with arrays {names}; set output.key")
                if key is not None and key not in names:
                    raise ValueError(f"wrote an npz without {key!r} (arrays: {names})")
                arr = z[key if key is not None else names[0]]
        elif fmt == "json":
            with open(path) as f:
                data = json.load(f)
            if isinstance(data, Mapping):
                want = key or "value"
                if want not in data:
                    raise ValueError(f"wrote a json object without {want!r} (keys {sorted(data)})")
                data = data[want]
            arr = np.asarray(data, dtype=np.float64)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # numpy warns about an empty file
                arr = np.loadtxt(
                    path,
                    dtype=np.float64,
                    delimiter="," if fmt == "csv" else None,
                    ndmin=1 if n is None else 2,
                )
        if arr.dtype.kind not in "biuf":
            raise ValueError(f"wrote values of dtype {arr.dtype}, not numbers")
        target = self.shape if n is None else (None if self.shape is None else (n, *self.shape))
        if target is not None:
            if arr.size != math.prod(target):
                raise ValueError(
                    f"wrote {arr.size} value(s) of shape {arr.shape}; expected shape {target}"
                )
            return arr.reshape(target)
        if n is not None and (arr.ndim == 0 or arr.shape[0] != n):
            raise ValueError(f"wrote shape {arr.shape}; expected {n} rows, one per sample")
        if arr.size == 0:
            raise ValueError("wrote no values")
        return arr

    # -- one run ---------------------------------------------------------------------------

    def _fail(
        self, reason: str, argv: list[str], folder: str, what: str, status: Any
    ) -> ProgramError:
        self.failures += 1
        command = shlex.join(argv)
        if len(command) > 300:
            command = command[:297] + "..."
        message = (
            f"program {command} ({what}) {reason}; its scratch folder is kept: {folder}\n"
            f"  last lines of its stderr:\n{_tail(os.path.join(folder, STDERR), self.stderr_lines)}"
        )
        err = ProgramError(message, command=argv, status=status, folder=folder)
        setattr(err, USER_TRACEBACK, f"ProgramError: {message}\n")  # no user frames to show
        level = logging.WARNING if self.failures <= LOUD_FAILURES else logging.INFO
        _log.log(level, "%s", message.splitlines()[0])
        if self.failures == LOUD_FAILURES:
            _log.warning("Program %s: further failures are logged at INFO", self.command[0])
        return err

    def _run(
        self, n: int | None, values: dict[str, np.ndarray], seed: int, what: str
    ) -> np.ndarray:
        """Run the command once (``n`` None: one sample); the output ``D`` or ``(n, *D)``."""
        base = self.scratch or tempfile.gettempdir()
        try:
            os.makedirs(base, exist_ok=True)
            folder = tempfile.mkdtemp(prefix="kestrel-program-", dir=base)
        except OSError as err:
            raise SimulatorError(
                f"Program {self.command[0]}: cannot make a scratch folder in {base}: {err}"
            ) from err
        spec_in, spec_out = self.input, self.output
        assert spec_out is not None
        in_path = None
        if spec_in is not None:
            in_path = os.path.join(folder, spec_in["file"] or STDIN)
        out_path = os.path.join(folder, spec_out["file"] or STDOUT)
        fields: dict[str, Any] = {
            "seed": seed,
            "n": 1 if n is None else n,
            "scratch": folder,
            "input": in_path or "",
            "output": out_path,
        }
        args: list[Any] = []
        if n is None:
            args = [_scalars(v) for v in values.values()]
            fields.update(zip(values, args))
        argv = self._argv(fields, args, list(values) if n is None else [])
        env = dict(os.environ)
        env.update({k: self._expand(v, fields, args) for k, v in self.env.items()})
        for path in (in_path, out_path):
            if path is not None:
                os.makedirs(os.path.dirname(path), exist_ok=True)
        if spec_in is not None and in_path is not None:
            self._write_input(in_path, spec_in["format"], values, seed, fields["n"])
        start = time.monotonic()
        streamed = spec_in is not None and not spec_in["file"]
        stdin_path = in_path if streamed and in_path is not None else os.devnull
        with (
            open(stdin_path, "rb") as stdin,
            open(os.path.join(folder, STDOUT), "wb") as stdout,
            open(os.path.join(folder, STDERR), "wb") as stderr,
        ):
            try:
                proc = subprocess.Popen(
                    argv,
                    stdin=stdin,
                    stdout=stdout,
                    stderr=stderr,
                    cwd=self.cwd or folder,
                    env=env,
                    start_new_session=True,
                )
            except OSError as err:
                raise SimulatorError(
                    f"program {self.command[0]} cannot be started ({what}): "
                    f"{type(err).__name__}: {err.strerror or err}; its scratch folder is kept: "
                    f"{folder}"
                ) from err
            guard = _Guard(proc.pid)
            timed_out = False
            try:
                try:
                    proc.wait(timeout=self.time_limit)
                except subprocess.TimeoutExpired:
                    timed_out = True
            finally:
                _kill_group(proc.pid)  # past its limit, interrupted, or children left behind
                proc.wait()
                guard.release()
        took = time.monotonic() - start
        status = proc.returncode
        if timed_out:
            raise self._fail(
                f"ran past its time limit of {self.time_limit:g} s and was killed",
                argv,
                folder,
                what,
                "timeout",
            )
        if status != 0:
            reason = (
                f"was killed by signal {-status} ({_signal_name(-status)}) after {took:.3g} s"
                if status < 0
                else f"exited with status {status} after {took:.3g} s"
            )
            raise self._fail(reason, argv, folder, what, status)
        try:
            arr = self._read_output(out_path, n)
        except (ValueError, OSError, EOFError) as err:
            where = spec_out["file"] or "stdout"
            raise self._fail(
                f"exited with status 0 but its output ({where}, {spec_out['format']}) is "
                f"unusable: {str(err).splitlines()[0] if str(err) else type(err).__name__}",
                argv,
                folder,
                what,
                0,
            ) from err
        shutil.rmtree(folder, ignore_errors=True)
        return arr

    # -- the simulator protocol ------------------------------------------------------------

    def simulate_batch(
        self, n: int, *parents: np.ndarray, rng: np.random.Generator | None = None
    ) -> np.ndarray:
        """Run the command for ``n`` samples (see the class docstring).

        Args:
            n: samples. parents: ``(n, *D_p)`` each, in the node's ``parents`` order.
            rng: the call's generator; the seeds passed to the command are drawn from it.

        Returns:
            ``(n, *D)``.

        Raises:
            ProgramError: a run failed (with ``per: sample``, after every sample was run:
                ``failed`` marks the samples that failed, ``value`` holds the others).
            SimulatorError: the command cannot be started, or the parents do not match.
            ShapeError: without ``shape``, the samples' outputs have different shapes.
        """
        n = int(n)
        gen = rng if rng is not None else np.random.default_rng()
        arrays = [np.asarray(p) for p in parents]
        names = self._names(len(arrays))
        if self.per == "chunk":
            seed = int(gen.integers(0, SEED_MAX))
            values = dict(zip(names, arrays))
            return self._run(n, values, seed, f"a chunk of {n} sample{'s' * (n != 1)}, seed {seed}")
        seeds = gen.integers(0, SEED_MAX, size=n)
        rows: list[np.ndarray | None] = []
        failed = np.zeros(n, dtype=bool)
        first: ProgramError | None = None
        for k in range(n):
            values = {name: a[k] for name, a in zip(names, arrays)}
            seed = int(seeds[k])
            try:
                rows.append(self._run(None, values, seed, f"sample {k} of {n}, seed {seed}"))
            except ProgramError as err:
                failed[k] = True
                rows.append(None)
                first = first or err
        good = [r for r in rows if r is not None]
        shape = good[0].shape if good else None
        other = next((r.shape for r in good if r.shape != shape), None)
        if other is not None:
            raise ShapeError(
                f"Program {self.command[0]}: the samples of a call have output shapes {shape} "
                f"and {other}; set `shape` to check each sample's output"
            )
        value = None
        if good:
            value = np.empty((n, *good[0].shape), dtype=np.result_type(*good))
            for k, r in enumerate(rows):
                if r is not None:
                    value[k] = r
        if first is None:
            assert value is not None
            return value
        if n == 1:
            first.failed, first.value = failed, value
            raise first
        count = int(failed.sum())
        message = f"{count} of {n} samples failed; the first: {first}"
        summary = ProgramError(
            message,
            command=first.command,
            status=first.status,
            folder=first.folder,
            failed=failed,
            value=value,
        )
        setattr(summary, USER_TRACEBACK, f"ProgramError: {message}\n")
        raise summary from first

    def __repr__(self) -> str:
        return f"Program({shlex.join(self.command)!r}, per={self.per!r})"
