"""FedPAC (Xu, Tong & Huang, ICLR 2023): feature alignment to global class centroids and classifier collaboration.

Client: on the received global body, feature statistics (V_i, and h_i = label-weighted class means); one head
epoch (lr 0.1) with the body frozen; body epochs with CE + lambda * MSE to the global class centroids (the
client's own pre-training class means where no global one exists; none in the first round); then the class
centroids of the trained body. It uploads body, head, centroids with counts, V_i and h_i.
Server: body by sample-weighted average, centroids by class counts, and for every selected client i the head
combination alpha_i = argmin a^T (diag(V) + D_i) a over the simplex, D_i[j, j'] = <h_i - h_j, h_i - h_j'>.
The combined head (of this round's trained heads) is client i's next head.

`fedpac-proto` is the reproduction report's variant: alpha_ij = softmax_j(-f_ij), f_ij the mean cross-entropy
of client j's class prototypes through client i's head (the report's Eq. 12-13).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Literal, Mapping, Optional

import numpy as np
import torch
import torch.nn.functional as F
from pydantic import Field
from scipy.optimize import minimize

from pfedkit.methods.base import HyperParams, Method, add_prefix, register, select, strip_prefix, variant, weighted_mean
from pfedkit.methods.plan import LocalPlan, Net, Phase, given_weight
from pfedkit.methods.prototypes import (
    aggregate_prototypes,
    class_means,
    empty_prototypes,
    eval_features,
    prototype_mse,
)
from pfedkit.records import ClientData, State

HEAD_KEY = "combined_head.{cid}."  # server-side store of each client's combined head


class FedPACParams(HyperParams):
    align_weight: float = Field(
        1.0, ge=0, description="lambda, weight of the feature-alignment MSE; paper Sec. 5 and code (1.0)"
    )
    head_epochs: int = Field(1, ge=1, description="head epochs before the body epochs; paper Alg. 1 and code (1)")
    head_lr: float = Field(0.1, gt=0, description="head learning rate; official code (0.1); body lr is train.lr")
    collaboration: Literal["qp", "proto-softmax"] = Field(
        "qp", description="head weights: FedPAC's QP, or the report's prototype-loss softmax"
    )
    min_weight: float = Field(
        1e-3, ge=0, description="QP weights below this are zeroed, the rest renormalized; official code"
    )
    eig_floor: float = Field(
        0.01,
        ge=0,
        description="PSD repair: keep only eigenpairs at or above this when the QP matrix is not PSD; official code",
    )
    proto_direction: Literal["others-through-own", "own-through-others"] = Field(
        "others-through-own",
        description="proto-softmax: client j's prototypes through i's head (report's text) or the transposed reading",
    )
    proto_class_weights: Literal["uniform", "label"] = Field(
        "uniform",
        description="proto-softmax: classes weighted equally (report's Eq. 12) "
        "or by the prototype owner's label shares",
    )


def feature_statistics(
    features: torch.Tensor, labels: torch.Tensor, num_classes: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """(V_i, h_i) of FedPAC Sec. 4.2: h_ik = p_ik * mu_ik, and V_i the trace-covariance of the features given the
    label, divided by n_i (docs/methods.md 4.1 step 2)."""
    n = labels.shape[0]
    means, counts = class_means(features, labels, num_classes)
    share = counts.to(features.dtype) / n
    squared = torch.zeros(num_classes, dtype=features.dtype).index_add_(0, labels, features.pow(2).sum(1))
    within = (share * squared / counts.clamp(min=1)).sum() - (share.pow(2) * means.pow(2).sum(1)).sum()
    return within / n, share.unsqueeze(1) * means


def psd_repair(matrix: np.ndarray, floor: float) -> np.ndarray:
    """The QP matrix as is when PSD; else rebuilt from its eigenpairs with eigenvalue >= floor (official code)."""
    values, vectors = np.linalg.eigh(matrix)
    if values.min() >= 0:
        return matrix
    keep = values >= floor
    return (vectors[:, keep] * values[keep]) @ vectors[:, keep].T


def simplex_qp(matrix: np.ndarray, min_weight: float = 0.0) -> Optional[np.ndarray]:
    """argmin a^T Q a subject to a >= 0, sum a = 1, by SciPy's SLSQP.

    SciPy is already a dependency and SLSQP solves small, dense, convex QPs with equality and bound constraints to
    high accuracy; the official code's cvxpy would add a heavy dependency for 20-by-20 problems. None if it fails.
    """
    m = matrix.shape[0]
    q = (matrix + matrix.T) / 2
    result = minimize(
        lambda a: a @ q @ a,
        np.full(m, 1.0 / m),
        jac=lambda a: 2 * q @ a,
        method="SLSQP",
        bounds=[(0.0, 1.0)] * m,
        constraints=[{"type": "eq", "fun": lambda a: a.sum() - 1.0, "jac": lambda a: np.ones(m)}],
        options={"ftol": 1e-12, "maxiter": 500},
    )
    if not result.success or not np.all(np.isfinite(result.x)):
        return None
    weights = np.clip(result.x, 0.0, None)
    weights[weights < min_weight] = 0.0
    return weights / weights.sum() if weights.sum() > 0 else None


def aligned(
    net: Net, params: Mapping[str, torch.Tensor], x: torch.Tensor, y: torch.Tensor, given: Mapping[str, torch.Tensor]
) -> torch.Tensor:
    """CE + lambda * MSE of the features to their class's target centroid (FedPAC Eq. 7), where one is available;
    lambda comes in `given` (runs differing in align_weight train as one cohort)."""
    z = net.body(x)
    return F.cross_entropy(net.head(z), y) + given["weight"] * prototype_mse(z, y, given["targets"], given["available"])


def combine_heads(heads: list[State], weights: torch.Tensor) -> State:
    """sum_j w_j * head_j, entry by entry."""
    return {k: sum(float(w) * h[k] for w, h in zip(weights, heads)) for k in heads[0]}


@register
class FedPAC(Method):
    name = "fedpac"
    training = "plan"
    evaluation = "weights"
    summary = "global body with feature alignment to class centroids; per-client head combined by a QP"
    Params = FedPACParams
    packable = ("align_weight",)  # lambda reaches the step in `given`
    server_only = (HEAD_KEY.split("{")[0],)  # each client's combined head: sent to that client only, as its head

    def init_server(self) -> State:
        return {
            **select(self.initial_state(), ("body",)),
            **empty_prototypes(self.ctx.num_classes, self.model.feature_dim),
        }

    def init_client(self, cid: int, data: ClientData) -> State:
        return select(self.initial_state(), ("head",))

    def broadcast(self, server: State, round: int, cid: int) -> State:
        prefix = HEAD_KEY.format(cid=cid)
        own_head = add_prefix(strip_prefix(server, prefix), "head.")
        return {
            **select(server, ("body",)),
            "protos": server["protos"],
            "proto_counts": server["proto_counts"],
            **own_head,
        }

    def local_plan(self, payload: State, client: State, data: ClientData, round: int) -> LocalPlan:
        p, C = self.params, self.ctx.num_classes
        model = self.load(client, payload)  # the combined head, when the server has one for this client, wins
        received = eval_features(model, data.train_x)  # features of the received global body
        variance, label_means = feature_statistics(received, data.train_y, C)
        local_means, local_counts = class_means(received, data.train_y, C)  # fallback centroids, before training
        head = Phase(parts=("head",), epochs=p.head_epochs, lr=p.head_lr, purpose="head", head_features=True)
        body = Phase(parts=("body",), purpose="body")
        has_global = payload["proto_counts"] > 0
        if bool(has_global.any()) and p.align_weight > 0:  # no centroids yet in the first round: CE only
            targets = torch.where(has_global.unsqueeze(1), payload["protos"], local_means)
            body = replace(
                body,
                loss=aligned,
                given={
                    "targets": targets,
                    "available": has_global | (local_counts > 0),
                    "weight": given_weight(p.align_weight, targets),
                },
            )
        return LocalPlan(
            {"main": self.state_of(model)}, [head, body], notes={"feature_var": variance, "label_means": label_means}
        )

    def plan_result(
        self, trained: dict[str, State], plan: LocalPlan, data: ClientData, round: int
    ) -> tuple[State, State]:
        model = self.load(trained["main"])
        protos, counts = class_means(eval_features(model, data.train_x), data.train_y, self.ctx.num_classes)  # Eq. 8
        reply = {
            **trained["main"],
            "protos": protos,
            "proto_counts": counts,
            **plan.notes,
            "num_samples": data.num_train,
        }
        return reply, select(trained["main"], ("head",))

    def evaluation_weights(self, client: State, payload: State, data: ClientData, round: int) -> State:
        return self.model_weights(client, payload)

    def aggregate(self, server: State, replies: Mapping[int, State], round: int) -> State:
        if not replies:
            return server
        cids = sorted(replies)  # one order for weights and heads, whatever order the replies arrived in
        new = dict(server)
        new.update(weighted_mean(replies, select(server, ("body",)).keys()))
        new.update(aggregate_prototypes((replies[c] for c in cids), previous=server))
        heads = [select(replies[c], ("head",)) for c in cids]  # this round's trained heads, before any combination
        weights = self.head_weights([replies[c] for c in cids])
        for row, cid in enumerate(cids):
            if weights[row] is None:  # no solution: the client keeps its own trained head
                combined = heads[row]
            else:
                combined = combine_heads(heads, weights[row])
            new.update(add_prefix(strip_prefix(combined, "head."), HEAD_KEY.format(cid=cid)))
        return new

    def head_weights(self, replies: list[State]) -> list[Optional[torch.Tensor]]:
        """Row i: the weights of every selected client's head in client i's combined head."""
        if self.params.collaboration == "proto-softmax":
            return list(self.proto_softmax_weights(replies))
        variances = np.array([float(r["feature_var"]) for r in replies])
        means = torch.stack([r["label_means"].flatten() for r in replies]).double().cpu().numpy()
        rows: list[Optional[torch.Tensor]] = []
        for i in range(len(replies)):
            diff = means[i] - means  # h_i - h_j for every j
            matrix = psd_repair(np.diag(variances) + diff @ diff.T, self.params.eig_floor)
            weights = simplex_qp(matrix, self.params.min_weight)
            rows.append(None if weights is None else torch.as_tensor(weights, device=replies[0]["label_means"].device))
        return rows

    def proto_softmax_weights(self, replies: list[State]) -> torch.Tensor:
        """alpha_ij = softmax over j of -f_ij (report Eq. 12-13, normalized over j as its constraint requires)."""
        m = len(replies)
        losses = torch.zeros(m, m)
        for i in range(m):
            for j in range(m):
                head_of, protos_of = (i, j) if self.params.proto_direction == "others-through-own" else (j, i)
                losses[i, j] = self.prototype_loss(replies[head_of], replies[protos_of])
        return torch.softmax(-losses, dim=1)

    @torch.no_grad()
    def prototype_loss(self, head_owner: State, proto_owner: State) -> torch.Tensor:
        present = proto_owner["proto_counts"] > 0
        head = self.working_model("server-head").head
        head.load_state_dict(strip_prefix(head_owner, "head."))
        logits = head(proto_owner["protos"][present])
        per_class = F.cross_entropy(logits, present.nonzero().squeeze(1), reduction="none")
        if self.params.proto_class_weights == "label":
            shares = proto_owner["proto_counts"][present].to(per_class.dtype)
            return (per_class * shares).sum() / shares.sum()
        return per_class.mean()


# The reproduction report's variant ("Modify"): the same method with the other head-combination rule.
variant(
    FedPAC,
    "fedpac-proto",
    "FedPAC with head weights from a softmax of prototype losses (the reproduction report's variant)",
    collaboration="proto-softmax",
)
