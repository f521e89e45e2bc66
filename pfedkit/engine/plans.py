"""A client's local update, the one way it is carried out: a method that states its training as a plan
(`Method.training = "plan"`) has the plan run here, one client at a time; a method that writes it as code has its own
`local_update` called.

One client at a time, a plan of SGD phases runs each phase with `Method.fit` (faster on a CPU than a cohort of one,
and the reference the cohort is tested against); a plan with `Joint` steps or `Apply` changes runs through the cohort's
interpreter as a cohort of one (`engine/cohort.py`), so such a method is written once. Both read a phase's settings
from `Phase.settings`, the cohort too.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Optional

import numpy as np
from torch import nn

from pfedkit.engine.client_step import Evaluation, after_update, begin_update, client_plan
from pfedkit.engine.cohort import Cohort, Slot
from pfedkit.methods.base import Method
from pfedkit.methods.plan import Apply, Joint, LocalPlan, Phase, cross_entropy
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State


def local_update(method: Method, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
    """(reply, new client state) of one client's local update, whichever way the method states it."""
    if method.training == "code":
        return method.local_update(payload, client, data, round)
    plan = client_plan(method, payload, client, data, round)
    return method.plan_result(run_plan(method, plan, data, round), plan, data, round)


def run_plan(method: Method, plan: LocalPlan, data: ClientData, round: int) -> dict[str, State]:
    """The plan for one client; its trained weights by model name."""
    if any(isinstance(stage, (Joint, Apply)) for stage in plan.phases):
        return run_as_cohort_of_one(method, plan, data, round)
    models: dict[str, SplitModel] = {}
    for phase in plan.phases:
        if phase.model not in models:
            models[phase.model] = method.load(plan.models[phase.model], slot=phase.model)
        run_phase(method, models[phase.model], phase, data, round)
    return {name: method.state_of(model) for name, model in models.items()}


def run_phase(method: Method, model: SplitModel, phase: Phase, data: ClientData, round: int) -> float:
    """One phase with Method.fit, in the settings Phase.settings decides."""
    settings = phase.settings(method.ctx.train, model, data.train_x.dim() == 4)
    sgd = dict(
        epochs=settings.epochs,
        lr=settings.lr,
        momentum=settings.momentum,
        weight_decay=settings.weight_decay,
        purpose=phase.purpose,
    )
    if settings.head_alone == "inputs":
        features, labels = phase.head_inputs
        head_only = SplitModel(nn.Identity(), model.head, model.feature_dim)
        return method.fit(head_only, replace(data, train_x=features, train_y=labels), round, parts=("head",), **sgd)
    if phase.head_features:  # on features computed once where Phase.settings allows, else through the frozen body
        return method.fit_head(model, data, round, **sgd)
    given, loss = phase.given, phase.loss

    def loss_fn(m: SplitModel, x: Any, y: Any) -> Any:
        return loss(m, dict(m.named_parameters()), x, y, given)

    plain = loss is cross_entropy  # fit's own loss: no parameter dict built every step
    return method.fit(model, data, round, parts=phase.parts, loss_fn=None if plain else loss_fn, **sgd)


class OneClient:
    """A client's data seen as a federation of one: what the cohort's interpreter reads."""

    def __init__(self, data: ClientData):
        self.data, self.train_x, self.train_y = data, data.train_x, data.train_y
        self.train_idx = {data.cid: np.arange(data.num_train)}

    def client(self, cid: int) -> ClientData:
        return self.data


class OneTask:
    def __init__(self, cid: int, round: int):
        self.cid, self.round = cid, round


def run_as_cohort_of_one(method: Method, plan: LocalPlan, data: ClientData, round: int) -> dict[str, State]:
    cohort = Cohort(method, OneClient(data))
    [trained] = cohort.run_plans([Slot(cohort, OneTask(data.cid, round), data, plan)])
    return trained


def train_client(
    method: Method, data: ClientData, client: State, payload: State, round: int, evaluate_after: bool = False
) -> tuple[State, State, Optional[Evaluation]]:
    """(reply, new client state, evaluation right after or None): one client's local update, the client step every
    place that trains a single client takes (engine/client_step.py)."""
    begin_update(method)
    reply, state = local_update(method, payload, client, data, round)
    return reply, state, after_update(method, data, payload, reply, state, round, evaluate_after)
