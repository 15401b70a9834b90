"""Estimator checkpoints: module state that survives copies and new processes, as bytes or files.

A module's ``state_dict`` holds its parameters, buffers and ``get_extra_state`` — but not a
tensor that user code keeps as a *plain attribute* (``self.basis = …`` set during the first
training forward). :func:`module_state` therefore also collects every plain tensor or
numpy-array attribute of every submodule, and :func:`load_module_state` puts them back, so a
model restored in a new process evaluates exactly like the one that was saved.

A checkpoint is a payload of tensors and plain containers (:func:`pack` makes it from a
:class:`~kestrel_torch.train._fit.FitState`, :func:`unpack` restores one). :func:`to_bytes` serialises
it with :func:`torch.save` into memory and :func:`from_bytes` reads it back with
``torch.load(weights_only=True)``, which accepts only tensors and plain containers — bytes that
can travel between processes. Files are those bytes: :func:`write_checkpoint` writes them to a
temporary name and moves it into place, so an interrupted save (Ctrl-C) never leaves a
truncated checkpoint, and :func:`read_checkpoint` reads them.
"""

from __future__ import annotations

import copy
import io
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from kestrel_core.internal import write_atomic
from kestrel_torch._errors import CheckpointError
from kestrel_torch.train._fit import FitState

__all__ = [
    "CHECKPOINT_FILE",
    "FORMAT",
    "module_state",
    "load_module_state",
    "pack",
    "unpack",
    "to_bytes",
    "from_bytes",
    "write_checkpoint",
    "read_checkpoint",
]

#: file name of the checkpoint inside the directory given to ``save``/``load``
CHECKPOINT_FILE = "estimator.pt"
#: version of the payload layout
FORMAT = 1
_ATTR_SEP = "::"


def _plain_attributes(module: nn.Module) -> dict[str, tuple[str, torch.Tensor]]:
    """Plain tensor / ndarray attributes of every submodule: ``{"path::name": (kind, tensor)}``."""
    out: dict[str, tuple[str, torch.Tensor]] = {}
    for path, sub in module.named_modules():
        registered = set(sub._parameters) | set(sub._buffers) | set(sub._modules)
        for name, value in vars(sub).items():
            if name.startswith("_") or name in registered:
                continue
            if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter):
                out[f"{path}{_ATTR_SEP}{name}"] = ("tensor", value.detach())
            elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
                out[f"{path}{_ATTR_SEP}{name}"] = ("ndarray", torch.from_numpy(np.array(value)))
    return out


def module_state(module: nn.Module) -> dict[str, Any]:
    """Everything needed to restore ``module``'s numbers, as tensors and plain containers.

    Args:
        module: any ``nn.Module``.

    Returns:
        ``{"state_dict": …, "attrs": {"sub.path::name": tensor}, "attr_kinds": {…: "tensor"|"ndarray"}}``;
        the tensors are detached references (``torch.save`` copies them).
    """
    attrs = _plain_attributes(module)
    return {
        "state_dict": module.state_dict(),
        "attrs": {key: tensor for key, (_, tensor) in attrs.items()},
        "attr_kinds": {key: kind for key, (kind, _) in attrs.items()},
    }


def load_module_state(module: nn.Module, state: dict[str, Any], *, what: str = "model") -> None:
    """Inverse of :func:`module_state`: load the state dict and set the plain attributes.

    Args:
        module: a module of the same architecture as the one saved.
        state: what :func:`module_state` returned (possibly after a save/load round trip).
        what: name used in error messages.

    Raises:
        CheckpointError: the state does not fit the module (missing/unexpected keys, shapes).
    """
    try:
        module.load_state_dict(state["state_dict"])
    except (RuntimeError, KeyError) as err:
        raise CheckpointError(
            f"{what}: saved weights do not fit the rebuilt network: {err}"
        ) from err
    subs = dict(module.named_modules())
    for key, tensor in state.get("attrs", {}).items():
        path, _, name = key.rpartition(_ATTR_SEP)
        if path not in subs:
            raise CheckpointError(
                f"{what}: saved attribute {key!r} names a submodule that does not exist"
            )
        kind = state.get("attr_kinds", {}).get(key, "tensor")
        value = tensor.cpu().numpy() if kind == "ndarray" else tensor
        setattr(subs[path], name, value)


def pack(
    state: FitState, header: Mapping[str, Any], init: Mapping[str, torch.Tensor]
) -> dict[str, Any]:
    """The checkpoint payload of a training state.

    Args:
        state: what training changed (models, optimiser, schedule, counters).
        header: ``estimator`` (class name), ``node`` and ``latent_dim``, checked by :func:`unpack`.
        init: condition node → the rows the model was built from (rebuilt from them on load).

    Returns:
        Tensors and plain containers only: current and best model, optimiser and scheduler state,
        ``total_epochs``, ``best_val_loss``, ``best_epoch``, ``samples_seen`` and ``seen_max`` (and what ``header``
        adds, e.g. the learning-rate option).
    """
    optimizer, scheduler = state.optimizer_states()
    return {
        "format": FORMAT,
        **header,
        "total_epochs": state.epochs,
        "best_val_loss": state.best_loss,
        "best_epoch": state.best_epoch,
        "init": dict(init),
        "model": module_state(state.model) if state.model is not None else None,
        "best": module_state(state.best) if state.best is not None else None,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "samples_seen": int(state.seen),
        "seen_max": int(state.seen_max),
    }


