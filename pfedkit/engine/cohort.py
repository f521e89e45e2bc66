"""Cohort training: the clients of a round (of one run, or of several runs differing only in seed) trained together as
one batched computation, and their personalized models evaluated the same way (`run.cohort`).

A client's batch-10 step of a small CNN is a few dozen tiny kernels, so a GPU training clients one after another sits
idle. Here every client's weights are stacked along a leading dimension, each step runs all the clients' batches
through `torch.func.vmap(functional_call)`, one backward pass gives every client its own gradient (the clients' losses
are independent, so the gradient of their sum is each client's own), and a functional SGD (momentum, weight decay, as
`torch.optim.SGD`) updates the stack. Batch orders and augmentation draws are the very ones `Method.fit` takes, seeded
by (seed, round, client, purpose), so a cohort equals the per-client path up to float rounding.

Static shapes: the clients are ordered by training size, so at each step the clients still training are a prefix of
the stack and those ending on a partial batch sit next to each other; a step runs on slices of the stacks (views, no
gather or scatter), one slice per batch size, so partial batches and BatchNorm statistics are exact without padding.
A phase's batches are gathered (and augmented) into buffers ahead of the steps, a piece at a time. The stacks live in
buffers kept across rounds, so on a GPU each repeated step shape is captured once as a CUDA graph and replayed
(`run.cohort_step`); a step that cannot be captured runs eagerly, and the run's summary says which ran. Nothing in the
step loop reads a value back to the host.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, vmap

from pfedkit.engine.chunk_sizes import ChunkSizes
from pfedkit.engine.client_step import after_update, begin_update, client_plan
from pfedkit.engine.conv_forms import ConvForms
from pfedkit.methods.augment import apply_crop_flip, crop_flip_draws
from pfedkit.methods.base import Method, part_of
from pfedkit.methods.functional import FunctionalNet, per_client, sgd_step
from pfedkit.methods.local_sgd import compute_features
from pfedkit.methods.plan import Apply, Joint, LocalPlan, Phase, augments
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State
from pfedkit.seeding import torch_generator

EVAL_SAMPLES = 8192  # samples in one batched evaluation pass, over all the clients in it
GATHER_BYTES = 256 * 2**20  # a phase's batches are gathered ahead in pieces of at most this many bytes
WARMUP = 2  # eager runs of a step shape before it is captured: a CUDA graph needs a warmed-up step


def has_dropout(model: nn.Module) -> bool:
    return any(isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0 for m in model.modules())


def no_device_mode() -> Any:
    """Inside a simulation on a GPU, torch's default-device mode sees every torch call; the cohort's step loop names
    its devices itself and skips that per-call cost."""
    return torch._C.DisableTorchFunction()


def stack(states: list[State]) -> dict[str, torch.Tensor]:
    return {key: torch.stack([state[key] for state in states]) for key in states[0]}


@dataclass
class Slot:
    """One client's local update in a cohort: the run it belongs to, its task, data and plan (which holds what it
    starts from), and where its run's training data start in the cohort's data pool."""

    run: "Cohort"
    task: Any
    data: ClientData
    plan: LocalPlan
    offset: int = 0

    @property
    def method(self) -> Method:
        return self.run.method

    def rows(self) -> torch.Tensor:
        """Its training samples' rows in the cohort's data pool."""
        fed = self.run.fed
        return torch.as_tensor(fed.train_idx[self.task.cid], dtype=torch.long, device=fed.train_x.device) + self.offset


@dataclass(frozen=True)
class Group:
    """Consecutive slots [start, stop) that each take one batch of `size` samples at one step: a step on a slice of
    every stack. `at`: where its batches start in the layout's rows."""

    start: int
    stop: int
    size: int
    at: int


