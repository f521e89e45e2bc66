"""The single round loop: sample, broadcast, local updates, aggregate, evaluate, record, checkpoint."""
from __future__ import annotations

import functools
import time
from pathlib import Path
from typing import Any, Optional

import torch
from tqdm import tqdm

from pfedkit import registry
from pfedkit.config import Config, dump_toml, save_config
from pfedkit.data.federated import FederatedDataset, build_federated
from pfedkit.engine.evaluation import summarize_round, summarize_run
from pfedkit.engine.store import (
    CHECKPOINT,
    atomic_write_csv,
    atomic_write_json,
    load_checkpoint,
    save_checkpoint,
)
from pfedkit.engine.workers import Executor, Task
from pfedkit.errors import PfedkitError
from pfedkit.methods.base import Method, MethodContext, State, TrainSettings
from pfedkit.models import build_model
from pfedkit.seeding import numpy_generator

METRIC_COLUMNS = (
    "round", "acc", "acc_client_mean", "loss", "train_s", "eval_s", "bytes_down", "bytes_up", "clients_trained",
)
CLIENT_COLUMNS = ("round", "client", "correct", "n_test", "acc")


def message_bytes(message: State) -> int:
    """Bytes of a payload or reply as sent: tensor data plus 8 bytes per plain number."""
    return sum(v.numel() * v.element_size() if isinstance(v, torch.Tensor) else 8 for v in message.values())


def sample_clients(num_clients: int, join_ratio: float, seed: int, round_index: int) -> list[int]:
    count = max(int(round(num_clients * join_ratio)), 1)
    chosen = numpy_generator(seed, round_index, -1, "sample-clients").choice(num_clients, size=count, replace=False)
    return sorted(int(c) for c in chosen)


def make_method(config: Config, fed: FederatedDataset) -> Method:
    cls = registry.method_class(config.method.name)
    params = cls.validate_params(config.method_params())
    factory = functools.partial(build_model, config.model.name, fed.input_shape, fed.num_classes, **config.model.options)
    train = TrainSettings(
        local_epochs=config.train.local_epochs,
        batch_size=config.train.batch_size,
        lr=config.train.lr,
        momentum=config.train.momentum,
        weight_decay=config.train.weight_decay,
    )
    return cls(params, MethodContext(factory, train, fed.num_classes, config.run.seed))


