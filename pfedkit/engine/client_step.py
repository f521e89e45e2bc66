"""One client's step, the same wherever it runs (this process, a worker process, a Ray actor, a Flower node, a
cohort): its evaluation at the round start (`evaluate_client`), and its local update (`engine/plans.train_client`):
the draws of earlier updates forgotten (`begin_update`), the update (the method's plan or code), and with eval.point
after-local its evaluation right after (`after_update`), with its own seeded draws so that measuring changes no other
number. A cohort trains its clients together between `begin_update` and `after_update`.
"""

from __future__ import annotations

from typing import Optional

from pfedkit.engine.evaluation import evaluate_model
from pfedkit.errors import PfedkitError
from pfedkit.methods.base import Method
from pfedkit.methods.plan import LocalPlan
from pfedkit.records import ClientData, State
from pfedkit.seeding import seeded_torch

Evaluation = tuple[int, float, int]  # (correct, summed cross-entropy, samples) on the client's test split


def evaluate_client(method: Method, data: ClientData, client: State, payload: State, round: int) -> Evaluation:
    """The client's personalized model on its own test split."""
    model = method.personalized_model(client, payload, data, round)
    return evaluate_model(model, data.test_x, data.test_y)


def begin_update(method: Method) -> None:
    """A new local update begins: the draws before it were another update's (a retried task repeats its own)."""
    method.forget_draws()


def client_plan(method: Method, payload: State, client: State, data: ClientData, round: int) -> LocalPlan:
    """The plan of a method whose training is a plan; one that returns none is told how to declare itself."""
    plan = method.local_plan(payload, client, data, round)
    if plan is None:
        raise PfedkitError(
            f"method {method.name} declares training = 'plan' but its local_plan returned None for client "
            f"{data.cid}; return a LocalPlan, or declare training = 'code' and write local_update"
        )
    return plan


def after_update(
    method: Method, data: ClientData, payload: State, reply: State, state: State, round: int, evaluate_after: bool
) -> Optional[Evaluation]:
    """With eval.point after-local, the model the update left on the client's test split; else None."""
    if not evaluate_after:
        return None
    with seeded_torch(method.ctx.seed, round, data.cid, "after-local-eval"):
        model = method.trained_model(reply, state, payload, data, round)
        return evaluate_model(model, data.test_x, data.test_y)
