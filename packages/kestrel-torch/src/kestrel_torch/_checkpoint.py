"""Checkpoint files of the estimators: module state that survives copies and new processes.

A module's ``state_dict`` holds its parameters, buffers and ``get_extra_state`` — but not a
tensor that user code keeps as a *plain attribute* (``self.basis = …`` set during the first
training forward, case K13). :func:`module_state` therefore also collects every plain tensor or
numpy-array attribute of every submodule, and :func:`load_module_state` puts them back, so a
model restored in a new process evaluates exactly like the one that was saved.

Files are written with :func:`torch.save` to a temporary name and moved into place, so an
interrupted save (Ctrl-C) never leaves a truncated checkpoint; they are read with
``torch.load(weights_only=True)``, which accepts only tensors and plain containers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from kestrel_core import EstimatorError
from torch import nn

__all__ = ["module_state", "load_module_state", "write_checkpoint", "read_checkpoint"]

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
        EstimatorError: the state does not fit the module (missing/unexpected keys, shapes).
    """
    try:
        module.load_state_dict(state["state_dict"])
    except (RuntimeError, KeyError) as err:
        raise EstimatorError(f"{what}: saved weights do not fit the rebuilt network: {err}") from err
    subs = dict(module.named_modules())
    for key, tensor in state.get("attrs", {}).items():
        path, _, name = key.rpartition(_ATTR_SEP)
        if path not in subs:
            raise EstimatorError(f"{what}: saved attribute {key!r} names a submodule that does not exist")
        kind = state.get("attr_kinds", {}).get(key, "tensor")
        value = tensor.cpu().numpy() if kind == "ndarray" else tensor
        setattr(subs[path], name, value)


def write_checkpoint(path: str | os.PathLike[str], payload: dict[str, Any]) -> None:
    """Write ``payload`` with :func:`torch.save`, atomically (temporary file, then rename).

    Raises:
        EstimatorError: the file cannot be written (names the path).
    """
    target = Path(path)
    tmp = target.with_name(target.name + ".tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        torch.save(payload, tmp)
        os.replace(tmp, target)
    except OSError as err:
        raise EstimatorError(f"cannot write checkpoint {str(target)!r}: {err}") from err


def read_checkpoint(path: str | os.PathLike[str], device: torch.device | str) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``, mapping every tensor to ``device``.

    Raises:
        EstimatorError: the file is missing or not a Kestrel checkpoint (names the path).
    """
    target = Path(path)
    if not target.is_file():
        raise EstimatorError(f"no checkpoint at {str(target)!r}")
    try:
        payload = torch.load(target, map_location=device, weights_only=True)
    except Exception as err:  # unpickling errors have no common base class
        raise EstimatorError(f"cannot read checkpoint {str(target)!r}: {err}") from err
    if not isinstance(payload, dict) or "format" not in payload:
        raise EstimatorError(f"{str(target)!r} is not a Kestrel estimator checkpoint")
    return payload
