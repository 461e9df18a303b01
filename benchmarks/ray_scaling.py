"""The Ray backend's scaling table: frames/s against actors and nodes on a local multi-node
Ray cluster (Ray's `cluster_utils`, every node on this machine, loopback only), next to the
local backend on the same config, plus the transport cost per unroll.

On one machine the nodes share its cores: the table shows the backend's overhead and how
actors spread over nodes, not a real cluster's speed-up (docs/distributed.md).

    python benchmarks/ray_scaling.py --seconds 30 [--env ALE/Pong-v5] [--envs-per-actor 32]
"""

from __future__ import annotations

import argparse
import json
import os

# why: before Ray's first import: every port of the test cluster on loopback only.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", default="ALE/Pong-v5")
    parser.add_argument("--model", default="shallow")
    parser.add_argument("--envs-per-actor", type=int, default=32)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--rows", default="1x1,2x1,2x2,4x2", help="actors x nodes, comma-separated")
    args = parser.parse_args()

    import ray
    from ray.cluster_utils import Cluster

    from gazelle.bench.train import train_fps
    from gazelle.config import Config

    base = dict(
        env=args.env,
        model=args.model,
        envs_per_actor=args.envs_per_actor,
        batch_size=8,
        inference="local",
    )
    rows = []
    for row in args.rows.split(","):
        actors, nodes = (int(x) for x in row.split("x"))
        local, _ = train_fps(Config.of(**base, num_actors=actors), args.seconds)
        # why: each node declares enough CPUs for its share of the actors; Ray spreads them.
        per_node = -(-actors // nodes)
        head = {
            "num_cpus": per_node,
            "include_dashboard": False,
            "_system_config": {"worker_niceness": 0},
        }
        cluster = Cluster(initialize_head=True, head_node_args=head)
        for _ in range(nodes - 1):
            cluster.add_node(num_cpus=per_node)
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, logging_level="ERROR")
        try:
            config = Config.of(**base, num_actors=actors, backend="ray")
            fps, points = train_fps(config, args.seconds)
        finally:
            ray.shutdown()
            cluster.shutdown()
        get_ms = [p["ray/get_ms_per_unroll"] for p in points if "ray/get_ms_per_unroll" in p]
        rows.append(
            {
                "actors": actors,
                "nodes": nodes,
                "envs_per_actor": args.envs_per_actor,
                "local_fps": round(local),
                "ray_fps": round(fps),
                "ratio": round(fps / max(local, 1e-9), 2),
                "get_ms_per_unroll": round(get_ms[-1], 3) if get_ms else None,
            }
        )
        print(json.dumps(rows[-1]), flush=True)
    print(f"\n{args.env}, {args.model}, B=8, {args.seconds:.0f} s per run, {os.cpu_count()} cores")
    print(
        "| actors x envs | nodes | local frames/s | Ray frames/s | Ray / local "
        "| ray.get ms per env's unroll |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['actors']} x {r['envs_per_actor']} | {r['nodes']} | {r['local_fps']:,} | "
            f"{r['ray_fps']:,} | {r['ratio']:.2f} | {r['get_ms_per_unroll']} |"
        )
    transport(args.envs_per_actor)


def transport(envs: int, unroll_length: int = 20, frame=(4, 84, 84), calls: int = 20) -> None:
    """The cost of moving unrolls alone: a Ray actor returns an unroll-sized dict of numpy
    arrays (the Atari frames dominate: `(T+1) x envs x 4 x 84 x 84` bytes), on the driver's
    node and on another node (Ray's object manager copies it between the nodes' stores, over
    loopback TCP here), and the driver fetches it; ms per call and per env's unroll."""
    import time

    import numpy as np
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    head = {"num_cpus": 1, "include_dashboard": False, "_system_config": {"worker_niceness": 0}}
    cluster = Cluster(initialize_head=True, head_node_args=head)
    other = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR")

    class Source:
        def __init__(self) -> None:
            steps = unroll_length + 1
            self.unroll = {
                "frame": np.zeros((steps, envs, *frame), np.uint8),
                "policy_logits": np.zeros((steps, envs, 6), np.float32),
                **{k: np.zeros((steps, envs), np.float32) for k in ("reward", "baseline")},
            }

        def get(self) -> dict:
            return self.unroll

    try:
        here = ray.get_runtime_context().get_node_id()
        size = None
        for name, node in (("same node", here), ("other node", other.node_id)):
            strategy = NodeAffinitySchedulingStrategy(node_id=node, soft=False)
            source = ray.remote(Source).options(scheduling_strategy=strategy).remote()
            ray.get(source.get.remote())  # warm up
            start = time.perf_counter()
            for _ in range(calls):
                out = ray.get(source.get.remote())
            seconds = (time.perf_counter() - start) / calls
            size = sum(a.nbytes for a in out.values())
            print(
                f"transport ({name}): {seconds * 1000:.1f} ms per call of {size / 1e6:.1f} MB "
                f"({envs} envs' unrolls): {seconds * 1000 / envs:.2f} ms per env's unroll, "
                f"{size / seconds / 1e9:.2f} GB/s"
            )
    finally:
        ray.shutdown()
        cluster.shutdown()


if __name__ == "__main__":
    main()
