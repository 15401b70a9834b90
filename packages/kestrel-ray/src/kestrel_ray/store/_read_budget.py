"""How many bytes of blocks one read may ask Ray for at once: a share of this node's store.

``ray.get`` pulls every object it is asked for into the object store of the node the caller runs
on, and keeps them there while it waits for the rest. A read larger than that store (a buffer
beyond the object store, spilled to disk) then makes Ray restore into memory it does not have:
on Ray 2.60 with a 512 MiB store, one ``ray.get`` of 1.6 GB of spilled blocks took 5–10 s, the
same blocks asked for 128 MiB at a time 0.6–2 s (``benchmarks/RESULTS.md``). Reads of the
buffer (:class:`~kestrel_ray.RayBufferView`, the end-of-launch snapshot) therefore resolve their
blocks in groups of at most :func:`read_budget` bytes
(:func:`kestrel_core.store.read_checkout`).
"""

from __future__ import annotations

import ray

__all__ = ["READ_SHARE", "read_budget"]

#: the share of this node's object store one group of a read may take
READ_SHARE = 0.25

_stores: dict[str, int] = {}  # Ray node id → bytes of its object store (0: unknown)


def read_budget(share: float = READ_SHARE) -> int | None:
    """``share`` of the object store of the node this process runs on, in bytes.

    Returns:
        An int > 0, or ``None`` when Ray is not running here or the node's store size is
        unknown (then a read asks for everything at once).
    """
    if not ray.is_initialized():
        return None
    node = ray.get_runtime_context().get_node_id()
    if node not in _stores:  # asked of the GCS once per node, found or not: reads are frequent
        infos = [n for n in ray.nodes() if n.get("NodeID") == node]
        _stores[node] = (
            int(infos[0].get("Resources", {}).get("object_store_memory", 0)) if infos else 0
        )
    size = _stores[node]
    return max(1, int(size * share)) if size > 0 else None
