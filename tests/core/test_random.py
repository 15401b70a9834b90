"""Seeding: one SeedSequence per run, spawned per node and per chunk."""

from __future__ import annotations

import numpy as np
import pytest

from kestrel_core import ConfigError, seed_sequence, spawn_rngs


def test_seed_sequence_from_int_is_reproducible():
    a, b = seed_sequence(42), seed_sequence(np.int64(42))
    assert a.entropy == b.entropy == 42
    assert a.generate_state(4).tolist() == b.generate_state(4).tolist()


def test_seed_sequence_passes_sequences_through_and_draws_fresh_entropy():
    seq = np.random.SeedSequence(3)
    assert seed_sequence(seq) is seq
    assert seed_sequence(None).entropy != seed_sequence(None).entropy


@pytest.mark.parametrize("seed", [-1, 1.5, True, "7", [1, 2]])
def test_seed_sequence_rejects_invalid_seeds(seed):
    with pytest.raises(ConfigError, match="seed must be a non-negative integer"):
        seed_sequence(seed)


def test_spawn_rngs_gives_independent_reproducible_pcg64_streams():
    first = spawn_rngs(seed_sequence(1), 3)
    again = spawn_rngs(seed_sequence(1), 3)
    assert all(isinstance(g.bit_generator, np.random.PCG64) for g in first)
    draws = [g.random(4).tolist() for g in first]
    assert draws == [g.random(4).tolist() for g in again]
    assert len({tuple(d) for d in draws}) == 3  # different streams


def test_node_then_chunk_scheme():
    # run seed → one child per node → one per chunk: a node's chunk streams do not depend on
    # how many chunks another node draws
    root = seed_sequence(11)
    theta_seq, x_seq = root.spawn(2)
    x_chunks = [g.random(3).tolist() for g in spawn_rngs(x_seq, 2)]
    root2 = seed_sequence(11)
    theta2, x2 = root2.spawn(2)
    spawn_rngs(theta2, 5)  # node theta uses more chunks this time
    assert [g.random(3).tolist() for g in spawn_rngs(x2, 2)] == x_chunks


def test_spawning_again_gives_new_streams_and_zero_is_allowed():
    seq = seed_sequence(5)
    a, b = spawn_rngs(seq, 1)[0], spawn_rngs(seq, 1)[0]
    assert a.random() != b.random()
    assert spawn_rngs(seq, 0) == []
    assert len(spawn_rngs(9, 2)) == 2
