"""Kestrel on batch clusters: the SLURM batch script that starts a Ray cluster on a job's nodes and
runs ``kestrel launch`` on it (``kestrel cluster slurm-script``).

Pure standard library: neither Ray nor PyTorch is imported.
"""

from kestrel.cluster._slurm import SlurmOptions, slurm_script

__all__ = ["SlurmOptions", "slurm_script"]
