"""Cohort training: the clients of a round trained together as one batched computation, and their personalized models
evaluated the same way (`run.cohort`).

A client's batch-10 step of a small CNN is a few dozen tiny kernels, so a GPU training clients one after another sits
idle. Here every client's weights are stacked along a leading dimension, each step runs all the clients' batches
through `torch.func.vmap(functional_call)`, one backward pass gives every client its own gradient (the clients' losses
are independent, so the gradient of their sum is each client's own), and a functional SGD (momentum, weight decay, as
`torch.optim.SGD`) updates the stack. Batch orders and augmentation draws are the very ones `Method.fit` takes, seeded
by (seed, round, client, purpose), so a cohort equals the per-client path up to float rounding. Clients with fewer
steps drop out of later steps; a step's clients are grouped by batch size, so partial last batches are exact, and
BatchNorm statistics (each client's own, stacked) see exactly the client's batch. Nothing in the step loop reads a
value back to the host.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from pfedkit.engine.evaluation import evaluate_model
from pfedkit.methods.augment import apply_crop_flip, crop_flip_draws
from pfedkit.methods.base import Method, compute_features, deterministic_body, part_of, uses_batchnorm
from pfedkit.methods.plan import Apply, FunctionalNet, Joint, LocalPlan, Phase, sgd_step
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State
from pfedkit.seeding import seeded_torch, torch_generator

EVAL_SAMPLES = 8192  # samples in one batched evaluation pass, over all the clients in it


def has_dropout(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())


def no_device_mode() -> Any:
    """Inside a simulation on a GPU, torch's default-device mode sees every torch call; the cohort's step loop names
    its devices itself and skips that per-call cost."""
    return torch._C.DisableTorchFunction()


def stack(states: list[State]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([state[key] for state in states]) for key in states[0]}


@dataclass
class Schedule:
    """The step table of one phase over a cohort: which samples each client's t-th batch takes."""

    rows: torch.Tensor  # [T, C, B] rows of the data pool (on the device); padding where a client has no such batch
    sizes: np.ndarray  # [T, C] batch sizes; 0 once a client has run out of batches
    draws: Optional[torch.Tensor]  # [T, C, B, 3] augmentation draws (crop-flip), or None

    def groups(self, t: int) -> list[tuple[int, Optional[np.ndarray]]]:
        """The step's clients by batch size: (size, the clients' slots, or None for all of them)."""
        sizes = self.sizes[t]
        by_size: dict[int, list[int]] = defaultdict(list)
        for slot, size in enumerate(sizes.tolist()):
            if size:
                by_size[size].append(slot)
        if len(by_size) == 1 and len(next(iter(by_size.values()))) == len(sizes):
            return [(next(iter(by_size)), None)]
        return [(size, np.array(slots)) for size, slots in sorted(by_size.items())]


