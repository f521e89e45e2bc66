"""FedRoD (Chen & Chao, ICLR 2022): a shared body and generic head trained with the balanced softmax, and a
personal head trained on detached features; a client predicts with the sum of the two heads' logits."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pfedkit.methods.base import add_prefix, register, select, strip_prefix
from pfedkit.methods.sharing import PartSharing
from pfedkit.models.base import SplitModel
from pfedkit.records import ClientData, State


def balanced_softmax_loss(logits: torch.Tensor, y: torch.Tensor, class_counts: torch.Tensor) -> torch.Tensor:
    """CE of logits + log n_k (Ren et al., 2020): the generic head learns as if the local labels were balanced;
    classes the client lacks get -inf and drop out."""
    return F.cross_entropy(logits + class_counts.to(logits.dtype).log(), y)


class TwoHeads(nn.Module):
    """The personalized predictor: generic logits + personal logits on the same features."""

    def __init__(self, model: SplitModel, personal_head: nn.Module):
        super().__init__()
        self.model, self.personal_head = model, personal_head

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.model.body(x)
        return self.model.head(z) + self.personal_head(z)


def personal_state(head: nn.Module) -> State:
    return {"personal_head." + k: v.detach().clone() for k, v in head.state_dict().items()}


@register
class FedRoD(PartSharing):
    name = "fedrod"
    training = "code"
    evaluation = "model"
    summary = "shared body and generic head (balanced softmax); personal head on detached features; logits summed"
    shared = ("body", "head")

    def init_client(self, cid: int, data: ClientData) -> State:
        return add_prefix(select(self.initial_state(), ("head",)), "personal_")

    def personal_head(self, client: State) -> nn.Module:
        model = self.working_model("personal")
        model.head.load_state_dict(strip_prefix(client, "personal_head."))
        return model.head

    def local_update(self, payload: State, client: State, data: ClientData, round: int) -> tuple[State, State]:
        cfg = self.ctx.train
        model, head = self.load(payload), self.personal_head(client)
        counts = torch.bincount(data.train_y, minlength=self.ctx.num_classes)
        sgd = dict(lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
        opt_generic, opt_personal = (
            torch.optim.SGD(model.parameters(), **sgd),
            torch.optim.SGD(head.parameters(), **sgd),
        )
        model.train()
        for x, y in self.minibatches(data, round, "train"):
            z = model.body(x)
            generic = model.head(z)
            opt_generic.zero_grad(set_to_none=True)
            balanced_softmax_loss(generic, y, counts).backward()
            opt_generic.step()
            # the personal head on the same detached features, on top of the detached generic logits
            opt_personal.zero_grad(set_to_none=True)
            F.cross_entropy(generic.detach() + head(z.detach()), y).backward()
            opt_personal.step()
        reply = {**self.state_of(model), "num_samples": data.num_train}
        return reply, personal_state(head)

    def personalized_model(self, client: State, payload: State, data: ClientData, round: int) -> nn.Module:
        return TwoHeads(self.load(payload), self.personal_head(client))
