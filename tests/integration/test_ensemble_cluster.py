"""Issue 31 item 2: an ensemble whose members train on two machines of a ``ray start`` cluster.

A head (1 CPU, ``kestrel_head``) and two worker nodes (1 CPU and one ``ensemble_slot`` each,
:class:`tests.faults.lost_node.LostNodeCluster`, each worker in its own mount namespace). The
estimator node asks for one ``ensemble_slot`` and half a CPU per actor, so the two members of
``ensemble: 2`` can only run on different workers. A driver in a subprocess deploys the graph,
fills the store with prior simulations, trains both members at once and prints the node
actor's status (one entry per member: its Ray node and its epochs) and the saved file.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from ..faults.lost_node import LostNodeCluster
from .helpers import REPO
from .real_cluster import unshare_works

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not unshare_works(),
        reason="needs `unshare --mount` and tmpfs mounts for worker nodes of their own",
    ),
    pytest.mark.timeout(600),
]

DRIVER = r"""
import json, sys
import numpy as np
import ray
from kestrel_core import load_config
from kestrel_ray import DeployedGraph, init_ray
from kestrel_torch.estimators._ensemble import unpack_members

address, folder = sys.argv[1], sys.argv[2]
init_ray(address)  # token authentication, as kestrel --address joins
config = load_config(folder + "/config.yml", run_dir=folder + "/run")
with DeployedGraph.from_config(config, seed=5) as dg:
    dg.append(dg.sample(256))
    refs = dg.start_training()
    ray.get(list(refs.values()), timeout=300)
    for _ in range(20):  # a member busy past the status wait reports no node: ask again
        status = dg.status(timeout=30)
        if all(m["node_id"] for m in status["z"]["ensemble"]):
            break
    dg.save()
head = [n["NodeID"] for n in ray.nodes() if n["Alive"] and "kestrel_head" in n["Resources"]]
with open(folder + "/run/graph/z/estimator.pt", "rb") as f:
    members = unpack_members(f.read())
print(json.dumps({
    "ensemble": [
        {"node_id": m["node_id"], "epoch": m["estimator"]["epoch"]}
        for m in status["z"]["ensemble"]
    ],
    "head": head,
    "saved": len(members or []),
}))
"""

CONFIG = {
    "buffer": {"min_samples": 64, "max_samples": 1024, "validation_samples": 32},
    "graph": {
        "z": {
            "simulator": {"_target_": "kestrel_core.Product", "priors": [["uniform", 0, 1]] * 2},
            "evidence": ["x"],
            "estimator": {
                "_target_": "kestrel_torch.GaussianPosterior",
                "max_epochs": 3,
                "ensemble": 2,
            },
            "ray": {"num_cpus": 0.5, "resources": {"ensemble_slot": 1}},
        },
        "x": {
            "simulator": {"_target_": "kestrel_core.testing.models.Noise"},
            "parents": ["z"],
            "observed": [0.4, 0.6],
        },
    },
}


@pytest.fixture
def folder():
    base = Path(tempfile.mkdtemp(prefix="kestrel-ens-"))
    (base / "hidden").mkdir()
    (base / "config.yml").write_text(json.dumps(CONFIG))
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_members_train_on_two_nodes(folder):
    with LostNodeCluster(
        [folder / "hidden"], {"ensemble_slot": 1}, workers=2, worker_cpus=1
    ) as cluster:
        done = subprocess.run(
            [sys.executable, "-c", DRIVER, cluster.address, str(folder)],
            capture_output=True,
            text=True,
            timeout=420,
            env=cluster.driver_env(),
            cwd=str(REPO),
        )
    assert done.returncode == 0, done.stderr[-4000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    nodes = [m["node_id"] for m in out["ensemble"]]
    assert len(nodes) == 2 and len(set(nodes)) == 2, out  # two members, two machines
    assert not set(nodes) & set(out["head"]), out  # both on the workers (ensemble_slot)
    assert [m["epoch"] for m in out["ensemble"]] == [3, 3], out  # both trained
    assert out["saved"] == 2, out  # and both are in the saved estimator.pt