class Cohort:
    """Runs one method's plans and evaluations for many clients at once, on the device the data are on."""

    def __init__(self, method: Method, fed: Any, cohort_size: int = 0):
        self.method, self.fed, self.cohort_size = method, fed, cohort_size
        self.device = fed.train_x.device
        self._slots: dict[tuple[int, ...], torch.Tensor] = {}

    # ---- what can be batched ----
    def trains(self) -> bool:
        return self.method.batched()[0] and not has_dropout(self.method.model)

    def evaluates(self) -> bool:
        return self.method.batched()[1]

    # ---- training ----
    def train(self, tasks: list[Any]) -> Iterator[tuple[int, tuple[State, State, Any]]]:
        """(cid, (reply, new client state, evaluation after the update or None)) for each training task."""
        method, groups = self.method, defaultdict(list)
        prepared = []
        for task in sorted(tasks, key=lambda t: t.cid):
            client = task.client() if callable(task.client) else task.client
            data = self.fed.client(task.cid)
            plan = method.local_plan(task.payload, client, data, task.round)
            if plan is None:  # a reading the method writes as code only (FedAFK's APFL mu step): one at a time
                reply, state = method.local_update(task.payload, client, data, task.round)
                yield task.cid, (reply, state, self.after_local(task, reply, state, data))
                continue
            prepared.append((task, client, data, plan))
            groups[tuple(p.shape() for p in plan.phases)].append(len(prepared) - 1)
        for members in groups.values():  # clients whose plans differ only in their tensors train together
            size = self.cohort_size or len(members)
            for start in range(0, len(members), size):
                chunk = [prepared[i] for i in members[start : start + size]]
                trained = self.run_plans(
                    [plan for _, _, _, plan in chunk], [data for _, _, data, _ in chunk], chunk[0][0].round
                )
                for (task, client, data, plan), weights in zip(chunk, trained):
                    reply, state = method.plan_result(weights, plan, data, task.round)
                    yield task.cid, (reply, state, self.after_local(task, reply, state, data))

    def after_local(self, task: Any, reply: State, state: State, data: ClientData) -> Optional[tuple[int, float, int]]:
        """The evaluation right after the update, with eval.point after-local: as the per-client path, its own draws."""
        if not task.evaluate_after:
            return None
        method = self.method
        with seeded_torch(method.ctx.seed, task.round, task.cid, "after-local-eval"):
            model = method.trained_model(reply, state, task.payload, data, task.round)
            return evaluate_model(model, data.test_x, data.test_y)

    def run_plans(self, plans: list[LocalPlan], datas: list[ClientData], round: int) -> list[dict[str, State]]:
        """Every client's plan at once; each client's trained weights by model name."""
        stacks = {name: stack([plan.models[name] for plan in plans]) for name in plans[0].models}
        for index, stage in enumerate(plans[0].phases):
            if isinstance(stage, Joint):
                self.run_joint(stacks, stage, datas, round)
            elif isinstance(stage, Apply):
                with torch.no_grad():
                    stage.fn(stacks)
            else:
                self.run_phase(stacks[stage.model], [plan.phases[index] for plan in plans], datas, round)
        return [
            {
                name: {key: value[slot].detach().clone() for key, value in stacks[name].items()}
                for name in plans[0].trained_models()
            }
            for slot in range(len(plans))
        ]

    def run_joint(
        self, stacks: dict[str, dict[str, torch.Tensor]], stage: Joint, datas: list[ClientData], round: int
    ) -> None:
        """A step the method writes, over several stacked models, on every batch of the clients' shared schedule."""
        rows = [self.train_rows(d.cid) for d in datas]
        augment = self.method.ctx.train.augment == "crop-flip" and self.fed.train_x.dim() == 4
        schedule = self.schedule(stage, datas, rows, round, augment=augment, drop_single=stage.drop_single)
        self.run_steps(stacks, schedule, self.fed.train_x, self.fed.train_y, stage.step)

    def run_steps(
        self,
        state: dict[str, dict[str, torch.Tensor]],
        schedule: "Schedule",
        pool_x: torch.Tensor,
        pool_y: torch.Tensor,
        step: Callable[[dict, torch.Tensor, torch.Tensor], None],
    ) -> None:
        """`step(view, x, y)` for each step of the schedule, once per batch size among the step's clients: `view`
        holds the stacks of those clients (the stacks themselves when all take part, else copies written back after)
        and changes them in place."""
        with no_device_mode():
            for t in range(len(schedule.sizes)):
                for size, slots in schedule.groups(t):
                    if slots is None:
                        view, rows = state, schedule.rows[t, :, :size]
                        draws = None if schedule.draws is None else schedule.draws[t, :, :size]
                    else:
                        index = self.slot_index(slots)
                        view = {
                            name: {k: v.index_select(0, index) for k, v in part.items()} for name, part in state.items()
                        }
                        rows = schedule.rows[t].index_select(0, index)[:, :size]
                        draws = None if schedule.draws is None else schedule.draws[t].index_select(0, index)[:, :size]
                    x = pool_x[rows]
                    if draws is not None:
                        x = apply_crop_flip(x, draws)
                    step(view, x, pool_y[rows])
                    if slots is not None:
                        with torch.no_grad():
                            for name, part in view.items():
                                for k, value in part.items():
                                    state[name][k].index_copy_(0, index, value)

    def run_phase(
        self, weights: dict[str, torch.Tensor], phases: list[Phase], datas: list[ClientData], round: int
    ) -> None:
        """One phase of every client's plan (the same but for their tensors) on the stacked weights, in place."""
        method, cfg, phase = self.method, self.method.ctx.train, phases[0]
        given = stack([p.given for p in phases]) if phase.given else {}
        template = method.working_model(phase.model)
        lr = cfg.lr if phase.lr is None else phase.lr
        momentum = cfg.momentum if phase.momentum is None else phase.momentum
        weight_decay = cfg.weight_decay if phase.weight_decay is None else phase.weight_decay
        param_names = [name for name, _ in template.named_parameters()]
        pool_x, pool_y, rows = self.fed.train_x, self.fed.train_y, [self.train_rows(d.cid) for d in datas]
        head_inputs = phase.head_inputs is not None
        if head_inputs or (phase.head_features and deterministic_body(template) and cfg.augment == "none"):
            # the head alone, on given inputs (an embedding set) or, as fit_head, on features computed once
            if head_inputs:
                pool_x = torch.cat([p.head_inputs[0] for p in phases])
                pool_y = torch.cat([p.head_inputs[1] for p in phases])
                sizes = [len(p.head_inputs[1]) for p in phases]
                starts = np.cumsum([0] + sizes[:-1]).tolist()
                rows = [torch.arange(a, a + n, device=self.device) for a, n in zip(starts, sizes)]
                datas = [replace(d, train_x=p.head_inputs[0], train_y=p.head_inputs[1]) for d, p in zip(datas, phases)]
            else:
                pool_y = torch.cat([pool_y[r] for r in rows])
                pool_x, rows = self.features(template, weights, rows)
            template = SplitModel(nn.Identity(), template.head, template.feature_dim)
            param_names = [name for name in param_names if part_of(name) == "head"]
            weights = {key: value for key, value in weights.items() if part_of(key) == "head"}
        trained = [name for name in param_names if part_of(name) in phase.parts]
        fixed = [key for key in weights if key not in trained]
        schedule = self.schedule(
            phase,
            datas,
            rows,
            round,
            augment=cfg.augment == "crop-flip" and pool_x.dim() == 4,
            drop_single=uses_batchnorm(template),
        )
        momenta = {name: torch.zeros_like(weights[name]) for name in trained} if momentum else {}
        loss = phase.loss

        def client_loss(train_w: dict, fixed_w: dict, x: torch.Tensor, y: torch.Tensor, given_c: dict) -> torch.Tensor:
            every = {**train_w, **fixed_w}
            return loss(FunctionalNet(template, every), {n: every[n] for n in param_names}, x, y, given_c)

        batched_loss = vmap(client_loss)

        def step(view: dict, x: torch.Tensor, y: torch.Tensor) -> None:
            w = view["weights"]
            train_w = {n: w[n].detach().requires_grad_(True) for n in trained}  # leaves sharing the stacks' storage
            fixed_w = {k: w[k] for k in fixed}  # BatchNorm updates its running statistics in place, here
            losses = batched_loss(train_w, fixed_w, x, y, view["given"])
            params = list(train_w.values())
            grads = torch.autograd.grad(losses.sum(), params, allow_unused=True)
            with torch.no_grad():
                sgd_step(params, list(grads), list(view["momenta"].values()) or None, lr, momentum, weight_decay)

        template.train()
        self.run_steps({"weights": weights, "momenta": momenta, "given": given}, schedule, pool_x, pool_y, step)

    def slot_index(self, slots: np.ndarray) -> torch.Tensor:
        key = tuple(slots.tolist())
        if key not in self._slots:
            self._slots[key] = torch.as_tensor(slots, dtype=torch.long, device=self.device)
        return self._slots[key]

    def train_rows(self, cid: int) -> torch.Tensor:
        return torch.as_tensor(self.fed.train_idx[cid], dtype=torch.long, device=self.device)

    @torch.no_grad()
    def features(
        self, template: SplitModel, weights: dict[str, torch.Tensor], rows: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Each client's training features through its own body, in one pool; each client's rows in it."""
        feats, offsets, start = [], [], 0
        for slot, client_rows in enumerate(rows):
            net = FunctionalNet(template, {k: v[slot] for k, v in weights.items()})
            feats.append(compute_features(net, self.fed.train_x[client_rows]))  # as fit_head computes them
            offsets.append(torch.arange(start, start + len(client_rows), device=self.device))
            start += len(client_rows)
        return torch.cat(feats), offsets

    def schedule(
        self,
        phase: Phase,
        datas: list[ClientData],
        rows: list[torch.Tensor],
        round: int,
        augment: bool,
        drop_single: bool,
    ) -> Schedule:
        """Each client's batches from `Method.batches` (the same seeded orders), laid out as a step table."""
        method = self.method
        per_client, per_draws = [], []
        for data, client_rows in zip(datas, rows):
            order = list(method.batches(data, round, phase.purpose, phase.epochs, drop_single))
            cuts = np.cumsum([len(idx) for idx in order])[:-1]
            flat = torch.cat(order).to(self.device) if order else torch.zeros(0, dtype=torch.long, device=self.device)
            per_client.append(np.split(client_rows[flat].cpu().numpy(), cuts))  # one read back per client
            if augment:
                gen = torch_generator(method.ctx.seed, round, data.cid, phase.purpose + "/augment")
                drawn = [crop_flip_draws(len(idx), gen) for idx in order]
                per_draws.append(np.split(torch.cat(drawn).cpu().numpy(), cuts) if drawn else [])
        steps = max((len(b) for b in per_client), default=0)
        width = max((len(batch) for b in per_client for batch in b), default=1)
        table = np.zeros((steps, len(datas), width), dtype=np.int64)
        sizes = np.zeros((steps, len(datas)), dtype=np.int64)
        draws = np.zeros((steps, len(datas), width, 3), dtype=np.int64) if augment else None
        for slot, batches in enumerate(per_client):
            for t, batch in enumerate(batches):
                table[t, slot, : len(batch)] = batch
                sizes[t, slot] = len(batch)
                if augment:
                    draws[t, slot, : len(batch)] = per_draws[slot][t]
        return Schedule(
            torch.as_tensor(table, device=self.device),
            sizes,
            None if draws is None else torch.as_tensor(draws, device=self.device),
        )

    # ---- evaluation ----
    def evaluate(self, tasks: list[Any]) -> Iterator[tuple[int, tuple[int, float, int]]]:
        """(cid, (correct, summed cross-entropy, samples)) of each client's personalized model on its test split."""
        method, round = self.method, tasks[0].round if tasks else 0
        tasks = sorted(tasks, key=lambda t: t.cid)
        size = self.cohort_size or len(tasks) or 1
        for start in range(0, len(tasks), size):
            chunk = tasks[start : start + size]
            states = []
            for task in chunk:
                client = task.client() if callable(task.client) else task.client
                states.append(method.evaluation_weights(client, task.payload, self.fed.client(task.cid), round))
            yield from zip([t.cid for t in chunk], self.evaluate_stacked(stack(states), [t.cid for t in chunk]))

    @torch.no_grad()
    def evaluate_stacked(self, weights: dict[str, torch.Tensor], cids: list[int]) -> list[tuple[int, float, int]]:
        template = self.method.model
        template.eval()
        rows = [torch.as_tensor(self.fed.test_idx[cid], dtype=torch.long, device=self.device) for cid in cids]
        counts = np.array([len(r) for r in rows])
        clients = len(cids)
        correct = torch.zeros(clients, dtype=torch.long, device=self.device)
        loss = torch.zeros(clients, dtype=torch.float64, device=self.device)
        width = max(1, EVAL_SAMPLES // max(clients, 1))
        forward = vmap(lambda w, x: functional_call(template, w, (x,)))
        with no_device_mode():
            padded = torch.zeros(clients, int(counts.max(initial=0)), dtype=torch.long, device=self.device)
            for slot, r in enumerate(rows):
                padded[slot, : len(r)] = r
            for begin in range(0, int(counts.max(initial=0)), width):
                active = np.flatnonzero(counts > begin)
                index = self.slot_index(active)
                end = min(begin + width, int(counts[active].max()))
                chunk_rows = padded.index_select(0, index)[:, begin:end]
                valid = (
                    torch.arange(begin, end, device=self.device)
                    < torch.as_tensor(counts[active], device=self.device)[:, None]
                )
                w = weights if len(active) == clients else {k: v.index_select(0, index) for k, v in weights.items()}
                logits = forward(w, self.fed.test_x[chunk_rows])
                target = self.fed.test_y[chunk_rows]
                hits = ((logits.argmax(-1) == target) & valid).sum(1)
                losses = F.cross_entropy(logits.flatten(0, 1), target.flatten(), reduction="none").view(valid.shape)
                correct.index_add_(0, index, hits)
                loss.index_add_(0, index, (losses * valid).sum(1).double())
        return [(int(c), float(s), int(n)) for c, s, n in zip(correct.tolist(), loss.tolist(), counts.tolist())]


def cohort_settings(run: Any, device: torch.device) -> bool:
    """Whether a run trains in cohorts: run.cohort "on", or "auto" on a GPU with the simulation in one process."""
    if run.cohort == "auto":
        return device.type == "cuda" and run.backend == "local" and not run.gpus_per_worker
    return run.cohort == "on"
