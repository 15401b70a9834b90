"""Sample files per observation (kestrel.rundir._samplefiles): digests, folders, latest file."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from kestrel.rundir._samplefiles import (
    OBSERVATION_FILE,
    latest_sample_file,
    observation_digest,
    sample_files,
    sample_observation,
    write_sample_file,
)
from kestrel_core import ConfigError


def test_digest_is_short_stable_and_sees_values_and_shape_not_dtype():
    x = np.arange(6.0)
    d = observation_digest({"x": x})
    assert len(d) == 12 and int(d, 16) >= 0
    assert observation_digest({"x": x.copy()}) == d
    assert observation_digest({"x": x.reshape(2, 3)}) != d
    assert observation_digest({"x": x.astype(np.float32)}) == d  # equal values (K36)
    assert observation_digest({"x": x.astype(np.float32) + 0.1}) != d
    assert observation_digest({"x": x + 1e-12}) != d
    assert observation_digest({"y": x}) != d
    with pytest.raises(ConfigError, match="no observed node"):
        observation_digest({})


def test_two_observations_two_folders_each_with_its_observation(tmp_path):
    samples = str(tmp_path / "samples")
    a, b = {"x": np.zeros(3)}, {"x": np.ones(3)}
    pa = write_sample_file(samples, "posterior", {"z": np.zeros((4, 2))}, a)
    pb = write_sample_file(samples, "posterior", {"z": np.ones((5, 2))}, b)
    time.sleep(0.01)
    pa2 = write_sample_file(samples, "posterior", {"z": np.ones((6, 2))}, a)
    assert os.path.dirname(pa) == os.path.dirname(pa2) != os.path.dirname(pb)
    assert os.path.basename(os.path.dirname(pa)) == observation_digest(a)
    assert [os.path.basename(p) for p in (pa, pb, pa2)] == ["000000.npz"] * 2 + ["000001.npz"]
    np.testing.assert_array_equal(sample_observation(pb)["x"], b["x"])
    assert sorted(os.listdir(os.path.dirname(pa))) == ["000000.npz", "000001.npz", OBSERVATION_FILE]
    assert sample_files(samples, "posterior", a) == [pa, pa2]
    assert sample_files(samples, "posterior", observation_digest(b)) == [pb]
    assert latest_sample_file(samples, "posterior") == pa2
    assert latest_sample_file(samples, "posterior", b) == pb
    # prior samples: no observation, no folder per observation
    prior = write_sample_file(samples, "prior", {"z": np.zeros((2, 2))}, a)
    assert (
        prior == os.path.join(samples, "prior", "000000.npz") and sample_observation(prior) is None
    )
    with pytest.raises(ConfigError, match="no observation"):
        write_sample_file(samples, "ppd", {"z": np.zeros((2, 2))})
    with pytest.raises(ConfigError, match="no ppd samples"):
        latest_sample_file(samples, "ppd")


def test_files_of_the_old_flat_layout_are_still_listed(tmp_path):
    samples = tmp_path / "samples"
    (samples / "posterior").mkdir(parents=True)
    np.savez(samples / "posterior" / "000000.npz", z=np.zeros((3, 2)))
    old = str(samples / "posterior" / "000000.npz")
    assert sample_files(str(samples), "posterior") == [old]
    assert sample_observation(old) is None
    time.sleep(0.01)
    new = write_sample_file(str(samples), "posterior", {"z": np.ones((3, 2))}, {"x": np.ones(2)})
    assert sample_files(str(samples), "posterior") == [old, new]
    assert latest_sample_file(str(samples), "posterior") == new


def test_latest_survives_a_copy_that_resets_every_time(tmp_path):
    samples = tmp_path / "samples"
    first = write_sample_file(str(samples), "ppd", {"x": np.zeros((2, 1))}, {"x": np.zeros(1)})
    last = write_sample_file(str(samples), "ppd", {"x": np.ones((2, 1))}, {"x": np.ones(1)})
    os.utime(first, ns=(2**62, 2**62))  # as if copied last
    assert latest_sample_file(str(samples), "ppd") == last
    os.remove(last)  # a noted file that is gone: newest by time
    assert latest_sample_file(str(samples), "ppd") == first