@dataclass
class Layout:
    """A phase's batches over the cohort's slots in the order they run: step by step, each step's clients split into
    runs of consecutive slots with one batch size (with slots ordered by training size, mostly one run: the clients
    still training are a prefix). `rows` [N] and `draws` [N, 3] hold the batches' pool rows and augmentation draws in
    that order."""

    groups: list[Group]
    rows: torch.Tensor
    draws: Optional[torch.Tensor]

    def pieces(
        self, pool_x: torch.Tensor, pool_y: torch.Tensor, limit_bytes: int = GATHER_BYTES
    ) -> Iterator[tuple[list[Group], torch.Tensor, torch.Tensor, int]]:
        """The groups in pieces whose batches are gathered (and augmented) at once: (groups, x, y, first row)."""
        per_sample = max(pool_x[:1].numel() * pool_x.element_size(), 1)
        limit = max(limit_bytes // per_sample, 1)
        start, count, first = 0, 0, 0
        for i, group in enumerate(self.groups):
            n = (group.stop - group.start) * group.size
            if count and count + n > limit:
                yield self.gather(self.groups[start:i], pool_x, pool_y, first, first + count)
                start, first, count = i, first + count, 0
            count += n
        if count:
            yield self.gather(self.groups[start:], pool_x, pool_y, first, first + count)

    def gather(
        self, groups: list[Group], pool_x: torch.Tensor, pool_y: torch.Tensor, begin: int, end: int
    ) -> tuple[list[Group], torch.Tensor, torch.Tensor, int]:
        rows = self.rows[begin:end]
        x = pool_x[rows]
        if self.draws is not None:
            x = apply_crop_flip(x, self.draws[begin:end])
        return groups, x, pool_y[rows], begin


def runs_of_sizes(sizes: list[int]) -> list[tuple[int, int, int]]:
    """Maximal runs of consecutive equal, non-zero sizes: (start, stop, size)."""
    runs, start = [], None
    for slot, size in enumerate([*sizes, 0]):
        if start is not None and size != sizes[start]:
            runs.append((start, slot, sizes[start]))
            start = None
        if start is None and size:
            start = slot
    return runs


class StepRunner:
    """Runs the steps of cohort phases: eagerly, or (on a GPU, `cuda-graph`) each step shape seen WARMUP times is
    captured once as a CUDA graph and replayed from then on, with the step's batch copied into the graph's input
    buffers. A shape whose capture fails runs eagerly from then on; the first failure is kept for the run's record.
    `replay` is the same bookkeeping without CUDA (the step called on the captured buffers): the CPU tests of it."""

    MODES = ("eager", "cuda-graph", "replay")

    def __init__(self, mode: str = "eager", conv_forms: Optional[ConvForms] = None):
        if mode not in self.MODES:
            raise ValueError(f"unknown cohort step mode {mode!r}; modes: {', '.join(self.MODES)}")
        self.mode = mode
        self.conv_forms = conv_forms or ConvForms()
        self.captured: dict[Any, tuple[Any, torch.Tensor, torch.Tensor, Callable, dict]] = {}
        self.seen: Counter = Counter()
        self.refused: set = set()
        self.counts: Counter = Counter()
        self.failure: Optional[str] = None
        self.pool = None
        self.stream = None

    def run(self, key: Any, step: Callable, view: dict, x: torch.Tensor, y: torch.Tensor) -> None:
        if self.mode == "eager" or key is None or key in self.refused:
            self.counts["eager"] += 1
            return step(view, x, y)
        entry = self.captured.get(key)
        if entry is None:
            self.seen[key] += 1
            if self.seen[key] <= WARMUP:
                self.counts["eager"] += 1
                return step(view, x, y)
            entry = self.capture(key, step, view, x, y)
            if entry is None:
                self.counts["eager"] += 1
                return step(view, x, y)
        graph, static_x, static_y, _, _ = entry
        static_x.copy_(x)
        static_y.copy_(y)
        self.replay(entry)
        self.counts["replayed"] += 1

    def scope(self) -> Any:
        """Where steps run: on a GPU capturing graphs, a side stream (warm-up and capture off the default stream, as
        CUDA graphs ask), joined to the default stream on entry and exit."""
        if self.mode != "cuda-graph":
            return contextlib.nullcontext()
        return side_stream(self)

    def capture(self, key: Any, step: Callable, view: dict, x: torch.Tensor, y: torch.Tensor) -> Optional[tuple]:
        static_x, static_y = x.clone(), y.clone()
        if self.mode == "replay":
            entry = (None, static_x, static_y, step, view)
        else:
            try:
                if self.pool is None:
                    self.pool = torch.cuda.graph_pool_handle()
                graph = torch.cuda.CUDAGraph()
                # thread_local: another thread's packs (gpu_streams.py) may allocate or sync while this one captures
                with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
                    step(view, static_x, static_y)
            except Exception as err:  # an operation that cannot be captured (a host sync, a CPU tensor): eager
                self.refused.add(key)
                self.failure = self.failure or f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
                return None
            entry = (graph, static_x, static_y, step, view)
        self.captured[key] = entry
        self.counts["captured"] += 1
        return entry

    def replay(self, entry: tuple) -> None:
        graph, static_x, static_y, step, view = entry
        if graph is None:
            step(view, static_x, static_y)
        else:
            graph.replay()

    def record(self) -> dict[str, Any]:
        """What ran, for the run's summary: the mode, steps run eagerly and replayed, shapes captured, a failure."""
        out: dict[str, Any] = {"step_mode": self.mode, **{f"steps_{k}": v for k, v in sorted(self.counts.items())}}
        if self.failure:
            out["capture_failed"] = self.failure
        return {**out, **self.conv_forms.record()}


@contextlib.contextmanager
def side_stream(runner: StepRunner) -> Iterator[None]:
    if runner.stream is None:
        runner.stream = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    runner.stream.wait_stream(main)
    with torch.cuda.stream(runner.stream):
        yield
    main.wait_stream(runner.stream)


class Arena:
    """Stacked tensors kept from round to round (same names, shapes and client count: the same buffers), so that the
    views a captured step reads and writes stay where its graph expects them."""

    def __init__(self) -> None:
        self.buffers: dict[Any, dict[str, torch.Tensor]] = {}

    def stack(self, tag: Any, states: list[State]) -> dict[str, torch.Tensor]:
        first = states[0]
        key = (tag, len(states), tuple((k, tuple(v.shape), v.dtype, v.device) for k, v in first.items()))
        held = self.buffers.get(key)
        with torch.no_grad():
            if held is None:
                held = self.buffers[key] = stack(states)
            else:
                for k, buffer in held.items():
                    torch.stack([state[k] for state in states], out=buffer)
        return held

    def zeros_like(self, tag: Any, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        key = (tag, tuple((k, tuple(v.shape), v.dtype, v.device) for k, v in tensors.items()))
        held = self.buffers.get(key)
        if held is None:
            held = self.buffers[key] = {k: torch.zeros_like(v) for k, v in tensors.items()}
        else:
            for buffer in held.values():
                buffer.zero_()
        return held


class Cohort:
    """Runs one run's plans and evaluations for many clients at once, on the device its data are on; with
    `train_together`, several runs' clients at once."""

    def __init__(
        self, method: Method, fed: Any, cohort_size: Any = 0, step_mode: str = "eager", conv_form: str = "grouped"
    ):
        self.method, self.fed = method, fed
        self.device = fed.train_x.device
        self.chunks = ChunkSizes(cohort_size, self.device)  # clients per step (run.cohort_size)
        self.runner = StepRunner(step_mode, ConvForms(conv_form, self.device))
        self.arena = Arena()
        self._pools: dict[tuple[int, ...], tuple[list, torch.Tensor, torch.Tensor]] = {}
        self.paths: Counter = Counter()  # clients trained by path this run: "cohort", "one at a time (reason)"
        self._head_only: dict[int, tuple[SplitModel, SplitModel]] = {}  # id(model) -> (model, its head alone)

    # ---- what can be batched ----
    def trains(self) -> bool:
        return self.method.capabilities().plan and not has_dropout(self.method.model)

    def evaluates(self) -> bool:
        return self.method.capabilities().weights

    def signature(self) -> tuple[Any, ...]:
        """What runs must share to train in one cohort: the method and its settings but the seed, train.lr (each
        client of a phase steps at its own run's rate) and the method's `packable` hyper-parameters, and the model."""
        method = self.method
        return (
            type(method),
            method.params.model_dump_json(exclude=set(method.packable)),
            method.pack_key(method.params),
            replace(method.ctx.train, lr=0.0),
            repr(method.model),
            tuple((k, tuple(v.shape), v.dtype) for k, v in method.model.state_dict().items()),
            self.device,
        )

    def record(self) -> dict[str, Any]:
        """How its steps ran, for the run's summary: the step mode and counts, the convolution forms, the chunks."""
        return {**self.runner.record(), **self.chunks.record()}

    # ---- training ----
    def train(self, tasks: list[Any]) -> Iterator[tuple[int, tuple[State, State, Any]]]:
        """(cid, (reply, new client state, evaluation after the update or None)) for each training task, in client
        order."""
        for _, cid, result in train_together([(self, tasks)]):
            yield cid, result

    def after_local(self, task: Any, reply: State, state: State, data: ClientData) -> Optional[tuple[int, float, int]]:
        """The evaluation right after the update, with eval.point after-local: the client step's own."""
        return after_update(self.method, data, task.payload, reply, state, task.round, task.evaluate_after)

    def pool(self, slots: list[Slot]) -> tuple[torch.Tensor, torch.Tensor]:
        """The training data of the slots' runs as one pool (a run's own when all are of one run, else their
        concatenation, kept for later rounds), each slot's offset in it set."""
        feds = list({id(s.run.fed): s.run.fed for s in slots}.values())
        if len(feds) == 1:
            for s in slots:
                s.offset = 0
            return feds[0].train_x, feds[0].train_y
        key = tuple(id(f) for f in feds)
        if key not in self._pools:
            self._pools[key] = (feds, torch.cat([f.train_x for f in feds]), torch.cat([f.train_y for f in feds]))
        starts = dict(zip(key, np.cumsum([0] + [len(f.train_x) for f in feds[:-1]]).tolist()))
        for s in slots:
            s.offset = int(starts[id(s.run.fed)])
        return self._pools[key][1], self._pools[key][2]

    def run_plans(self, slots: list[Slot]) -> list[dict[str, State]]:
        """Every slot's plan at once (slots ordered by training size, largest first); each slot's trained weights by
        model name."""
        plans = [s.plan for s in slots]
        stacks = {
            name: self.arena.stack(("model", name), [plan.models[name] for plan in plans]) for name in plans[0].models
        }
        pool_x, pool_y = self.pool(slots)
        for index, stage in enumerate(plans[0].phases):
            if isinstance(stage, Joint):
                self.run_joint(stacks, stage, slots, pool_x, pool_y)
            elif isinstance(stage, Apply):
                with torch.no_grad():
                    stage.fn(stacks)
            else:
                self.run_phase(stacks[stage.model], [plan.phases[index] for plan in plans], slots, pool_x, pool_y)
        return [
            {
                name: {key: value[slot].detach().clone() for key, value in stacks[name].items()}
                for name in plans[0].trained_models()
            }
            for slot in range(len(plans))
        ]

    def run_joint(
        self,
        stacks: dict[str, dict[str, torch.Tensor]],
        stage: Joint,
        slots: list[Slot],
        pool_x: torch.Tensor,
        pool_y: torch.Tensor,
    ) -> None:
        """A step the method writes, over several stacked models, on every batch of the clients' shared schedule."""
        augment = augments(self.method.ctx.train, images=pool_x.dim() == 4)
        layout = self.layout(stage, slots, [s.rows() for s in slots], augment=augment, drop_single=stage.drop_single)
        self.run_steps(stacks, layout, pool_x, pool_y, stage.step, ("joint", stage.shape()))

    def run_steps(
        self,
        state: dict[str, dict[str, torch.Tensor]],
        layout: Layout,
        pool_x: torch.Tensor,
        pool_y: torch.Tensor,
        step: Callable[[dict, torch.Tensor, torch.Tensor], None],
        key: Any,
    ) -> None:
        """`step(view, x, y)` for each group of the layout, in order: `view` holds slices of the stacks (views: the
        step's changes land in the stacks), x [G, B, ...] and y [G, B] the group's batches. `key` names the step's
        form for capture (None: never captured)."""
        runner, train = self.runner, self.method.ctx.train
        if train.precision != "float32":  # run.precision: every step's forward under autocast, captured or not
            plain = step

            def step(view: dict, x: torch.Tensor, y: torch.Tensor) -> None:
                with train.autocast(x.device):
                    plain(view, x, y)

        if key is not None:  # the buffers the step reads and writes: a captured step is bound to them
            key = (key, tuple(t.data_ptr() for part in state.values() for t in part.values()))
        views: dict[tuple[int, int], dict] = {}
        forms = runner.conv_forms
        with no_device_mode(), runner.scope(), forms.active():
            for groups, x_piece, y_piece, first in layout.pieces(pool_x, pool_y):
                form = (tuple(x_piece.shape[1:]), x_piece.dtype)
                for group in groups:
                    count = group.stop - group.start
                    at = group.at - first
                    x = x_piece[at : at + count * group.size].view(count, group.size, *x_piece.shape[1:])
                    y = y_piece[at : at + count * group.size].view(count, group.size)
                    span = (group.start, group.stop)
                    if span not in views:  # slices of the stacks: views, so the step's changes land in them
                        views[span] = {
                            name: {k: v[span[0] : span[1]] for k, v in part.items()} for name, part in state.items()
                        }
                    step_key = None if key is None else (key, form, group.start, group.stop, group.size)
                    runner.run(step_key, step, views[span], x, y)
                    if forms.pending:  # shapes met for the first time: their forms timed before the next step
                        forms.settle(count, group.size, x.device)

    def run_phase(
        self, weights: dict[str, torch.Tensor], phases: list[Phase], slots: list[Slot], pool_x, pool_y
    ) -> None:
        """One phase of every slot's plan (the same but for their tensors) on the stacked weights, in place."""
        method, phase = self.method, phases[0]
        given = self.arena.stack(("given", phase.shape()), [p.given for p in phases]) if phase.given else {}
        template = method.working_model(phase.model)
        settings = phase.settings(method.ctx.train, template, pool_x.dim() == 4)
        momentum, weight_decay = settings.momentum, settings.weight_decay
        # runs packed together may differ in train.lr (`signature`): each client steps at its own run's rate,
        # settled once per run (the lead run's rate need not be these clients')
        run_rates: dict[int, float] = {}
        for p, s in zip(phases, slots):
            if id(s.method) not in run_rates:
                run_rates[id(s.method)] = p.settings(s.method.ctx.train, template, pool_x.dim() == 4).lr
        rates = [run_rates[id(s.method)] for s in slots]
        lr, per_client_lr = rates[0], len(set(rates)) > 1
        if per_client_lr:
            lrs = [{"lr": torch.tensor(rate, dtype=torch.float32, device=self.device)} for rate in rates]
            lr_stack = self.arena.stack(("lr", phase.shape()), lrs)
        param_names = [name for name, _ in template.named_parameters()]
        rows = [s.rows() for s in slots]
        datas = [s.data for s in slots]
        if settings.head_alone:
            # the head alone, on given inputs (an embedding set) or, as fit_head, on features computed once
            if settings.head_alone == "inputs":
                pool_x = torch.cat([p.head_inputs[0] for p in phases])
                pool_y = torch.cat([p.head_inputs[1] for p in phases])
                sizes = [len(p.head_inputs[1]) for p in phases]
                starts = np.cumsum([0] + sizes[:-1]).tolist()
                rows = [torch.arange(a, a + n, device=self.device) for a, n in zip(starts, sizes)]
                datas = [replace(d, train_x=p.head_inputs[0], train_y=p.head_inputs[1]) for d, p in zip(datas, phases)]
            else:
                pool_y = torch.cat([pool_y[r] for r in rows])
                pool_x, rows = self.features(template, weights, pool_x, rows)
            template = self.head_only(template)
            param_names = [name for name in param_names if part_of(name) == "head"]
            weights = {key: value for key, value in weights.items() if part_of(key) == "head"}
        trained = [name for name in param_names if part_of(name) in phase.parts]
        fixed = [key for key in weights if key not in trained]
        layout = self.layout(
            phase,
            [replace(s, data=d) for s, d in zip(slots, datas)],
            rows,
            augment=settings.augment,
            drop_single=settings.drop_single,
        )
        momenta = (
            self.arena.zeros_like(("momenta", phase.shape()), {n: weights[n] for n in trained}) if momentum else {}
        )
        loss = phase.loss

        def client_loss(train_w: dict, fixed_w: dict, x: torch.Tensor, y: torch.Tensor, given_c: dict) -> torch.Tensor:
            every = {**train_w, **fixed_w}
            return loss(FunctionalNet(template, every), {n: every[n] for n in param_names}, x, y, given_c)

        batched_loss = per_client(client_loss)

        def step(view: dict, x: torch.Tensor, y: torch.Tensor) -> None:
            w = view["weights"]
            train_w = {n: w[n].detach().requires_grad_(True) for n in trained}  # leaves sharing the stacks' storage
            fixed_w = {k: w[k] for k in fixed}  # BatchNorm updates its running statistics in place, here
            losses = batched_loss(train_w, fixed_w, x, y, view["given"])
            params = list(train_w.values())
            grads = torch.autograd.grad(losses.sum(), params, allow_unused=True)
            rate = view["lr"]["lr"] if per_client_lr else lr
            with torch.no_grad():
                sgd_step(params, list(grads), list(view["momenta"].values()) or None, rate, momentum, weight_decay)

        template.train()
        state = {"weights": weights, "momenta": momenta, "given": given, **({"lr": lr_stack} if per_client_lr else {})}
        key = ("phase", phase.shape(), id(template), tuple(trained), settings.head_alone)
        self.run_steps(state, layout, pool_x, pool_y, step, key)

    def head_only(self, template: SplitModel) -> SplitModel:
        """`template`'s head behind an identity body, made once per model: a captured step is keyed by the model it
        runs, so a new wrapper each round would capture the head's steps anew every round (PGFedSplit on an H200:
        7,330 captures in 100 rounds)."""
        kept = self._head_only.get(id(template))
        if kept is None or kept[0] is not template:
            kept = (template, SplitModel(nn.Identity(), template.head, template.feature_dim))
            self._head_only[id(template)] = kept
        return kept[1]

    @torch.no_grad()
    def features(
        self, template: SplitModel, weights: dict[str, torch.Tensor], pool_x: torch.Tensor, rows: list[torch.Tensor]
    ) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Each client's training features through its own body, in one pool; each client's rows in it."""
        feats, offsets, start = [], [], 0
        for slot, client_rows in enumerate(rows):
            net = FunctionalNet(template, {k: v[slot] for k, v in weights.items()})
            feats.append(compute_features(net, pool_x[client_rows]))  # as fit_head computes them
            offsets.append(torch.arange(start, start + len(client_rows), device=self.device))
            start += len(client_rows)
        return torch.cat(feats), offsets

    def layout(
        self, phase: Phase | Joint, slots: list[Slot], rows: list[torch.Tensor], augment: bool, drop_single: bool
    ) -> Layout:
        """Each slot's batches from its run's `Method.batches` (the same seeded orders), laid out step by step."""
        orders, flats, drawn = [], [], []
        for slot, client_rows in zip(slots, rows):
            method, data, round = slot.method, slot.data, slot.task.round
            order = list(method.batches(data, round, phase.purpose, phase.epochs, drop_single))
            orders.append([len(idx) for idx in order])
            if order:
                flats.append(client_rows[torch.cat(order).to(self.device)])
            if augment and order:
                gen = torch_generator(method.ctx.seed, round, data.cid, phase.purpose + "/augment")
                drawn.append(torch.cat([crop_flip_draws(len(idx), gen) for idx in order]).to(self.device))
        # one read-back for the whole cohort: the host lays the steps out, the device never waits on it again
        every_row = torch.cat(flats).cpu().numpy() if flats else np.zeros(0, dtype=np.int64)
        every_draw = torch.cat(drawn).cpu().numpy() if drawn else None
        per_client, per_draws, at = [], [], 0
        for lengths in orders:
            cuts = np.cumsum([at, *lengths])
            per_client.append([every_row[a:b] for a, b in zip(cuts[:-1], cuts[1:])])
            if every_draw is not None:
                per_draws.append([every_draw[a:b] for a, b in zip(cuts[:-1], cuts[1:])])
            at = int(cuts[-1])
        steps = max((len(b) for b in per_client), default=0)
        groups, chosen, draws, at = [], [], [], 0
        for t in range(steps):
            sizes = [len(b[t]) if t < len(b) else 0 for b in per_client]
            for start, stop, size in runs_of_sizes(sizes):
                groups.append(Group(start, stop, size, at))
                at += (stop - start) * size
                chosen.extend(per_client[s][t] for s in range(start, stop))
                if augment:
                    draws.extend(per_draws[s][t] for s in range(start, stop))
        table = np.concatenate(chosen) if chosen else np.zeros(0, dtype=np.int64)
        return Layout(
            groups,
            torch.as_tensor(table, dtype=torch.long, device=self.device),
            torch.as_tensor(np.concatenate(draws), device=self.device) if draws else None,
        )

    # ---- evaluation ----
    def evaluate(self, tasks: list[Any]) -> Iterator[tuple[int, tuple[int, float, int]]]:
        """(cid, (correct, summed cross-entropy, samples)) of each client's personalized model on its test split."""
        method, round = self.method, tasks[0].round if tasks else 0
        tasks = sorted(tasks, key=lambda t: t.cid)
        size = self.chunks.fixed_size(len(tasks))
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
                index = torch.as_tensor(active, dtype=torch.long, device=self.device)
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


def train_together(
    runs: list[tuple[Cohort, list[Any]]], lead: Optional[Cohort] = None
) -> Iterator[tuple[int, int, tuple[State, State, Any]]]:
    """The training tasks of one or more runs as one cohort: (run index, cid, (reply, new state, after-local
    evaluation or None)), each run's in client order. Clients whose plans have the same form, of runs with the same
    signature (the same method, settings and model; seeds may differ), train in one stacked computation; `lead` (else
    the first run's cohort) holds the buffers and the step runner. A client whose method writes its update as code
    only trains on its own."""
    lead = lead or runs[0][0]
    signatures = {index: cohort.signature() for index, (cohort, _) in enumerate(runs)}
    results: dict[int, dict[int, tuple[State, State, Any]]] = defaultdict(dict)
    groups: dict[Any, list[tuple[int, Slot]]] = defaultdict(list)
    for index, (cohort, tasks) in enumerate(runs):
        method = cohort.method
        for task in sorted(tasks, key=lambda t: t.cid):
            client = task.client() if callable(task.client) else task.client
            data = cohort.fed.client(task.cid)
            begin_update(method)  # the client step's start (engine/client_step.py); its end: after_local
            plan = client_plan(method, task.payload, client, data, task.round)
            # a step a method writes (Joint, Apply) reads its own run's train.lr: such plans pack only at one rate
            rate = method.ctx.train.lr if any(isinstance(p, (Joint, Apply)) for p in plan.phases) else None
            key = (signatures[index], rate, tuple(p.shape() for p in plan.phases))
            groups[key].append((index, Slot(cohort, task, data, plan)))
    lead.chunks.begin_round()
    for members in groups.values():  # clients whose plans differ only in their tensors train together
        members.sort(key=lambda m: (-m[1].data.num_train, m[0], m[1].task.cid))  # the active ones: a prefix
        size = lead.chunks.size(len(members))
        for start in range(0, len(members), size):
            chunk = members[start : start + size]
            trained = lead.run_plans([slot for _, slot in chunk])
            for (index, slot), weights in zip(chunk, trained):
                reply, state = slot.method.plan_result(weights, slot.plan, slot.data, slot.task.round)
                results[index][slot.task.cid] = (reply, state, slot.run.after_local(slot.task, reply, state, slot.data))
                slot.run.paths["cohort"] += 1
    lead.chunks.end_round(sum(slot.data.num_train for members in groups.values() for _, slot in members))
    for index in range(len(runs)):
        for cid in sorted(results[index]):
            yield index, cid, results[index][cid]
