"""The Flower ServerApp: the pfedkit round loop (engine.simulation.RoundLoop) with clients on Flower nodes.

The server drives rounds itself over `grid.send_and_receive`: one exchange per round carries each client's
own payload, with flags to evaluate (at the start of the round, after broadcast) and/or train. Replies that
do not come (a dead node, a timeout) are left out; the method aggregates those that arrived.
"""

from __future__ import annotations

import time
import uuid
from logging import INFO, WARNING
from pathlib import Path
from typing import Any, Sequence

from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

import pfedkit
from pfedkit.engine.replies import RoundReplies
from pfedkit.engine.simulation import METRIC_COLUMNS, RoundLoop, RoundObserver, RunOptions
from pfedkit.errors import PfedkitError
from pfedkit.flower.records import from_records, to_records
from pfedkit.flower.settings import CONTROL, EVAL, EVAL_AFTER, RunSettings
from pfedkit.flower.settings import INFO as INFO_RECORD
from pfedkit.io import atomic_write_csv
from pfedkit.records import State
from pfedkit.registry import build_method
from pfedkit.reports.plots import point_curves, save_curves
from pfedkit.tracking import Trackers

app = ServerApp()
REPLY_COLUMNS = ("round", "client", "node", "evaluated", "trained", "state_round", "eval_s", "train_s")


