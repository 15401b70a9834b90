"""Embeddings: the user module that turns an estimator's conditions into one feature vector.

Config form (under ``estimator.embedding``)::

    embedding:
      _target_: model.Summary          # an nn.Module class
      _input_: [x, mu]                 # condition nodes, passed positionally in this order
      width: 64                        # constructor kwargs; nested _target_ mappings are built
      norm: {_target_: kestrel_torch.RunningNorm, momentum: 0.01}

``embedding: null`` (or no embedding) is the identity: the evidence tensors, flattened per
sample and concatenated. A scaffold (training-only condition) named in ``_input_`` reaches the
module as ``None`` at inference.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn

from kestrel_core import flat_key, import_target, instantiate
from kestrel_core.internal import argument_problems
from kestrel_torch._errors import ConfigError, EstimatorError, KestrelError
from kestrel_torch.nets._float64 import KeepFloat64

__all__ = ["Embedding", "build_embedding", "check_embedding"]


class Embedding(nn.Module):
    """Feeds named conditions to a module and returns a feature matrix.

    Shape symbols: B batch size, E embedding width.

    Args:
        net: the user module, called as ``net(*[inputs[name] for name in inputs])``, or
            ``None`` for the identity (flatten and concatenate the inputs).
        inputs: condition node names, in call order.
        scaffolds: the node's scaffolds; only these may be missing from ``forward``'s inputs
            (they arrive as ``None``).

    A module receives its floating inputs in its own floating dtype (:func:`module_dtype`):
    float32 for a default torch module such as ``torch.nn.Linear`` (the conditions arrive as
    float64), float64 for a module the user made float64 (``.double()``); a module without
    floating parameters or buffers of its own — only float64 statistics of
    :class:`~kestrel_torch.nets._float64.KeepFloat64` layers such as
    :class:`~kestrel_torch.RunningNorm`, which do not count — gets the inputs unchanged.
    Integer and boolean inputs are never cast. A module that normalises float64 data with a
    :class:`~kestrel_torch.RunningNorm` before float32 layers and wants the statistics of the
    float64 values keeps its own layers float64, or casts after the norm itself.

    The wrapped module is the submodule ``net``, so its parameters, buffers and extra state
    (``get_extra_state``/``set_extra_state``) are part of this module's ``state_dict``, and
    ``copy.deepcopy`` copies its plain attributes too.
    """

    def __init__(
        self, net: nn.Module | None, inputs: Sequence[str], scaffolds: Sequence[str] = ()
    ) -> None:
        super().__init__()
        self.net = net
        self.inputs = tuple(inputs)
        self.scaffolds = tuple(scaffolds)

    def forward(self, inputs: Mapping[str, torch.Tensor | None]) -> torch.Tensor:
        """Embed a batch.

        Args:
            inputs: node name (or its flat key ``"<node>.value"``) → tensor ``(B, *D)`` or
                ``(1, *D)`` (a broadcast observation); scaffolds may be absent or ``None``.

        Returns:
            Tensor ``(B, E)``. The identity returns float64 if any input is float64, else
            float32; a module gets its floating inputs in its own dtype (:func:`module_dtype`;
            unchanged where it has none) and its output is returned in its own dtype (a 1-D output becomes
            ``(B, 1)``, more than 2 dimensions are flattened).

        Raises:
            EstimatorError: an evidence input is missing, or the module returned no tensor.
        """
        args = [self._lookup(inputs, name) for name in self.inputs]
        if self.net is None:
            return concatenate(args)
        dtype = module_dtype(self.net)
        if dtype is not None:
            args = [
                a.to(dtype) if a is not None and a.is_floating_point() and a.dtype != dtype else a
                for a in args
            ]
        out = self.net(*args)
        if not isinstance(out, torch.Tensor):
            raise EstimatorError(
                f"embedding {type(self.net).__name__}: forward returned {type(out).__name__}, "
                "expected a tensor (B, E)"
            )
        if out.dim() == 1:
            return out.unsqueeze(-1)
        return out if out.dim() == 2 else out.reshape(out.shape[0], -1)

    def _lookup(self, inputs: Mapping[str, torch.Tensor | None], name: str) -> torch.Tensor | None:
        value = inputs.get(name)
        if value is None:
            value = inputs.get(flat_key(name))
        if value is None and name not in self.scaffolds:
            raise EstimatorError(
                f"embedding input {name!r} (evidence) is missing or None; "
                f"given inputs: {sorted(inputs)}"
            )
        return value

    def extra_repr(self) -> str:
        return f"inputs={list(self.inputs)}" + (", identity" if self.net is None else "")


def module_dtype(net: nn.Module) -> torch.dtype | None:
    """The floating dtype of a module's own state: that of its first floating parameter, else of
    its first floating buffer outside :class:`~kestrel_torch.nets._float64.KeepFloat64` layers
    (whose float64 statistics keep float64 whatever the module is cast to); ``None`` for a
    module with neither (parameter-free: its inputs pass unchanged)."""
    for p in net.parameters():
        if p.is_floating_point():
            return p.dtype
    for m in net.modules():
        if isinstance(m, KeepFloat64):
            continue
        for b in m.buffers(recurse=False):
            if b is not None and b.is_floating_point():
                return b.dtype
    return None


def concatenate(tensors: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """Flatten each tensor to ``(B, -1)`` and concatenate along features, skipping ``None``.

    Tensors with leading dimension 1 are broadcast (``expand``, no copy before the cat) to the
    largest leading dimension. The result is float64 if any input is float64, else float32.

    Raises:
        EstimatorError: no tensor given, or leading dimensions that do not broadcast.
    """
    present = [t for t in tensors if t is not None]
    if not present:
        raise EstimatorError("embedding: no input tensor to concatenate")
    n = max(t.shape[0] if t.dim() else 1 for t in present)
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in present) else torch.float32
    flat = []
    for t in present:
        t = t.reshape(t.shape[0] if t.dim() else 1, -1)
        if t.shape[0] != n:
            if t.shape[0] != 1:
                raise EstimatorError(
                    f"embedding: inputs have leading dimensions "
                    f"{[tuple(p.shape)[:1] for p in present]}; expected {n} or 1"
                )
            t = t.expand(n, -1)
        flat.append(t.to(dtype))
    return torch.cat(flat, dim=1)


def build_embedding(
    spec: Any,
    conditions: Sequence[str],
    scaffolds: Sequence[str] = (),
    *,
    path: str = "estimator.embedding",
    imports: Iterable[str] = (),
) -> Embedding:
    """Build an estimator's embedding from its config.

    Args:
        spec: ``None`` (identity), an ``nn.Module`` instance (fed all evidence), or a mapping
            with ``_target_`` (dotted path of an ``nn.Module`` class), optional ``_input_`` (a
            node name or list of names; default: all evidence) and constructor kwargs, where a
            nested mapping with ``_target_`` is instantiated first.
        conditions: the node's evidence node names, in config order.
        scaffolds: the node's training-only condition names.
        path: key path of ``spec`` in the config, for messages.
        imports: directories searched first for ``_target_`` modules (the config's
            ``paths.imports``), as in :func:`kestrel_core.instantiate`.

    Returns:
        An :class:`Embedding`.

    Raises:
        ConfigError: missing ``_target_``, an ``_input_`` entry that is neither evidence nor
            scaffold (``estimator.embedding._input_[i]``), a nested ``_input_``, a class that
            fails to build (the original error text is kept) or is not an ``nn.Module``.
    """
    evidence, scaffolds = tuple(conditions), tuple(scaffolds)
    if spec is None:
        return Embedding(None, evidence)
    if isinstance(spec, nn.Module):
        return Embedding(spec, evidence, scaffolds)
    if not isinstance(spec, Mapping):
        raise ConfigError(
            f"{path}: expected null, a mapping with '_target_' or an nn.Module, "
            f"found {type(spec).__name__}"
        )
    cfg = dict(spec)
    if "_target_" not in cfg:
        raise ConfigError(f"{path}: missing '_target_' (found keys {sorted(cfg)})")
    inputs = _check_inputs(cfg.pop("_input_", None), evidence, scaffolds, path)
    _reject_nested_inputs(cfg, path)
    _check_arguments(cfg, path, imports)
    try:
        net = instantiate(cfg, imports)
    except KestrelError:
        raise
    except Exception as err:
        raise ConfigError(
            f"{path}._target_: building {cfg['_target_']!r} failed: {type(err).__name__}: {err}"
        ) from err
    if not isinstance(net, nn.Module):
        raise ConfigError(
            f"{path}._target_: {cfg['_target_']!r} built a {type(net).__name__}, "
            "expected a torch.nn.Module"
        )
    return Embedding(net, inputs, scaffolds)


def _check_arguments(cfg: dict[str, Any], path: str, imports: Iterable[str]) -> None:
    """A keyword the embedding class does not take, named with a suggestion (``n_component``:
    did you mean ``n_components``?); nested ``_target_`` mappings are left to their build."""
    try:
        target = import_target(cfg["_target_"], imports)
    except KestrelError:
        return  # instantiate reports it, with its own message
    kwargs = {k: v for k, v in cfg.items() if k != "_target_"}
    problems = argument_problems(target, kwargs, path)
    if problems:
        raise ConfigError("; ".join(problems))


def _check_inputs(
    inputs: Any, evidence: tuple[str, ...], scaffolds: tuple[str, ...], path: str
) -> tuple[str, ...]:
    if inputs is None:
        return evidence
    names = [inputs] if isinstance(inputs, str) else list(inputs)
    if not names:
        raise ConfigError(
            f"{path}._input_: empty list; name at least one of {list(evidence + scaffolds)}"
        )
    known = evidence + scaffolds
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise ConfigError(
                f"{path}._input_[{i}]: expected a node name, found {type(name).__name__}"
            )
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(
                f"{path}._input_[{i}]: {name!r} is neither evidence nor a scaffold of this node "
                f"(evidence: {list(evidence)}, scaffolds: {list(scaffolds)}){hint}"
            )
    return tuple(names)


def _reject_nested_inputs(cfg: Any, path: str) -> None:
    if isinstance(cfg, Mapping):
        for key, value in cfg.items():
            if isinstance(value, Mapping) and "_input_" in value:
                raise ConfigError(
                    f"{path}.{key}._input_: only the top-level embedding reads conditions; "
                    "build a pipeline inside your module instead"
                )
            _reject_nested_inputs(value, f"{path}.{key}")
    elif isinstance(cfg, Sequence) and not isinstance(cfg, (str, bytes)):
        for i, value in enumerate(cfg):
            _reject_nested_inputs(value, f"{path}[{i}]")


def check_embedding(
    spec: Any,
    evidence: Sequence[str],
    scaffolds: Sequence[str] = (),
    path: str = "estimator",
    imports: Iterable[str] = (),
    rows: Mapping[str, Any] | None = None,
) -> None:
    """Build an estimator's ``embedding`` option once for a node with these conditions, and
    drop it.

    Args:
        spec: the ``embedding`` option. evidence, scaffolds: the node's condition names.
        path: the estimator's key path, for messages (``graph.theta.estimator``).
        imports: the config's ``paths.imports``, searched first for the ``_target_``.
        rows: node → numpy array ``(k, *D)`` of simulated rows (the dry run's outputs); when
            every evidence node has rows, the built embedding is called once on them (a
            scaffold without rows arrives as ``None``), in training mode, on the CPU, without
            gradients (a wrong ``in_features``, a forward that raises).

    Raises:
        ConfigError: an ``_input_`` that is neither evidence nor scaffold, an embedding class
            that does not build with its keyword arguments (a misspelt one named, the original
            error text kept), or a forward pass on ``rows`` that fails (``<path>.embedding:
            ...`` with the original error text).
    """
    where = f"{path}.embedding"
    embedding = build_embedding(spec, evidence, scaffolds, path=where, imports=imports)
    if rows is None or any(c not in rows for c in evidence):
        return
    inputs: dict[str, torch.Tensor | None] = {}
    for c in (*evidence, *scaffolds):
        value = rows.get(c)
        inputs[c] = None if value is None else torch.from_numpy(np.array(value, copy=True))
    try:
        with torch.no_grad():
            embedding.train()(inputs)
    except Exception as err:
        shapes = {c: tuple(t.shape) for c, t in inputs.items() if t is not None}
        k = int(np.shape(rows[evidence[0]])[0]) if evidence else 0
        raise ConfigError(
            f"{where}: calling the embedding on {k} dry-run rows (inputs {shapes}) failed: "
            f"{type(err).__name__}: {err}"
        ) from err