def unpack(
    payload: Mapping[str, Any],
    state: FitState,
    header: Mapping[str, Any],
    start: Callable[[Mapping[str, torch.Tensor]], None],
    *,
    source: str,
) -> None:
    """Restore ``state`` from a :func:`pack` payload.

    Args:
        payload: the checkpoint. state: updated in place.
        header: the expected ``estimator``, ``node`` and ``latent_dim`` (the node is not checked:
            a renamed node loads its weights), and the ``lr_option`` now (when it differs from
            the saved one, the optimiser takes it).
        start: rebuilds the model from the saved ``init`` rows and starts ``state`` on it (fresh
            optimiser and schedule, which then receive the saved state).
        source: the checkpoint's name in messages (``"checkpoint '/run/estimator.pt'"``).

    Raises:
        CheckpointError: the payload was written by another estimator class or for another
            parameter dimension, or its weights do not fit the rebuilt model.
    """
    node = header["node"]
    found = (payload.get("estimator"), payload.get("latent_dim"))
    expected = (header["estimator"], header["latent_dim"])
    if found != expected:
        raise CheckpointError(
            f"node {node!r}: {source} holds a {found[0]} over {found[1]} parameters; "
            f"expected a {expected[0]} over {expected[1]}"
        )
    state.epochs = int(payload["total_epochs"])
    state.best_loss = payload.get("best_val_loss")
    if "samples_seen" in payload:
        state.seen, state.seen_max = int(payload["samples_seen"]), int(payload["seen_max"])
    elif "seen_ids" in payload:  # a checkpoint of an older version: the ids themselves
        ids = payload["seen_ids"].cpu().numpy()
        state.seen, state.seen_max = int(ids.size), int(ids.max()) if ids.size else -1
    state.reset()
    state.best_epoch = None
    if payload["model"] is None:
        return
    start(payload["init"])
    assert state.model is not None  # started above
    load_module_state(state.model, payload["model"], what=f"node {node!r} model")
    if payload["best"] is not None:
        best = copy.deepcopy(state.model)
        load_module_state(best, payload["best"], what=f"node {node!r} best model")
        best.eval()
        state.best = best
        best_epoch = payload.get("best_epoch")  # absent in older checkpoints: taken at the end
        state.best_epoch = int(best_epoch) if best_epoch is not None else state.epochs
    lr = header.get("lr_option")
    # a changed ``lr`` option takes effect (an unchanged one lets the saved rate, possibly
    # decayed by the schedule, continue); the optimiser is built when training needs it
    changed = lr is not None and payload.get("lr_option") not in (None, lr)
    state.restore_optimizer(
        payload["optimizer"], payload.get("scheduler"), float(lr) if changed and lr else None
    )


def to_bytes(payload: Mapping[str, Any]) -> bytes:
    """Serialise a payload with :func:`torch.save` into memory."""
    buffer = io.BytesIO()
    torch.save(dict(payload), buffer)
    return buffer.getvalue()


def from_bytes(
    data: bytes, device: torch.device | str, *, source: str = "checkpoint bytes"
) -> dict[str, Any]:
    """Read a payload with ``torch.load(weights_only=True)``, mapping every tensor to ``device``.

    Args:
        data: what :func:`to_bytes` returned. device: where tensors go.
        source: the checkpoint's name in messages.

    Raises:
        CheckpointError: the bytes are not a Kestrel estimator checkpoint.
    """
    try:
        payload = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as err:  # unpickling errors have no common base class
        raise CheckpointError(f"cannot read {source}: {err}") from err
    if not isinstance(payload, dict) or "format" not in payload:
        raise CheckpointError(f"{source} is not a Kestrel estimator checkpoint")
    return payload


def write_checkpoint(path: str | os.PathLike[str], data: bytes) -> None:
    """Write checkpoint bytes to ``path`` atomically (temporary file, then rename).

    Raises:
        CheckpointError: the file cannot be written (names the path).
    """
    target = Path(path)
    try:
        write_atomic(target, data)
    except OSError as err:
        raise CheckpointError(f"cannot write checkpoint {str(target)!r}: {err}") from err


def read_checkpoint(path: str | os.PathLike[str]) -> bytes:
    """The bytes of the checkpoint file at ``path``.

    Raises:
        CheckpointError: the file is missing or cannot be read (names the path).
    """
    target = Path(path)
    if not target.is_file():
        raise CheckpointError(f"no checkpoint at {str(target)!r}")
    try:
        return target.read_bytes()
    except OSError as err:
        raise CheckpointError(f"cannot read checkpoint {str(target)!r}: {err}") from err
