"""Ray for a sweep's driver: a local Ray started bound to this machine's loopback (or a
cluster joined at its address, its GCS checked first), whether the resources a spec asks
for are there (waiting for an autoscaler's workers), and a local Ray that a signal to the
whole process group left half-dead, stopped for good.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

import ray

from trials import validate
from trials.run_settings import DEFAULT_RESOURCE_WAIT_S
from trials.spec import SweepSpec


def local_gcs_gone(wait_s: float = 1.5) -> bool:
    """Whether the GCS of the local Ray this process started stopped listening (or stops
    within `wait_s`: a SIGTERM to the process group reaches it at the same moment as us,
    and it closes its port at once, long before its process exits)."""
    node = getattr(ray._private.worker, "_global_node", None)
    if node is None or not getattr(node, "gcs_address", None):
        return False
    host, port = node.gcs_address.rsplit(":", 1)
    deadline = time.monotonic() + wait_s
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=0.2):
                pass
        except OSError:
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def kill_local_ray() -> None:
    """Stop what is left of the local Ray this process started, without a word to its GCS
    (gone): `ray.shutdown()` would wait on it for a minute and then end the process."""
    import psutil

    # Ray's workers and agents are the raylet's children: found before the raylet dies and
    # they pass to init
    left = psutil.Process().children(recursive=True)
    node = getattr(ray._private.worker, "_global_node", None)
    if node is not None:
        node.kill_all_processes(check_alive=False, allow_graceful=False)
    for p in left:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(left, timeout=5)


def check_resources(spec: SweepSpec, autoscaling: bool, wait_s: float = DEFAULT_RESOURCE_WAIT_S,
                    poll_s: float = 5.0) -> None:
    """Refuse, before any work, a per-trial request that no node can hold: at once on a
    fixed cluster (the local Ray), after `wait_s` seconds on one that may scale up."""
    need = {"CPU": float(spec.resources.get("cpu", 1)), "GPU": float(spec.resources.get("gpu", 0))}

    def largest() -> dict[str, float]:
        nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
        return {k: max((n.get(k, 0.0) for n in nodes), default=0.0) for k in need}

    def fits() -> bool:
        return any(all(n["Resources"].get(k, 0.0) >= v for k, v in need.items())
                   for n in ray.nodes() if n.get("Alive"))

    deadline = time.monotonic() + (wait_s if autoscaling else 0.0)
    while not fits():
        if time.monotonic() >= deadline:
            have = largest()
            short = ", ".join(f"{k.lower()}={need[k]:g}" for k in need if need[k] > have[k]) or "cpu and gpu together"
            where = f"after waiting {wait_s:g} s for the cluster to scale" if autoscaling else "on this fixed Ray"
            raise ValueError(f"resources: a trial asks for {short}, which no node holds {where} "
                             f"(largest node: cpu={have['CPU']:g}, gpu={have['GPU']:g})")
        time.sleep(poll_s)


def check_local_resources(spec: SweepSpec) -> None:
    """The local Ray will hold this machine's cores and CUDA devices: refuse what it cannot."""
    problems = validate.local_problems(spec)
    if problems:
        raise ValueError(problems[0])


def init_ray(address: str | None, num_cpus: int | None = None) -> bool:
    """Connect to the cluster at `address`, or start a local Ray of this driver's own;
    True when this call started or joined it (the caller then shuts it down)."""
    if ray.is_initialized():
        return False
    # Ray's INFO lines ("Started a local Ray instance") are not the sweep's news
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
    if address:
        try:
            ray.init(address=address, **kwargs)
        except ConnectionError as e:
            raise ValueError(f"address {address}: no Ray cluster answered ({e}); if the cluster uses token "
                             "authentication, set RAY_AUTH_MODE=token and its token here (docs/team.md: Team "
                             "setup)") from None
    else:
        bind_loopback()
        # Ray turns token authentication on for a new local cluster (its default, kept) and
        # logs a notice inviting users to set RAY_AUTH_MODE=disabled: only that notice is muted
        logging.getLogger(RAY_AUTH_LOGGER).setLevel(logging.ERROR)
        # "local": always a new Ray of this driver's own, never one that `ray start` left
        # on the machine (found through /tmp/ray, which any local user can write)
        ray.init(address="local", num_cpus=num_cpus, **kwargs)
    return True


RAY_AUTH_LOGGER = "ray._private.authentication.authentication_token_setup"


def bind_loopback() -> None:
    """Make a local Ray's GCS, raylet and workers listen on 127.0.0.1 only.

    `ray.init(_node_ip_address="127.0.0.1")` is not enough: Ray resolves a loopback address
    back to the machine's. The one switch Ray reads for the node address is its "no
    clusters" mode (on by default on macOS and Windows); the environment variable carries it
    to the processes Ray starts, and the constant to this already-imported one.
    """
    from ray._private import ray_constants

    os.environ[ray_constants.ENABLE_RAY_CLUSTERS_ENV_VAR] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def check_gcs_reachable(address: str, timeout_s: float = 10.0) -> None:
    """A HOST:PORT address answers on TCP, checked before any work: `ray.init` retries a
    silent address for minutes."""
    if address == "auto" or ":" not in address:
        return  # Ray finds `auto` (RAY_ADDRESS, or the node's `ray start`) and says at once if it cannot
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s).close()
    except (OSError, ValueError) as e:
        raise ValueError(f"address {address}: nothing answers there ({getattr(e, 'strerror', None) or e}); "
                         "is the head started (`ray start --head --port PORT`)?") from None
