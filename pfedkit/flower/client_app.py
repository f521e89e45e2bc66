"""The Flower ClientApp: runs any registered method's client side, with its state on the node's own disk.

Messages from the server carry a payload (see `records`) and a control record: the round, whether to evaluate
and/or train, the run key and the oldest round a server resume could restart from. Only the method's reply
and evaluation counts leave the node.
"""

from __future__ import annotations

import functools
import time
from typing import Any, Mapping

import torch
from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

import pfedkit
from pfedkit.config import Config
from pfedkit.engine.client_states import ClientStateStore
from pfedkit.engine.client_step import evaluate_client
from pfedkit.engine.plans import train_client
from pfedkit.flower.node_data import client_id, load_node_data
from pfedkit.flower.records import from_records, to_records
from pfedkit.flower.settings import CONTROL, EVAL, EVAL_AFTER, INFO, config_from_run_config, default_state_root
from pfedkit.methods.base import Method
from pfedkit.records import ClientData
from pfedkit.registry import build_method

app = ClientApp()


class Node:
    """What one node needs for the whole run: config, its data, the method, its state store."""

    def __init__(self, config: Config, node_config: Mapping[str, Any]):
        if int(node_config.get("threads", 0)) > 0:
            torch.set_num_threads(int(node_config["threads"]))
        self.config, self.node_config = config, dict(node_config)
        self.cid = client_id(config, node_config)
        self.data: ClientData = load_node_data(config, node_config)
        self.method: Method = build_method(config, tuple(self.data.train_x.shape[1:]), self.data.num_classes)
        self.state_root = node_config.get("state-dir") or default_state_root()

    def store(self, run_key: str) -> ClientStateStore:
        return ClientStateStore(self.state_root, run_key, self.cid)


@functools.lru_cache(maxsize=1)
def _node(config_text: str, node_items: tuple) -> Node:
    return Node(config_from_run_config({"pfedkit-config": config_text}), dict(node_items))


def node_of(context: Context) -> Node:
    return _node(str(context.run_config["pfedkit-config"]), tuple(sorted(context.node_config.items())))


@app.query("info")
def info(msg: Message, context: Context) -> Message:
    return Message(describe(node_of(context)), reply_to=msg)


def describe(node: Node) -> RecordDict:
    """Who this node is and the shape of its data; no samples, no labels."""
    data = node.data
    return RecordDict(
        {
            INFO: ConfigRecord(
                {
                    "client-id": node.cid,
                    "input-shape": [int(s) for s in data.train_x.shape[1:]],
                    "num-classes": data.num_classes,
                    "num-train": data.num_train,
                    "num-test": int(data.test_y.shape[0]),
                    "pfedkit-version": pfedkit.__version__,
                }
            )
        }
    )


@app.train()
def train(msg: Message, context: Context) -> Message:
    return Message(work(node_of(context), msg.content), reply_to=msg)


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    return Message(work(node_of(context), msg.content), reply_to=msg)


def work(node: Node, content: RecordDict) -> RecordDict:
    """Evaluate and/or train as the control record says; save the new state before replying."""
    control = content.config_records[CONTROL]
    round = int(control["round"])
    payload = from_records(content)
    store = node.store(str(control["run-key"]))
    client, state_round = store.load(round)
    if client is None:
        client = node.method.init_client(node.cid, node.data)
    out = RecordDict()
    eval_s = train_s = 0.0
    if control["evaluate"]:
        start = time.perf_counter()
        correct, loss, n = evaluate_client(node.method, node.data, client, payload, round)
        out[EVAL] = MetricRecord({"correct": correct, "loss": loss, "n": n})
        eval_s = time.perf_counter() - start
    if control["train"]:
        start = time.perf_counter()
        after = bool(control.get("evaluate-after", False))  # eval.point after-local: the model this update left
        reply, client, measured = train_client(node.method, node.data, client, payload, round, after)
        store.save(client, round, int(control["keep-from"]))
        to_records(reply, out)
        if measured is not None:
            correct, loss, n = measured
            out[EVAL_AFTER] = MetricRecord({"correct": correct, "loss": loss, "n": n})
        train_s = time.perf_counter() - start
    out[CONTROL] = ConfigRecord(
        {"client-id": node.cid, "state-round": state_round, "eval-s": eval_s, "train-s": train_s}
    )
    return out
