"""load_observation and check_observation (K08)."""

import warnings

import numpy as np
import pytest

from kestrel_core import ConfigError, ShapeError, check_observation, load_observation


def test_npz_with_key_single_key_npz_and_npy(tmp_path):
    np.savez(tmp_path / "multi.npz", x=np.arange(3.0), y=np.ones((2, 2)))
    np.savez(tmp_path / "single.npz", only=np.arange(4))
    np.save(tmp_path / "a.npy", np.eye(2))
    np.testing.assert_array_equal(load_observation("multi.npz['x']", tmp_path), np.arange(3.0))
    np.testing.assert_array_equal(load_observation('multi.npz["y"]', tmp_path), np.ones((2, 2)))
    np.testing.assert_array_equal(load_observation("single.npz", tmp_path), np.arange(4))
    np.testing.assert_array_equal(load_observation(tmp_path / "a.npy"), np.eye(2))


def test_relative_paths_use_base_dir(tmp_path):
    (tmp_path / "data").mkdir()
    np.save(tmp_path / "data" / "obs.npy", np.zeros(2))
    assert load_observation("data/obs.npy", str(tmp_path)).shape == (2,)
    np.testing.assert_array_equal(
        load_observation(str(tmp_path / "data" / "obs.npy"), "/nonexistent"), [0, 0]
    )


def test_missing_file_key_and_ambiguous_npz_list_keys(tmp_path):
    np.savez(tmp_path / "multi.npz", x=np.zeros(1), y=np.zeros(1))
    with pytest.raises(ConfigError, match="observation file not found: .*nope.npz"):
        load_observation("nope.npz['x']", tmp_path)
    with pytest.raises(ConfigError, match=r"no key 'z' in .*multi.npz \(available: x, y\)"):
        load_observation("multi.npz['z']", tmp_path)
    with pytest.raises(ConfigError, match=r"holds 2 arrays \(x, y\); name one"):
        load_observation("multi.npz", tmp_path)
    (tmp_path / "obs.txt").write_text("1 2 3")
    with pytest.raises(ConfigError, match="expected a .npy or .npz file"):
        load_observation("obs.txt", tmp_path)


def test_arrays_become_native_contiguous_read_only_copies(tmp_path):
    big = np.arange(12, dtype=">f4").reshape(3, 4)[:, ::2]
    np.save(tmp_path / "big.npy", big)
    for obs in (load_observation("big.npy", tmp_path), load_observation(big)):
        assert obs.dtype == np.float32 and obs.dtype.isnative
        assert obs.flags.c_contiguous and not obs.flags.writeable
        np.testing.assert_array_equal(obs, big)
    with pytest.raises(ConfigError, match="expected a numeric array"):
        load_observation(np.array(["a", "b"]))
    np.save(tmp_path / "scalar.npy", np.float64(2.5))
    assert load_observation("scalar.npy", tmp_path).shape == ()
    assert load_observation(np.float32(1.0)).shape == ()


def test_pickled_objects_are_refused(tmp_path):
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(ValueError):
        load_observation("obj.npy", tmp_path)


# --- K08 ------------------------------------------------------------------------------------


def test_k08_matching_shape_is_accepted():
    obs = np.arange(3.0)
    out = check_observation("x", obs, (3,))
    assert out.shape == (3,)
    np.testing.assert_array_equal(out, obs)


def test_k08_leading_one_is_squeezed_with_a_warning_pointing_at_the_caller():
    with pytest.warns(
        UserWarning,
        match=r"node 'x': observation has shape \(1, 3\), the per-sample shape is \(3,\)",
    ) as record:
        out = check_observation("x", np.ones((1, 3)), (3,))
    assert out.shape == (3,)
    assert record[0].filename == __file__


def test_k08_several_observations_are_rejected():
    with pytest.raises(ShapeError) as info:
        check_observation("x", np.ones((5, 3)), (3,))
    assert str(info.value) == "node 'x': 5 observations given, one expected (per-sample shape (3,))"


def test_k08_scalar_against_vector_names_both_shapes():
    with pytest.raises(
        ShapeError, match=r"node 'x': observation has shape \(\), .*per-sample shape is \(3,\)"
    ):
        check_observation("x", np.float64(1.0), (3,))
    # a scalar per sample against (3,): the simulator may be the odd one (K33), not only the file
    with pytest.raises(ShapeError) as info:
        check_observation("x", np.ones(3), ())
    assert str(info.value) == (
        "node 'x': the simulator returns a scalar, shape (), per sample, but the observation has "
        "shape (3,): either the simulator should return (3,) per sample, or 3 observations were "
        "given where one is expected"
    )
    with pytest.raises(
        ShapeError, match=r"observation has shape \(2,\), .*per-sample shape is \(3,\)"
    ):
        check_observation("x", np.ones(2), (3,))


def test_k08_never_adds_a_batch_axis():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert check_observation("x", np.ones((1, 3)), (1, 3)).shape == (1, 3)
    with pytest.raises(ShapeError, match=r"shape \(1, 1, 3\)"):
        check_observation("x", np.ones((1, 1, 3)), (3,))
    assert check_observation("s", np.float64(2.0), ()).shape == ()
