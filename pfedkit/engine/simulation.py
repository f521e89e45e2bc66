"""The single round loop: sample, broadcast, local updates, aggregate, evaluate, record, checkpoint."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import torch
from tqdm import tqdm

from pfedkit.config import Config, save_config
from pfedkit.data.federated import FederatedDataset, build_federated
from pfedkit.data.sources import resolve_data_root
from pfedkit.engine.client_states import SpilledStates
from pfedkit.engine.cohort import Cohort
from pfedkit.engine.divergence import Diverged, check_finite, likely_fix, nonfinite_keys
from pfedkit.engine.evaluation import (
    evaluated_clients,
    evaluates_after,
    measures_after,
    measures_start,
    summarize_round,
    summarize_run,
)
from pfedkit.engine.placement import placement
from pfedkit.engine.replies import RoundReplies, message_bytes
from pfedkit.engine.store import (
    CHECKPOINT,
    RunLock,
    check_belongs,
    load_checkpoint,
    prepare_run_folder,
    save_checkpoint,
    verify_data,
)
from pfedkit.engine.together import Member
from pfedkit.engine.workers import Executor, Task, make_executor
from pfedkit.errors import PfedkitError
from pfedkit.io import atomic_write_csv, atomic_write_json, remove_stale_temporaries
from pfedkit.methods.base import Method, named_by
from pfedkit.records import AFTER, DIVERGED, State
from pfedkit.registry import build_method, method_source, run_identity, with_method_values
from pfedkit.seeding import numpy_generator

METRIC_COLUMNS = (
    "round",
    "acc",
    "acc_client_mean",
    "loss",
    "train_s",
    "eval_s",
    "bytes_down",
    "bytes_up",
    "clients_trained",
)
AFTER_COLUMNS = ("acc" + AFTER, "acc_client_mean" + AFTER, "loss" + AFTER)  # with eval.point after-local or both
CLIENT_COLUMNS = ("round", "client", "correct", "n_test", "acc")
RoundObserver = Callable[[dict[str, Any]], None]  # sees each round's metrics row (tracking, a tuner's pruning)


def client_summary_columns(method: Method) -> tuple[str, ...]:
    return tuple(f"{key}_{stat}" for key in method.client_logged for stat in ("mean", "min", "max"))


def summarize_clients(method: Method, states: list[State]) -> dict[str, float]:
    """<key>_mean, _min, _max over the given client states of each number the method logs."""
    out: dict[str, float] = {}
    for key in method.client_logged:
        values = [float(state[key]) for state in states if key in state]
        if values:
            out.update({f"{key}_mean": sum(values) / len(values), f"{key}_min": min(values), f"{key}_max": max(values)})
    return out


def check_server_only(method: Method, states: list[State]) -> None:
    """Every server_only entry names some key of the server state (before or after an aggregation): one that names
    none (a prefix written without its dot) would keep nothing back, and the state would reach every client."""
    keys = {key for state in states for key in state}
    stray = [name for name in method.server_only if not any(named_by(key, [name]) for key in keys)]
    if stray:
        shown = ", ".join(sorted(keys)[:8]) + (", ..." if len(keys) > 8 else "")
        raise PfedkitError(
            f"method {method.name}: server_only entr{'ies' if len(stray) > 1 else 'y'} {', '.join(map(repr, stray))} "
            f"name{'' if len(stray) > 1 else 's'} no key of its server state ({shown}); a prefix ends in '.' (e.g. "
            f"{stray[0].rstrip('.') + '.'!r}), a key is named whole"
        )


def sample_clients(num_clients: int, join_ratio: float, seed: int, round_index: int) -> list[int]:
    count = max(int(round(num_clients * join_ratio)), 1)
    chosen = numpy_generator(seed, round_index, -1, "sample-clients").choice(num_clients, size=count, replace=False)
    return sorted(int(c) for c in chosen)


def with_absolute_root(config: Config) -> Config:
    """A copy whose data.root is absolute: a run folder names its data wherever it is resumed from."""
    config = config.model_copy(deep=True)
    config.data.root = str(resolve_data_root(config.data.root).resolve())
    return config


def make_method(config: Config, fed: FederatedDataset) -> Method:
    return build_method(config, fed.input_shape, fed.num_classes, fed.server)


@dataclass(frozen=True)
class RunOptions:
    """How a run is carried out, not what it computes, one record for every engine and entry point: `resume` from the
    checkpoint in the run folder; `progress` bars; `observers` that see each round's metrics row once it is written
    (tracking, a tuner's pruning); `force`: write beside files pfedkit did not write; `fed`: the data, already built
    (runs sharing them); `together`: the run's place in a group of runs trained as one cohort (engine/together.py)."""

    resume: bool = False
    progress: bool = True
    observers: tuple[RoundObserver, ...] = ()
    force: bool = False
    fed: Optional[FederatedDataset] = None
    together: Optional[Member] = None
    accept_code_change: bool = False  # resume even though the method's code changed (recorded in the run folder)

    def with_(self, **changes: Any) -> "RunOptions":
        if "observers" in changes:
            changes["observers"] = tuple(changes["observers"])
        return replace(self, **changes)


@dataclass
class TrainedRound:
    """What a round's local updates give the server: the replies as they arrived, each trained client's evaluation
    right after its update (eval.point after-local; by client), and the numbers the method logs (`client_logged`) of
    the trained clients' new states (none where the clients keep their states elsewhere, as Flower nodes do)."""

    replies: RoundReplies
    after: dict[int, tuple[int, float, int]]
    logged: list[State]


class RoundLoop:
    """A run seen from the server: rounds, sampling, payloads, aggregation, metrics, checkpoints, results.

    Subclasses say where clients run: `evaluate_clients` and `train_clients` (in this process for the
    simulation, on remote nodes for Flower). A subclass sets `self.method` and `self.num_clients`, then
    calls `start(resume)`.
    """

    columns: tuple[str, ...] = METRIC_COLUMNS
    method: Method
    num_clients: int
    together: Optional[Member] = None  # a group of runs this one trains with (a Simulation's, engine/together.py)

    def __init__(self, config: Config, out: str | Path, options: RunOptions):
        # the run records every hyper-parameter's value (a default changed later cannot change it) and its method's code
        config = with_method_values(with_absolute_root(config))
        config.method.source = method_source(config)  # the code it runs now; a resume compares the recorded one
        self.config, self.out, self.options = config, Path(out), options
        self.progress, self.observers = options.progress, list(options.observers)
        self.lock = RunLock(self.out)  # held until run() ends: one run per folder
        try:
            remove_stale_temporaries(self.out)  # of a write a kill cut off; under the lock, nothing else writes here
            prepare_run_folder(
                self.out,
                self.config,
                resume=options.resume,
                force=options.force,
                can_continue=self.can_continue,
                accept_code_change=options.accept_code_change,
            )
        except BaseException:
            self.lock.release()
            raise

    def start(self, resume: bool) -> None:
        """Called by a subclass once its method (and data) are ready: records the config, loads the checkpoint."""
        save_config(self.config, self.out / "config.toml")
        (self.out / DIVERGED).unlink(missing_ok=True)
        ckpt = load_checkpoint(self.out) if resume else None
        if ckpt is not None:
            check_belongs(self.out, ckpt, self.config, accept_code_change=self.options.accept_code_change)
            if ckpt["next_round"] > self.config.train.rounds + 1:  # past this run's final evaluation (round R)
                raise PfedkitError(
                    f"{self.out / 'checkpoint.pt'} is at round {ckpt['next_round'] - 1}, past this run's last round "
                    f"{self.config.train.rounds}: it was written by a longer run (copied in?); delete it to run this "
                    f"config from round 0, or resume with --set train.rounds={ckpt['next_round'] - 1} or more"
                )
        if ckpt is None:
            self.server = self.method.init_server()
            self.rows: list[dict[str, Any]] = []
            self.client_rows: list[dict[str, Any]] = []
            self.next_round = 0
            self.after_local: dict[int, tuple[int, float, int]] = {}
        else:
            self.server = ckpt["server"]
            self.rows, self.client_rows, self.next_round = ckpt["rows"], ckpt["client_rows"], ckpt["next_round"]
            self.after_local = ckpt.get("after_local", {})
            self.restore(ckpt)
            made_for = ckpt.get("config", {}).get("train", {}).get("rounds", self.config.train.rounds)
            if made_for < self.config.train.rounds and self.next_round > made_for:  # a finished, shorter run's end
                self.reopen(made_for)

    can_continue = False  # whether a finished run may be resumed with more rounds (see registry.continues)

    def reopen(self, rounds: int) -> None:
        """Carry a finished `rounds`-round run on: its last round evaluated only, so it is played again, trained
        this time; what it recorded is dropped, and so is its summary (the run is unfinished until the new end)."""
        self.rows = [row for row in self.rows if row["round"] < rounds]
        self.client_rows = [row for row in self.client_rows if row["round"] < rounds]
        self.next_round = rounds
        for name in ("summary.json", "clients.csv"):
            (self.out / name).unlink(missing_ok=True)

    # ---- where clients run; subclasses implement these ----
    def evaluate_clients(self, round: int, payloads: dict[int, State]) -> dict[int, tuple[int, float, int]]:
        raise NotImplementedError

    def train_clients(self, round: int, payloads: dict[int, State], evaluate_after: bool = False) -> TrainedRound:
        """The round's local updates: the replies, with `evaluate_after` each trained client's evaluation right after
        its update, and the numbers the method logs of the new client states."""
        raise NotImplementedError

    def session(self) -> contextlib.AbstractContextManager:
        """Resources held for the whole run (a worker pool)."""
        return contextlib.nullcontext()

    def restore(self, ckpt: dict[str, Any]) -> None:
        """Read the subclass's own part of a checkpoint."""

    def checkpoint_extra(self) -> dict[str, Any]:
        return {}

    def summary_extra(self) -> dict[str, Any]:
        """The subclass's own entries in summary.json."""
        return {}

    # ---- the round logic shared by every engine ----
    def payloads(self, round: int, cids: list[int]) -> dict[int, State]:
        return {cid: self.method.payload(self.server, round, cid) for cid in cids}

    def sample(self, round: int) -> list[int]:
        train = self.config.train
        if train.full_last_round and round == train.rounds - 1:
            return list(range(self.num_clients))
        return sample_clients(self.num_clients, train.join_ratio, self.config.run.seed, round)

    def diverged(self, round: int, where: str, messages: dict[int, State]) -> None:
        """Stop the run when any message holds inf or NaN."""
        check_finite(
            round,
            where,
            messages,
            self.config.method.name,
            likely_fix(self.config.train.lr, self.method.params.model_dump(), self.method.Params.step_sizes()),
        )

    # ---- the evaluation point (eval.point), by the rules in engine/evaluation.py ----
    @property
    def measures_start(self) -> bool:
        return measures_start(self.config.eval.point)

    @property
    def measures_after(self) -> bool:
        return measures_after(self.config.eval.point)

    def evaluates_after(self, round: int) -> bool:
        ev = self.config.eval
        return evaluates_after(ev.point, ev.every, self.config.train.rounds, round)

    def evaluated(self, round: int) -> list[int]:
        return evaluated_clients(self.config.eval.clients, self.num_clients, self.config.run.seed, round)

    def record_evaluation(
        self, round: int, per_client: dict[int, tuple[int, float, int]], point: str = "start"
    ) -> dict[str, Any]:
        self.diverged(
            round,
            "evaluation losses" + ("" if point == "start" else " after local training"),
            {cid: {"loss": float(loss)} for cid, (_, loss, _) in per_client.items()},
        )
        for cid in sorted(per_client):
            correct, _, n = per_client[cid]
            self.client_rows.append(
                {
                    "round": round,
                    "client": cid,
                    "correct": correct,
                    "n_test": n,
                    "acc": correct / n if n else None,
                    "point": point,
                }
            )
        if point == "start":
            return summarize_round(per_client)
        self.after_local.update(per_client)  # clients not trained this round keep their last value
        return {key + AFTER: value for key, value in summarize_round(self.after_local).items()}

    def apply_replies(self, round: int, payloads: dict[int, State], replies: RoundReplies) -> dict[str, Any]:
        """Aggregate the replies that arrived (all finite, else the run stops), as the RoundReplies took them; bytes
        down count every payload sent."""
        self.diverged(round, "replies", replies.nonfinite)
        server = replies.aggregate(self.method, self.server, round)
        self.diverged(round, "aggregated server state", {-1: server})
        check_server_only(self.method, [self.server, server])
        self.server = server
        return {
            "bytes_down": sum(message_bytes(p) for p in payloads.values()),
            "bytes_up": replies.bytes,
            "clients_trained": replies.count,
            **{key: float(self.server[key]) for key in self.method.logged},
        }

    @property
    def metric_columns(self) -> tuple[str, ...]:
        return (
            self.columns
            + (AFTER_COLUMNS if self.measures_after else ())
            + tuple(self.method.logged)
            + client_summary_columns(self.method)
        )

    @property
    def client_columns(self) -> tuple[str, ...]:
        return CLIENT_COLUMNS + (("point",) if self.measures_after else ())

    def play_round(self, round: int, evaluate: bool, train: bool) -> dict[str, Any]:
        """One round, in order. Flower's server plays the same steps over the network (flower/server_app.py)."""
        row: dict[str, Any] = {}
        if evaluate and self.measures_start:
            start = time.perf_counter()
            # 1. evaluation at the round start: each evaluated client's personalized model on its own payload
            payloads = self.payloads(round, self.evaluated(round))
            row.update(self.record_evaluation(round, self.evaluate_clients(round, payloads)))
            row["eval_s"] = time.perf_counter() - start
        if train:
            start = time.perf_counter()
            # 2. sampling (seeded by round) and 3. broadcast: the server-only keys never leave (Method.payload)
            payloads = self.payloads(round, self.sample(round))
            # 4. local updates: one client at a time, or the round's clients as one batched computation (run.cohort);
            #    with eval.point after-local or both, each trained client is measured right after its update
            trained = self.train_clients(round, payloads, self.evaluates_after(round))
            if trained.after:
                row.update(self.record_evaluation(round, trained.after, point="after-local"))
            # 5. aggregation of the replies (each checked finite first), bytes counted, the method's numbers logged
            row.update(self.apply_replies(round, payloads, trained.replies))
            row.update(summarize_clients(self.method, trained.logged))
            row["train_s"] = time.perf_counter() - start
        return row  # 6. the caller (_run) writes metrics.csv and checkpoints

    def run(self) -> dict[str, Any]:
        try:
            return self._run()
        finally:
            if self.together is not None:
                self.together.leave()
            self.lock.release()

    def _run(self) -> dict[str, Any]:
        cfg = self.config
        rounds = cfg.train.rounds
        # The bar counts training rounds; round R, the final evaluation, shows in its text only.
        bar = tqdm(
            total=rounds,
            initial=min(self.next_round, rounds),
            disable=not self.progress,
            unit="round",
            desc=f"{cfg.method.name}",
            dynamic_ncols=True,
        )
        round_s = None
        with self.session():
            for round in range(self.next_round, rounds + 1):
                row: dict[str, Any] = {
                    "round": round,
                    "acc": None,
                    "acc_client_mean": None,
                    "loss": None,
                    "train_s": 0.0,
                    "eval_s": 0.0,
                    "bytes_down": 0,
                    "bytes_up": 0,
                    "clients_trained": 0,
                }
                evaluated, after_local = len(self.client_rows), dict(self.after_local)
                try:  # round R (the last) is evaluation only
                    row.update(self.play_round(round, round % cfg.eval.every == 0 or round == rounds, round < rounds))
                except Diverged as err:
                    del self.client_rows[evaluated:]
                    self.after_local = after_local
                    self.checkpoint()  # the state at the start of this round: every part of it was checked finite
                    atomic_write_csv(self.out / "metrics.csv", self.rows, self.metric_columns)
                    ends = f"ends at round {round - 1}" if round else "has no finished round"
                    err.saved = (
                        f" The last finite state (the start of round {round}) is in {self.out / CHECKPOINT}; "
                        f"metrics.csv {ends}."
                    )
                    atomic_write_json(self.out / DIVERGED, err.record())
                    bar.close()
                    raise
                self.rows.append(row)
                self.next_round = round + 1
                atomic_write_csv(self.out / "metrics.csv", self.rows, self.metric_columns)
                if self.next_round % cfg.run.checkpoint_every == 0 or round == rounds:
                    self.checkpoint()
                for observe in self.observers:  # after the checkpoint: an observer may stop the run (a pruned trial)
                    observe(row)
                if round < rounds:
                    round_s = row["train_s"] + row["eval_s"]
                    bar.update(1)
                bar.set_postfix_str(self._postfix(row, round_s, final=round == rounds))
        bar.close()
        return self.finish()

    @staticmethod
    def _postfix(row: dict[str, Any], round_s: Optional[float], final: bool) -> str:
        acc = "-" if row["acc"] is None else f"{row['acc']:.4f}"
        speed = "" if round_s is None else f" {round_s:.{1 if round_s >= 1 else 2}f}s/round"
        return f"{'final ' if final else ''}acc={acc}{speed}"

    def checkpoint(self) -> None:
        save_checkpoint(
            self.out,
            {
                "next_round": self.next_round,
                "server": self.server,
                "rows": self.rows,
                "client_rows": self.client_rows,
                "after_local": self.after_local,
                "config": self.config.to_dict(),
                **self.checkpoint_extra(),
            },
        )

    def finish(self) -> dict[str, Any]:
        """clients.csv and summary.json; plots are the caller's (the round loop draws nothing)."""
        cfg = self.config
        atomic_write_csv(self.out / "clients.csv", self.client_rows, self.client_columns)
        after = summarize_run(self.rows, AFTER) if self.measures_after else {}
        headline = (
            {k.removesuffix(AFTER): v for k, v in after.items()}
            if not self.measures_start
            else summarize_run(self.rows)
        )
        summary = {
            "method": cfg.method.name,
            "dataset": cfg.data.dataset,
            "model": cfg.model.name,
            "protocol": cfg.eval.protocol,
            "eval_point": cfg.eval.point,
            "seed": cfg.run.seed,
            **({"repeat": cfg.run.repeat} if cfg.run.repeat else {}),  # one config's repeat (the noise floor's runs)
            "rounds": cfg.train.rounds,
            "clients": self.num_clients,
            **({"evaluated_per_round": min(cfg.eval.clients, self.num_clients)} if cfg.eval.clients else {}),
            **(
                {"evaluated_on": f"validation ({cfg.eval.validation:g} of each client's training data)"}
                if cfg.eval.validation
                else {}
            ),  # a tuning run's accuracies are not test accuracies
            **headline,
            **after,
            "train_s": sum(r["train_s"] for r in self.rows),
            "eval_s": sum(r["eval_s"] for r in self.rows),
            "bytes_down": sum(r["bytes_down"] for r in self.rows),
            "bytes_up": sum(r["bytes_up"] for r in self.rows),
            **self.summary_extra(),
        }
        atomic_write_json(self.out / "summary.json", summary)
        return summary


class Simulation(RoundLoop):
    """One run of one method with every client in this process (or its worker pool); `run()` goes from the
    last checkpoint (or round 0) to the end. Options (RunOptions) as a record, or as its fields by keyword."""

    def __init__(self, config: Config, out: str | Path, options: Optional[RunOptions] = None, **fields: Any):
        options = (options or RunOptions()).with_(**fields)
        together = options.together
        self.placement = placement(config.run)
        self.device = self.placement.driver
        super().__init__(config, out, options)
        try:
            fed = options.fed or build_federated(self.config)
            verify_data(self.config, fed.checksum)
            self.fed = fed.to(self.device)
            self.num_clients = self.fed.num_clients
            self.method = make_method(self.config, self.fed)
            self.clients: dict[int, State] = {}  # client_state = "memory"
            self.spilled = (
                SpilledStates(self.out, int(self.config.run.state_memory_mb * 2**20), run_identity(self.config))
                if self.config.run.client_state == "disk"
                else None
            )
            self.executor: Optional[Executor] = None
            self.executor_described: Optional[str] = None  # the executor's own words, once a session opened it
            self.cohort = (
                Cohort(
                    self.method,
                    self.fed,
                    self.config.run.cohort_size,
                    self.placement.step_mode,
                    self.config.run.conv_form,
                )
                if self.placement.cohort
                else None
            )
            # with other runs of its group as one cohort (engine/together.py), when it trains in a cohort at all
            self.together = together if self.cohort is not None and self.cohort.trains() else None
            if self.together is not None:
                self.together.join(self.cohort)
            elif together is not None:
                together.leave()
            self.paths: Counter = Counter()  # clients trained one at a time on the executor, by reason
            with self.device_scope():
                self.start(options.resume)
        except BaseException:
            self.lock.release()
            raise

    can_continue = True  # replayed from its own checkpoint; Flower nodes keep their states themselves

    def device_scope(self) -> contextlib.AbstractContextManager:
        """On a GPU, tensors a method makes without naming a device (and seeded generators) go there too; on the
        CPU nothing to do, and no per-operation cost of torch's device mode."""
        return self.device if self.device.type != "cpu" else contextlib.nullcontext()

    def restore(self, ckpt: dict[str, Any]) -> None:
        if "flower" in ckpt:  # the clients' states are on their own machines
            raise PfedkitError(f"{self.out} holds a Flower run; resume it with `pfedkit flower ... --resume`")
        counts = ckpt.get("training", {})
        self.paths.update(counts.get("paths", {}))
        if self.cohort is not None:
            self.cohort.runner.counts.update(counts.get("steps", {}))
        if self.spilled is not None:
            self.spilled.keep_from = ckpt["next_round"]  # the client files hold every version this resume needs
            self.spilled.trained = {int(k): int(v) for k, v in ckpt.get("client_versions", {}).items()}
            return
        self.clients = {int(k): v for k, v in ckpt["clients"].items()}

    def checkpoint_extra(self) -> dict[str, Any]:
        training = {"training": self.training_counts()}  # how the clients trained so far, carried over a resume
        if self.spilled is not None:
            return {"client_state": "disk", "client_versions": dict(self.spilled.trained), **training}
        return {"clients": self.clients, **training}

    @contextlib.contextmanager
    def session(self) -> Iterator[None]:
        place = self.placement
        with (
            self.device_scope(),
            make_executor(
                place.executor,
                self.method,
                self.fed,
                place.workers,
                address=self.config.run.ray_address,
                worker_device=place.worker_device,
                gpus_per_worker=place.gpus_per_worker,
            ) as executor,
        ):
            self.executor = executor
            self.executor_described = executor.describe()
            try:
                yield
            finally:
                self.executor = None

    def checkpoint(self) -> None:
        super().checkpoint()
        if self.spilled is not None:  # only now, with the new checkpoint in place, may older versions go
            self.spilled.prune(self.next_round)

    def client_state(self, cid: int, round: int) -> State:
        if self.spilled is not None:
            state = self.spilled.get(cid, round)
            return self.method.init_client(cid, self.fed.client(cid)) if state is None else state
        if cid not in self.clients:
            self.clients[cid] = self.method.init_client(cid, self.fed.client(cid))
        return self.clients[cid]

    def evaluate_clients(self, round: int, payloads: dict[int, State]) -> dict[int, tuple[int, float, int]]:
        cost = self.fed.test_sizes() + self.fed.train_sizes()  # fine-tuning methods touch the train split too
        tasks = [
            Task("eval", cid, round, payload, partial(self.client_state, cid, round), int(cost[cid]))
            for cid, payload in payloads.items()
        ]
        if self.cohort is not None and self.cohort.evaluates():
            return dict(self.cohort.evaluate(tasks))
        return dict(self.executor.run(tasks))

    def round_replies(self, round: int, tasks: list[Task]) -> RoundReplies:
        """Where this round's replies go: up to run.reply_memory_mb they are held; past it, a method aggregating by a
        weighted mean folds them in as they arrive (weighted by the training sizes, the tasks' costs), any other keeps
        the rest on disk until aggregation."""
        budget = int(self.config.run.reply_memory_mb * 2**20)
        fold = self.method.reply_fold(self.server, round, {task.cid: task.cost for task in tasks})
        if fold is not None and len(tasks) * message_bytes(self.server) <= budget:  # held: weights checked alone
            return RoundReplies(None, self.out / "replies", budget, promised=fold)
        return RoundReplies(fold, self.out / "replies", budget)

    def train_clients(self, round: int, payloads: dict[int, State], evaluate_after: bool = False) -> TrainedRound:
        sizes = self.fed.train_sizes()
        tasks = [
            Task("train", cid, round, payload, partial(self.client_state, cid, round), int(sizes[cid]), evaluate_after)
            for cid, payload in payloads.items()
        ]
        replies = self.round_replies(round, tasks)
        new_states, nonfinite, after = {}, {}, {}
        # a fold takes replies in client order: sent in that order, they arrive nearly so and few wait
        if self.together is not None:  # with the other runs of its group, as one cohort
            results = self.together.train(self.cohort, tasks)
        elif self.cohort is not None and self.cohort.trains():
            results = self.cohort.train(tasks)  # in client order
        else:
            results = self.executor.run(tasks, in_order=replies.fold is not None)
            self.paths[self.one_at_a_time_reason()] += len(tasks)
        logged: dict[int, State] = {}  # the numbers of the trained clients' new states that the method logs
        for cid, (reply, client, measured) in results:
            replies.add(cid, reply)
            logged[cid] = {key: client[key] for key in self.method.client_logged if key in client}
            if measured is not None:
                after[cid] = measured
            if bad := nonfinite_keys(client):  # kept only when finite: a checkpoint never holds NaN
                nonfinite[cid] = {key: client[key] for key in bad}
            elif self.spilled is not None:  # on disk at once, as a version a resume from this round's start ignores
                self.spilled.put(cid, client, round)
            else:
                new_states[cid] = client
        self.diverged(round, "client states", nonfinite)
        self.clients.update(new_states)
        # folded in client order, not the order replies arrived: the same run logs the same last digit
        return TrainedRound(replies, after, [logged[cid] for cid in sorted(logged)])

    def one_at_a_time_reason(self) -> str:
        """Why this run's clients train one at a time (for summary.json and the run log)."""
        if self.cohort is None:
            return "one at a time (run.cohort off, or auto off a GPU)"
        if not self.method.capabilities().plan:
            return "one at a time (the method's training is written as code)"
        return "one at a time (the model has dropout)"

    def training_counts(self) -> dict[str, dict[str, int]]:
        """Clients trained by path and cohort steps by kind, so far (a checkpoint carries them over a resume)."""
        paths = Counter(self.paths)
        steps: dict[str, int] = {}
        if self.cohort is not None:
            paths.update(self.cohort.paths)
            steps = dict(self.cohort.runner.counts)
        return {"paths": dict(paths), "steps": steps}

    def training_paths(self) -> dict[str, Any]:
        """How the clients of this run trained: by path, and the cohort's step mode and what it ran."""
        counts = self.training_counts()
        record: dict[str, Any] = {"paths": counts["paths"], "placement": self.placement.describe()}
        if self.executor_described and set(counts["paths"]) - {"cohort"}:
            record["executor"] = self.executor_described  # where the clients not in a cohort trained
        if self.cohort is not None and counts["paths"].get("cohort"):
            cohort = self.cohort
            if self.together is not None and self.together.group.lead is not None:
                cohort = self.together.group.lead  # one stacked step served every run of the group
                record["trained_together"] = self.together.group.size
            record.update(cohort.record())
        if self.device.type == "cuda":
            # torch lets cuDNN convolutions round to TF32 by default: the numbers then differ from a CPU's
            record["tf32"] = {
                "convolutions": torch.backends.cudnn.allow_tf32,
                "matmul": torch.backends.cuda.matmul.allow_tf32,
            }
        return record

    def summary_extra(self) -> dict[str, Any]:
        """Which copy of the data the run read, where a data set has several, the checksum of what it loaded, and the
        server's data (its proxy's name and size)."""
        origin = {"data_origin": self.fed.origin, "data_file_sha256": self.fed.origin_sha256} if self.fed.origin else {}
        server = self.fed.server  # what the server distilled on and validated with ([proxy]), when it had data
        held = (
            {
                "server_data": {
                    "proxy": server.proxy_name,
                    "proxy_samples": len(server.proxy_y),
                    "validation_samples": len(server.val_y),
                }
            }
            if server is not None
            else {}
        )
        return {**origin, **held, "data_checksum": self.config.data.checksum, "training": self.training_paths()}


def simulate(config: Config, out: str | Path, options: Optional[RunOptions] = None, **fields: Any) -> dict[str, Any]:
    """One run to its end (from its checkpoint with `resume`); its summary. `pfedkit.experiments.run_experiment` adds
    the run's plot and trackers. Options (RunOptions) as a record, or as its fields by keyword."""
    return Simulation(config, out, options, **fields).run()
