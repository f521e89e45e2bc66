"""pFedHN (Shamsian, Navon, Fetaya & Chechik, ICML 2021): personalized federated learning with a hypernetwork.

The server holds a hypernetwork h(v; phi) and one embedding v_i per client. It sends client i the model
theta_i = h(v_i; phi). The client trains theta_i locally and replies only the change Delta_i = theta_i' - theta_i.
The server moves phi and v_i along -(d theta_i / d (phi, v_i))^T (-Delta_i), i.e. it backpropagates the change
through the hypernetwork (SGD with momentum and weight decay, as the authors' code), summed over the round's clients
into one step. The generated model theta_i is
the client's personalized model; nothing stays on the client.
"""

from __future__ import annotations

from typing import Mapping

import torch
from pydantic import Field
from torch import nn

from pfedkit.methods.base import HyperParams, Method, register, strip_prefix
from pfedkit.records import ClientData, State
from pfedkit.seeding import seeded_torch, torch_generator

HN, HN_MOMENTUM = "hn.", "hn_momentum."
EMBEDDING, EMBEDDING_MOMENTUM = "embedding.{cid}", "embedding_momentum.{cid}"


class PFedHNParams(HyperParams):
    embed_dim: int = Field(
        6,
        ge=1,
        description="client embedding size; "
        "authors' code uses 1 + clients/4 (6 for 20 clients): set it for other counts",
    )
    hidden: int = Field(100, ge=1, description="width of the hypernetwork's MLP; authors' code (hyper-hid 100)")
    hidden_layers: int = Field(3, ge=0, description="hidden layers after the first; authors' code (n-hidden 3)")
    server_lr: float = Field(1e-2, gt=0, description="hypernetwork SGD learning rate; authors' code (1e-2)")
    server_momentum: float = Field(0.9, ge=0, lt=1, description="hypernetwork SGD momentum; authors' code (0.9)")
    server_weight_decay: float = Field(1e-3, ge=0, description="hypernetwork SGD weight decay; authors' code (1e-3)")
    server_grad_clip: float = Field(
        50.0, gt=0, description="max total norm of the hypernetwork and embedding gradient per step; authors' code (50)"
    )


class HyperNetwork(nn.Module):
    """v -> MLP -> one linear head per target parameter tensor, reshaped to that tensor's shape."""

    def __init__(self, embed_dim: int, hidden: int, hidden_layers: int, shapes: dict[str, torch.Size]):
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(embed_dim, hidden)]
        for _ in range(hidden_layers):
            layers += [nn.ReLU(), nn.Linear(hidden, hidden)]
        self.mlp = nn.Sequential(*layers)
        self.shapes = dict(shapes)
        self.heads = nn.ModuleDict({self.key(n): nn.Linear(hidden, s.numel()) for n, s in self.shapes.items()})

    @staticmethod
    def key(name: str) -> str:
        return name.replace(".", "__")

    def forward(self, v: torch.Tensor) -> dict[str, torch.Tensor]:
        features = self.mlp(v)
        return {n: self.heads[self.key(n)](features).reshape(s) for n, s in self.shapes.items()}


@register
class PFedHN(Method):
    name = "pfedhn"
    summary = (
        "a server hypernetwork generates each client's model from its embedding; "
        "client deltas are backpropagated through it"
    )
    Params = PFedHNParams

    @property
    def hypernetwork(self) -> HyperNetwork:
        if not hasattr(self, "_hypernetwork"):
            shapes = {n: p.shape for n, p in self.model.named_parameters()}
            p = self.params
            self._hypernetwork = HyperNetwork(p.embed_dim, p.hidden, p.hidden_layers, shapes)
        return self._hypernetwork

    def init_server(self) -> State:
        with seeded_torch(self.ctx.seed, -1, -1, "pfedhn-init"):
            fresh = HyperNetwork(
                self.params.embed_dim,
                self.params.hidden,
                self.params.hidden_layers,
                {n: p.shape for n, p in self.model.named_parameters()},
            )
        return {HN + k: v.detach().clone() for k, v in fresh.state_dict().items()}

    def embedding(self, server: State, cid: int) -> torch.Tensor:
        """v_i; a client seen for the first time gets a seeded N(0, 1) embedding (nn.Embedding's initialization)."""
        key = EMBEDDING.format(cid=cid)
        if key in server:
            return server[key]
        return torch.randn(self.params.embed_dim, generator=torch_generator(self.ctx.seed, -1, cid, "pfedhn-embedding"))

    def load_hypernetwork(self, server: State) -> HyperNetwork:
        net = self.hypernetwork
        net.load_state_dict(strip_prefix(server, HN))
        return net

    def broadcast(self, server: State, round: int, cid: int) -> State:
        with torch.no_grad():
            generated = self.load_hypernetwork(server)(self.embedding(server, cid))
        buffers = {k: v for k, v in self.initial_state().items() if k not in generated}  # e.g. BatchNorm statistics
        return {**{k: v.clone() for k, v in generated.items()}, **buffers}

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        model = self.load(payload)
        self.fit(model, data, round)
        trained = dict(model.named_parameters())
        delta = {"delta." + n: (trained[n].detach() - payload[n]).clone() for n in trained}
        return {**delta, "num_samples": data.num_train}, {}

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        """One SGD step per round on phi (the sum of the replying clients' gradients, each clipped as one authors'
        step; their changes were all made from this round's phi) and on each replying client's embedding. No other
        embedding is in the step, so none moves (not even by weight decay)."""
        if not replies:
            return server
        p, net = self.params, self.load_hypernetwork(server)
        cids = sorted(replies)
        embeddings = [self.embedding(server, cid).clone().requires_grad_() for cid in cids]
        weights = list(net.parameters())
        weight_grads = [torch.zeros_like(w) for w in weights]
        embedding_grads = []
        for cid, v in zip(cids, embeddings):
            generated = net(v)
            grads = list(
                torch.autograd.grad(
                    [generated[n] for n in generated],
                    weights + [v],
                    grad_outputs=[-replies[cid]["delta." + n] for n in generated],
                )
            )
            norm = torch.cat([g.reshape(-1) for g in grads]).norm()
            clip = min(1.0, p.server_grad_clip / (float(norm) + 1e-6))  # the authors' clip_grad_norm_ per client step
            for total, g in zip(weight_grads, grads[:-1]):
                total.add_(g, alpha=clip)
            embedding_grads.append(grads[-1] * clip)
        params = weights + embeddings
        names = [HN + k for k, _ in net.named_parameters()] + [EMBEDDING.format(cid=c) for c in cids]
        momentum_names = [HN_MOMENTUM + k for k, _ in net.named_parameters()] + [
            EMBEDDING_MOMENTUM.format(cid=c) for c in cids
        ]
        opt = torch.optim.SGD(params, lr=p.server_lr, momentum=p.server_momentum, weight_decay=p.server_weight_decay)
        for param, grad, mname in zip(params, weight_grads + embedding_grads, momentum_names):
            param.grad = grad
            if mname in server:
                opt.state[param]["momentum_buffer"] = server[mname].clone()
        opt.step()
        new = dict(server)
        for param, name, mname in zip(params, names, momentum_names):
            new[name] = param.detach().clone()
            buffer = opt.state[param].get("momentum_buffer")
            if buffer is not None:  # none without momentum
                new[mname] = buffer.clone()
        return new

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return self.load(payload)  # the generated model, as broadcast

    def trained_model(self, reply: State, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        """The generated model plus the client's update (the reply carries the update as a delta)."""
        return self.load(payload, {n: payload[n] + reply["delta." + n] for n in strip_prefix(reply, "delta.")})
