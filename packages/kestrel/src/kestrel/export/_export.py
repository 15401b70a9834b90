"""``kestrel export``: a run's samples for the tools scientists already use.

``--format arviz`` writes one sample file (the newest posterior one by default) as an ArviZ
``InferenceData`` in netCDF (``pip install 'kestrel[export]'``): group ``posterior`` holds
one variable per node, dims ``(chain, draw, <node>_dim_0, …)`` with one chain; a node with
``names`` gets them as the coordinates of its one component axis; group ``observed_data``
holds the observation the samples belong to. Read it back with ``arviz.from_netcdf(PATH)``.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import numpy as np

from kestrel.plot._plot import MissingExtra
from kestrel.rundir._read import RunSamples, read_run_samples
from kestrel_core import ConfigError

__all__ = ["export_run", "FORMATS"]

FORMATS = ("arviz",)


def _arviz() -> ModuleType:
    try:
        import arviz
    except ImportError:
        raise MissingExtra(
            "kestrel export --format arviz needs arviz: pip install 'kestrel[export]'"
        ) from None
    return arviz


def _variables(
    arrays: dict[str, np.ndarray], names: dict[str, list[str]], batch: int
) -> tuple[dict[str, np.ndarray], dict[str, list[str]], dict[str, Any]]:
    """Arrays with ``batch`` leading axes, their dims and the coordinates of named axes."""
    data: dict[str, np.ndarray] = {}
    dims: dict[str, list[str]] = {}
    coords: dict[str, Any] = {}
    for node, arr in arrays.items():
        shape = arr.shape[batch:]
        labels = names.get(node)
        if labels and len(shape) == 1 and shape[0] == len(labels):
            dims[node] = [f"{node}_dim"]
            coords[f"{node}_dim"] = list(labels)
        else:
            dims[node] = [f"{node}_dim_{i}" for i in range(len(shape))]
        data[node] = arr
    return data, dims, coords


def _inference_data(run: RunSamples) -> Any:
    az = _arviz()
    posterior, pdims, pcoords = _variables(
        {k: np.asarray(v)[None] for k, v in run.arrays.items()}, run.names, 2
    )
    observed, odims, ocoords = _variables(dict(run.observed), run.names, 0)
    attrs = {
        "kestrel_sample_file": os.path.basename(run.path),
        "kestrel_mode": run.mode,
    }
    kwargs = {
        "dims": {**pdims, **odims},
        "coords": {**pcoords, **ocoords},
        "attrs": attrs,
    }
    if int(str(az.__version__).split(".")[0]) >= 1:  # arviz 1.x: one dict of groups
        groups: dict[str, Any] = {"posterior": posterior}
        if observed:
            groups["observed_data"] = observed
        return az.from_dict(groups, **kwargs)
    return az.from_dict(posterior=posterior, observed_data=observed or None, **kwargs)


def export_run(
    run_dir: str | os.PathLike[str],
    fmt: str = "arviz",
    output: str | None = None,
    *,
    sample_file: str | None = None,
    force: bool = False,
) -> str:
    """Write a run's posterior samples in ``fmt``.

    Args:
        run_dir: the run directory.
        fmt: ``"arviz"`` (netCDF, see the module docstring).
        output: the file (default ``RUN/export/posterior.nc``).
        sample_file: export this ``.npz`` (one of the run's posterior sample files) instead
            of the newest one.
        force: replace a file outside the run that already exists (refused otherwise).

    Returns:
        The path written.

    Raises:
        MissingExtra: arviz (or its netCDF backend) is not installed.
        ConfigError: unknown format, not a run directory, ``sample_file`` not one of its
            posterior sample files, no posterior samples, or an ``output`` that may not be
            written (:func:`~kestrel.rundir._outputs.check_output_file`).
    """
    if fmt not in FORMATS:
        raise ConfigError(f"unknown export format {fmt!r} (known: {', '.join(FORMATS)})")
    from kestrel.rundir._outputs import check_output_file

    run_dir = os.path.expanduser(os.fspath(run_dir))  # ~ expanded as a shell does
    output = None if output is None else os.path.expanduser(output)
    sample_file = None if sample_file is None else os.path.expanduser(sample_file)
    run = read_run_samples(run_dir, "posterior", sample_file)
    path = output or os.path.join(os.path.abspath(os.fspath(run_dir)), "export", "posterior.nc")
    path = check_output_file(path, "--to", run_dir=run_dir, force=force)
    idata = _inference_data(run)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    try:
        idata.to_netcdf(path)
    except (ImportError, ValueError) as err:
        if "engine" in str(err) or isinstance(err, ImportError):
            raise MissingExtra(
                f"writing netCDF needs h5netcdf or netCDF4: pip install 'kestrel[export]' ({err})"
            ) from None
        raise
    return path