class Simulation:
    """One run of one method; `run()` goes from the last checkpoint (or round 0) to the end."""

    def __init__(self, config: Config, out: str | Path, *, resume: bool = False, progress: bool = True,
                 fed: Optional[FederatedDataset] = None):
        self.config, self.out, self.progress = config, Path(out), progress
        self._prepare_out_dir(resume)
        self.fed = fed or build_federated(config)
        self.method = make_method(config, self.fed)
        self.clients: dict[int, State] = {}
        ckpt = load_checkpoint(self.out) if resume else None
        if ckpt is None:
            self.server = self.method.init_server()
            self.rows: list[dict[str, Any]] = []
            self.client_rows: list[dict[str, Any]] = []
            self.next_round = 0
        else:
            self.server, self.clients = ckpt["server"], {int(k): v for k, v in ckpt["clients"].items()}
            self.rows, self.client_rows, self.next_round = ckpt["rows"], ckpt["client_rows"], ckpt["next_round"]

    def _prepare_out_dir(self, resume: bool) -> None:
        saved = self.out / "config.toml"
        if resume:
            if saved.exists() and saved.read_text() != dump_toml(self.config.to_dict()):
                raise PfedkitError(
                    f"{saved} differs from the configuration given; resume with the run's own config "
                    f"(`pfedkit run {saved} --out {self.out} --resume`) or start a new --out"
                )
        elif (self.out / CHECKPOINT).exists() or (self.out / "metrics.csv").exists():
            raise PfedkitError(f"{self.out} already holds a run; pass --resume to continue it, or choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        save_config(self.config, saved)

    def client_state(self, cid: int) -> State:
        if cid not in self.clients:
            self.clients[cid] = self.method.init_client(cid, self.fed.client(cid))
        return self.clients[cid]

    def evaluate(self, executor: Executor, round: int) -> dict[str, Any]:
        cost = self.fed.test_sizes() + self.fed.train_sizes()  # fine-tuning methods touch the train split too
        tasks = [
            Task("eval", cid, round, self.method.broadcast(self.server, round, cid), self.client_state(cid), int(cost[cid]))
            for cid in range(self.fed.num_clients)
        ]
        per_client = dict(executor.run(tasks))
        for cid in sorted(per_client):
            correct, _, n = per_client[cid]
            self.client_rows.append({"round": round, "client": cid, "correct": correct, "n_test": n,
                                     "acc": correct / n if n else None})
        return summarize_round(per_client)

    def train(self, executor: Executor, round: int) -> dict[str, Any]:
        cfg = self.config
        sampled = sample_clients(self.fed.num_clients, cfg.train.join_ratio, cfg.run.seed, round)
        sizes = self.fed.train_sizes()
        tasks = [Task("train", cid, round, self.method.broadcast(self.server, round, cid), self.client_state(cid),
                      int(sizes[cid])) for cid in sampled]
        bytes_down = sum(message_bytes(t.payload) for t in tasks)
        replies: dict[int, State] = {}
        for cid, (reply, client) in executor.run(tasks):
            replies[cid] = reply
            self.clients[cid] = client
        self.server = self.method.aggregate(self.server, replies, round)
        return {"bytes_down": bytes_down, "bytes_up": sum(message_bytes(r) for r in replies.values()),
                "clients_trained": len(replies)}

    def run(self) -> dict[str, Any]:
        cfg = self.config
        rounds = cfg.train.rounds
        bar = tqdm(total=rounds + 1, initial=self.next_round, disable=not self.progress, unit="round",
                   desc=f"{cfg.method.name}", dynamic_ncols=True)
        with Executor(self.method, self.fed, cfg.run.workers) as executor:
            for round in range(self.next_round, rounds + 1):
                row: dict[str, Any] = {"round": round, "acc": None, "acc_client_mean": None, "loss": None,
                                       "train_s": 0.0, "eval_s": 0.0, "bytes_down": 0, "bytes_up": 0,
                                       "clients_trained": 0}
                # Evaluate at the start of the round, after broadcast (PFLlib); round R is evaluation only.
                if round % cfg.eval.every == 0 or round == rounds:
                    start = time.perf_counter()
                    row.update(self.evaluate(executor, round))
                    row["eval_s"] = time.perf_counter() - start
                if round < rounds:
                    start = time.perf_counter()
                    row.update(self.train(executor, round))
                    row["train_s"] = time.perf_counter() - start
                self.rows.append(row)
                self.next_round = round + 1
                atomic_write_csv(self.out / "metrics.csv", self.rows, METRIC_COLUMNS)
                if self.next_round % cfg.run.checkpoint_every == 0 or round == rounds:
                    self.checkpoint()
                bar.set_postfix_str(self._postfix(row))
                bar.update(1)
        bar.close()
        return self.finish()

    def _postfix(self, row: dict[str, Any]) -> str:
        acc = "-" if row["acc"] is None else f"{row['acc']:.4f}"
        return f"acc={acc} {row['train_s'] + row['eval_s']:.1f}s/round"

    def checkpoint(self) -> None:
        save_checkpoint(self.out, {
            "next_round": self.next_round, "server": self.server, "clients": self.clients,
            "rows": self.rows, "client_rows": self.client_rows, "config": self.config.to_dict(),
        })

    def finish(self) -> dict[str, Any]:
        from pfedkit.reports.plots import save_curves

        cfg = self.config
        atomic_write_csv(self.out / "clients.csv", self.client_rows, CLIENT_COLUMNS)
        summary = {
            "method": cfg.method.name, "dataset": cfg.data.dataset, "model": cfg.model.name,
            "protocol": cfg.eval.protocol, "seed": cfg.run.seed, "rounds": cfg.train.rounds,
            "clients": self.fed.num_clients,
            **summarize_run(self.rows),
            "train_s": sum(r["train_s"] for r in self.rows), "eval_s": sum(r["eval_s"] for r in self.rows),
            "bytes_down": sum(r["bytes_down"] for r in self.rows), "bytes_up": sum(r["bytes_up"] for r in self.rows),
        }
        atomic_write_json(self.out / "summary.json", summary)
        save_curves({cfg.method.name: self.rows}, self.out / "curves.png", title=f"{cfg.method.name} on {cfg.data.dataset}")
        return summary


def run_experiment(config: Config, out: str | Path, *, resume: bool = False, progress: bool = True,
                   fed: Optional[FederatedDataset] = None) -> dict[str, Any]:
    return Simulation(config, out, resume=resume, progress=progress, fed=fed).run()