class FlowerRun(RoundLoop):
    columns = METRIC_COLUMNS + ("answered", "missing")

    def __init__(self, grid: Grid, settings: RunSettings, observers: Sequence[RoundObserver] = ()):
        super().__init__(
            settings.config,
            settings.out,
            RunOptions(resume=settings.resume, progress=False, observers=tuple(observers)),
        )
        try:
            self.grid, self.settings = grid, settings
            self.num_clients = settings.config.partition.clients
            self.nodes: dict[int, int] = {}  # stable client id -> current Flower node id
            self.asked: set[int] = set()  # node ids already asked who they are
            self.data_shape: tuple[tuple[int, ...], int] | None = None
            self.data_shape_from: int = -1
            self.wait_for_clients()
            input_shape, num_classes = self.data_shape
            self.method = build_method(self.config, input_shape, num_classes, server_data(self.config))
            self.run_key = f"{settings.run_name}-{uuid.uuid4().hex[:12]}"  # keys client state on the nodes' disks
            self.checkpointed = 0
            self.reply_rows: list[dict[str, Any]] = []  # who answered, on which node, from which saved state
            self.start(settings.resume)
        except BaseException:
            self.lock.release()
            raise

    def finish(self) -> dict[str, Any]:
        summary = super().finish()
        cfg = self.config
        save_curves(
            point_curves(cfg.method.name, self.rows, cfg.eval.point),
            self.out / "curves.png",
            title=f"{cfg.method.name} on {cfg.data.dataset}",
        )
        return summary

    def summary_extra(self) -> dict[str, Any]:
        """Which clients the accuracies cover: a node that died or timed out leaves its clients out of a round."""
        evaluated: dict[int, int] = {}
        for row in self.client_rows:
            if row.get("point", "start") == "start":
                evaluated[row["round"]] = evaluated.get(row["round"], 0) + 1
        gaps = {str(r["round"]): [int(c) for c in r["missing"].split()] for r in self.rows if r.get("missing")}
        extra: dict[str, Any] = {
            "evaluated_clients": {str(k): v for k, v in sorted(evaluated.items())},
            "rounds_with_missing_clients": gaps,
        }
        if gaps:
            extra["note"] = (
                f"accuracies cover only the clients that answered: in {len(gaps)} round(s) some did not "
                f"(see rounds_with_missing_clients; last round: {evaluated.get(self.rows[-1]['round'], 0)} "
                f"of {self.num_clients} clients evaluated)"
            )
        return extra

    # ---- nodes ----
    def wait_for_clients(self) -> None:
        deadline = time.monotonic() + self.settings.connect_timeout
        want = self.settings.wait_for
        while True:
            if len(list(self.grid.get_node_ids())) >= want:
                self.refresh_nodes()
                if len(self.nodes) >= want:
                    return
            if time.monotonic() > deadline:
                self.refresh_nodes()
                if self.nodes and len(self.nodes) >= want:
                    return
                raise PfedkitError(
                    f"{len(self.nodes)} of the {want} clients needed connected "
                    f"within {self.settings.connect_timeout:.0f} s (client ids seen: {sorted(self.nodes)}); "
                    "start more SuperNodes or lower min-clients in the run config"
                )
            time.sleep(1.0)

    def refresh_nodes(self) -> None:
        """Forget nodes that left; ask new ones (a restarted node comes back under a new node id) their client id."""
        live = set(self.grid.get_node_ids())
        self.nodes = {cid: node for cid, node in self.nodes.items() if node in live}
        new = sorted(live - self.asked)
        if not new:
            return
        messages = [Message(RecordDict(), node, "query.info", group_id="info") for node in new]
        for reply in self.grid.send_and_receive(messages, timeout=self.settings.round_timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log(WARNING, "pfedkit: node %s did not say who it is: %s", node, reply.error.reason)
                continue
            info = reply.content.config_records[INFO_RECORD]
            cid = int(info["client-id"])
            if info.get("pfedkit-version") != pfedkit.__version__:  # the app carries no code: each machine runs its own
                raise PfedkitError(
                    f"client {cid} (node {node}) runs pfedkit {info.get('pfedkit-version')}, the server "
                    f"{pfedkit.__version__}; install the same pfedkit on every machine"
                )
            self.check_shape(cid, (tuple(int(s) for s in info["input-shape"]), int(info["num-classes"])))
            if cid in self.nodes and self.nodes[cid] != node:
                log(WARNING, "pfedkit: client %s now answers on node %s (was node %s)", cid, node, self.nodes[cid])
            self.nodes[cid] = node
            log(
                INFO,
                "pfedkit: client %s on node %s (%s train / %s test samples)",
                cid,
                node,
                info["num-train"],
                info["num-test"],
            )
        self.asked |= set(new)

    def check_shape(self, cid: int, shape: tuple[tuple[int, ...], int]) -> None:
        if self.data_shape is None:
            self.data_shape, self.data_shape_from = shape, cid
        elif shape != self.data_shape:
            raise PfedkitError(
                f"client {cid} has inputs {shape[0]} with {shape[1]} classes, but client {self.data_shape_from} has "
                f"{self.data_shape[0]} with {self.data_shape[1]}; every node needs the same input size and classes "
                "(node config: image-size, classes, num-classes)"
            )

    # ---- one exchange per round ----
    def message(self, cid: int, payload: State, round: int, evaluate: bool, train: bool) -> Message:
        content = to_records(payload)
        content[CONTROL] = ConfigRecord(
            {
                "round": round,
                "evaluate": evaluate,
                "train": train,
                "run-key": self.run_key,
                "keep-from": self.checkpointed,
                "evaluate-after": train and self.evaluates_after(round),
            }
        )
        return Message(content, self.nodes[cid], "train" if train else "evaluate", group_id=str(round))

    def play_round(self, round: int, evaluate: bool, train: bool) -> dict[str, Any]:
        start = time.perf_counter()
        self.refresh_nodes()
        eval_ids = set(self.evaluated(round)) if evaluate and self.measures_start else set()
        train_ids = set(self.sample(round)) if train else set()
        targets = sorted(eval_ids | train_ids)
        payloads = self.payloads(round, targets)
        reachable = [cid for cid in targets if cid in self.nodes]
        messages = [self.message(cid, payloads[cid], round, cid in eval_ids, cid in train_ids) for cid in reachable]
        replies = self.grid.send_and_receive(messages, timeout=self.settings.round_timeout) if messages else []
        client_of = {node: cid for cid, node in self.nodes.items()}
        evals: dict[int, tuple[int, float, int]] = {}
        after: dict[int, tuple[int, float, int]] = {}  # eval.point after-local: measured right after the update
        trained: dict[int, State] = {}
        eval_s = 0.0
        for reply in replies:
            cid = client_of.get(reply.metadata.src_node_id)
            if reply.has_error() or cid is None:
                log(
                    WARNING,
                    "pfedkit: round %s: no reply from node %s (client %s): %s",
                    round,
                    reply.metadata.src_node_id,
                    cid,
                    reply.error.reason if reply.has_error() else "unknown node",
                )
                continue
            control = reply.content.config_records[CONTROL]
            if int(control["client-id"]) != cid:
                raise PfedkitError(
                    f"node {reply.metadata.src_node_id} answered as client {control['client-id']}, "
                    f"but registered as client {cid}; give each SuperNode its own client-id"
                )
            if EVAL in reply.content.metric_records:
                m = reply.content.metric_records[EVAL]
                evals[cid] = (int(m["correct"]), float(m["loss"]), int(m["n"]))
                eval_s = max(eval_s, float(control["eval-s"]))  # clients evaluate in parallel
            if EVAL_AFTER in reply.content.metric_records:
                m = reply.content.metric_records[EVAL_AFTER]
                after[cid] = (int(m["correct"]), float(m["loss"]), int(m["n"]))
            if cid in train_ids:
                trained[cid] = from_records(reply.content)
            self.reply_rows.append(
                {
                    "round": round,
                    "client": cid,
                    "node": reply.metadata.src_node_id,
                    "evaluated": cid in evals,
                    "trained": cid in trained,
                    "state_round": int(control["state-round"]),
                    "eval_s": float(control["eval-s"]),
                    "train_s": float(control["train-s"]),
                }
            )
        answered = sorted(set(evals) | set(trained))
        missing = [cid for cid in targets if cid not in answered]
        row: dict[str, Any] = {"answered": " ".join(map(str, answered)), "missing": " ".join(map(str, missing))}
        if missing:
            log(WARNING, "pfedkit: round %s: clients %s did not answer; going on with %s", round, missing, answered)
        if evals:
            row.update(self.record_evaluation(round, evals))
        if after:
            row.update(self.record_evaluation(round, after, point="after-local"))
        if train:
            sent = {cid: payloads[cid] for cid in sorted(train_ids) if cid in self.nodes}  # as the simulation counts
            if len(trained) >= self.settings.min_replies:
                row.update(self.apply_replies(round, sent, RoundReplies.holding(trained, self.out / "replies")))
            else:
                log(
                    WARNING,
                    "pfedkit: round %s: %s training replies, fewer than min-replies=%s; the server state is kept",
                    round,
                    len(trained),
                    self.settings.min_replies,
                )
        row["eval_s"] = eval_s
        row["train_s"] = time.perf_counter() - start - eval_s  # the exchange: transport, node start-up, training
        atomic_write_csv(self.out / "replies.csv", self.reply_rows, REPLY_COLUMNS)
        acc = "-" if row.get("acc") is None else f"{row['acc']:.4f}"
        log(
            INFO,
            "pfedkit: round %s: acc %s, answered %s, missing %s, %.1f s",
            round,
            acc,
            answered,
            missing,
            row["train_s"] + eval_s,
        )
        return row

    # ---- checkpoints also hold the run key, so a resumed server finds the clients' state ----
    def restore(self, ckpt: dict[str, Any]) -> None:
        if "flower" not in ckpt:
            raise PfedkitError(f"{self.out} holds a simulation run; resume it with `pfedkit run --resume`")
        self.run_key, self.reply_rows = ckpt["flower"]["run_key"], ckpt["flower"]["reply_rows"]
        self.checkpointed = ckpt["next_round"]

    def checkpoint_extra(self) -> dict[str, Any]:
        return {"flower": {"run_key": self.run_key, "reply_rows": self.reply_rows}}

    def checkpoint(self) -> None:
        super().checkpoint()
        self.checkpointed = self.next_round


def server_data(config) -> Any:
    """Validation and proxy data for methods that use it ([proxy]); built as the simulation builds it, so the
    server needs the data set (the nodes' partition spec); without [proxy], none."""
    from pfedkit.config import ProxySection
    from pfedkit.data.federated import build_federated

    return build_federated(config).server if config.proxy != ProxySection() else None


@app.main()
def main(grid: Grid, context: Context) -> None:
    settings = RunSettings.from_run_config(context.run_config)
    log(INFO, "pfedkit: %s on Flower, results in %s", settings.config.method.name, settings.out)
    trackers = Trackers(settings.config, Path(settings.out))  # run.log_to, as in a simulation
    summary = None
    try:
        summary = FlowerRun(grid, settings, observers=[trackers]).run()
    finally:
        trackers.close(summary, Path(settings.out) / "curves.png" if summary else None)
    log(
        INFO,
        "pfedkit: done: best acc %s (round %s), last %s",
        summary.get("best_acc"),
        summary.get("best_round"),
        summary.get("last_acc"),
    )
