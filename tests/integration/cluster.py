"""A two-node local Ray cluster for the tests: ``python -m tests.integration.cluster``.

Starts a head node (1 CPU) and a second raylet (1 CPU and ``{"sim": 2}``) with
``ray.cluster_utils.Cluster``, prints ``ADDRESS <gcs address>`` and ``WORKER <node id>`` and
keeps them up until its stdin closes; then it stops exactly the processes it started (never
``ray stop``, which would stop every Ray on the machine).
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
# this cluster runs without authentication, whatever the parent process uses: a test session
# whose local Ray runs in token mode (Kestrel's default) exports RAY_AUTH_MODE=token, which the
# cluster would inherit while the test's driver says RAY_AUTH_MODE=disabled
os.environ["RAY_AUTH_MODE"] = "disabled"


def main() -> None:
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        connect=False,
        head_node_args={"num_cpus": 1, "include_dashboard": False},
    )
    try:
        worker = cluster.add_node(num_cpus=1, resources={"sim": 2})
        cluster.wait_for_nodes()
        print(f"ADDRESS {cluster.address}", flush=True)
        print(f"WORKER {worker.node_id}", flush=True)
        sys.stdin.read()  # until the test closes our stdin
    finally:
        cluster.shutdown()


if __name__ == "__main__":
    main()
