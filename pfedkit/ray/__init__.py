"""The Ray backend (`run.backend = "ray"`): client work on actors of a Ray cluster, on this machine or many.

Each actor holds the method and the federated data once, for the whole run; a round's tasks go to whichever actor is
free, and since every draw is seeded by (seed, round, client, purpose) and the server sorts replies by client, the
run's metrics do not depend on which actor ran what, nor on the order replies arrive: they equal the local backend's.
An actor that dies is restarted and its task retried (Ray's actor restarts); a cluster that cannot be reached fails
before round 0. Importing this module registers the backend; the core never imports Ray.
"""

from pfedkit.ray.executor import RayExecutor

__all__ = ["RayExecutor"]
