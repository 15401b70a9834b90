"""Observations equal in value have one digest and one sample folder, whatever dtype they
come in (K36; the rest of the input kinds, K24 and K28, are in ``tests/core/test_input_kinds.py``).
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pytest

from kestrel.rundir._samplefiles import (
    OBSERVATION_FILE,
    observation_digest,
    sample_folder,
    write_sample_file,
)

X = np.array([1.0, -2.0, 3.0])


@pytest.mark.parametrize(
    "dtype", [np.int64, np.int8, np.float16, np.float32, ">f8", ">i4", np.uint8], ids=str
)
def test_k36_observation_digest_does_not_depend_on_dtype(dtype):
    values = np.array([1, 2, 3]) if np.dtype(dtype).kind == "u" else X
    native = observation_digest({"x": values.astype(np.float64)})
    assert observation_digest({"x": values.astype(dtype)}) == native


def test_k36_float64_observation_digests_are_unchanged():
    def before(observations):  # the digest as it was computed before dtypes were normalised
        sha = hashlib.sha256()
        for name in sorted(observations):
            arr = np.ascontiguousarray(observations[name])
            header = f"{name}\0{arr.dtype.str}\0{arr.shape}\0".encode()
            sha.update(len(header).to_bytes(8, "little") + header)
            sha.update(arr.tobytes())
        return sha.hexdigest()[:12]

    rng = np.random.default_rng(0)
    for obs in [{"x": X}, {"x": rng.normal(size=(2, 3)), "y": np.array(0.5)}]:
        assert observation_digest(obs) == before(obs)
    assert observation_digest({"x": X}) == "f194b0362eeb"


def test_k36_equal_observations_share_one_folder(tmp_path):
    samples = str(tmp_path)
    arrays = {"z": np.zeros((2, 3))}
    first = write_sample_file(samples, "posterior", arrays, {"x": X.astype(np.int32)})
    second = write_sample_file(samples, "posterior", arrays, {"x": X})
    assert (
        os.path.dirname(first)
        == os.path.dirname(second)
        == sample_folder(samples, "posterior", {"x": X})
    )
    saved = np.load(os.path.join(os.path.dirname(first), OBSERVATION_FILE))["x"]
    assert saved.dtype == np.float64 and saved.tolist() == X.tolist()
    assert observation_digest({"x": np.array([2**62 + 1, 0])}) != observation_digest(
        {"x": np.array([2**62, 0])}
    )  # an int float64 cannot hold keeps its dtype
