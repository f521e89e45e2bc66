"""FedGH (Yi et al., ACM MM 2023): a generalized global head trained by the server on the clients' class means.

Each round the server's head replaces every client's head; a client trains its whole model (personal body)
with CE and uploads the class means of its features; the server trains the global head on (class mean, class)
pairs with cross-entropy. A client predicts with its own body and the global head.
"""

from __future__ import annotations

from typing import Mapping, Optional

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, Method, register, select, strip_prefix
from pfedkit.methods.prototypes import local_prototypes
from pfedkit.records import ClientData, State
from pfedkit.seeding import torch_generator


class FedGHParams(HyperParams):
    server_lr: Optional[float] = Field(
        None, gt=0, description="server SGD lr for the global head; default train.lr (our choice)"
    )
    server_epochs: int = Field(1, ge=1, description="passes over the uploaded class means per round; PFLlib trains one")


@register
class FedGH(Method):
    name = "fedgh"
    summary = "personal bodies; a global head trained on the server from the clients' class means"
    Params = FedGHParams

    def init_server(self) -> State:
        return select(self.initial_state(), ("head",))

    def init_client(self, cid: int, data: ClientData) -> State:
        return select(self.initial_state(), ("body",))

    def broadcast(self, server: State, round: int, cid: int) -> State:
        return dict(server)

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        model = self.load(client, payload)
        self.fit(model, data, round)
        reply = {
            **local_prototypes(model, data.train_x, data.train_y, self.ctx.num_classes),
            "num_samples": data.num_train,
        }
        return reply, self.state_of(model, ("body",))  # the trained head is replaced by the global one next round

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:
            return server
        pairs = [
            (r["protos"][k], k)
            for r in (replies[c] for c in sorted(replies))
            for k in (r["proto_counts"] > 0).nonzero().flatten().tolist()
        ]
        features = torch.stack([f for f, _ in pairs])
        labels = torch.tensor([k for _, k in pairs])
        head = self.working_model("server-head").head
        head.load_state_dict(strip_prefix(server, "head."))
        opt = torch.optim.SGD(head.parameters(), lr=self.params.server_lr or self.ctx.train.lr)
        gen = torch_generator(self.ctx.seed, round, -1, "fedgh-server")
        bs = self.ctx.train.batch_size
        for _ in range(self.params.server_epochs):
            order = torch.randperm(len(labels), generator=gen)
            for start in range(0, len(labels), bs):
                idx = order[start : start + bs]
                loss = F.cross_entropy(head(features[idx]), labels[idx])
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
        return {"head." + k: v.detach().clone() for k, v in head.state_dict().items()}

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(client, payload)
