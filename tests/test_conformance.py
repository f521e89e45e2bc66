"""benchmarks/conformance.py: our partition written in PFLlib's data format reads back to the same clients, and the
conformance table regenerates byte for byte from the committed results."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import conformance  # noqa: E402
from pfllib_peer import export_partition, fine_tuned_accuracy, read_exported, round_accuracies  # noqa: E402

from tests.test_engine import synthetic  # noqa: E402


def test_the_partition_export_reads_back_in_pfllibs_format_to_the_same_clients(tmp_path):
    from pfedkit.data.federated import build_federated

    fed = build_federated(synthetic(partition={"clients": 5}))
    export_partition(fed, tmp_path / "data")
    for cid in range(fed.num_clients):
        for split, indices, x, y in (
            ("train", fed.train_idx, fed.train_x, fed.train_y),
            ("test", fed.test_idx, fed.test_x, fed.test_y),
        ):
            got_x, got_y = read_exported(tmp_path / "data", split, cid)
            take = torch.from_numpy(np.asarray(indices[cid]))
            assert got_x.dtype == np.float32 and got_y.dtype == np.int64
            assert np.array_equal(got_x, x[take].numpy()) and np.array_equal(got_y, y[take].numpy()), (split, cid)


def test_pfllibs_printout_is_read_round_by_round_the_personal_models_last():
    printout = "\n".join(
        [
            "-------------Round number: 0-------------",
            "Evaluate global models",
            "Averaged Test Accuracy: 0.1000",
            "Evaluate personalized models",
            "Averaged Test Accuracy: 0.2000",  # Ditto prints the personal models' after the global model's
            "------------------------- time cost ------------------------- 1.5",
            "-------------Round number: 1-------------",
            "Average Test Accuracy: 0.3000",  # pFedMe's print_ says Average
            "-------------Evaluate fine-tuned personalized models-------------",
            "Averaged Test Accuracy: 0.9000",
        ]
    )
    assert round_accuracies(printout) == {0: 20.0, 1: 30.0}
    assert fine_tuned_accuracy(printout) == 90.0 and fine_tuned_accuracy("no such line") is None


def test_the_conformance_table_regenerates_from_the_committed_results_byte_for_byte():
    results = REPO / "results" / "conformance"
    document = REPO / "docs" / "CONFORMANCE.md"
    assert document.exists() and results.exists(), "run python3 benchmarks/conformance.py --table and commit"
    assert conformance.table_text(results) == document.read_text(), "run python3 benchmarks/conformance.py --table"


def test_a_method_row_judges_the_gap_by_rule_3_with_the_fedavg_floor():
    def cell(system, seed, acc, repeat=0):
        accs = {str(r): acc for r in range(21)}
        return {"system": system, "seed": seed, "repeat": repeat, "accs": accs, "seconds": 1.0}

    fedavg = {
        "pfedkit-seed0": cell("pfedkit", 0, 90.0),
        "pfedkit-seed0-repeat1": cell("pfedkit", 0, 90.2, 1),
        "pfedkit-seed0-repeat2": cell("pfedkit", 0, 89.8, 2),
    }
    floor, level = conformance.floor_of(fedavg)
    assert floor == pytest.approx(0.2) and floor.df == 2 and level == pytest.approx(90.0)  # three repeats of seed 0
    floors = [(floor, level)]
    agree = {
        f"{s}-seed{k}": cell(s, k, 90.0 + (0.1 if s == "pfedkit" else 0))
        for s in ("pfllib", "pfedkit")
        for k in range(3)
    }
    row = conformance.method_row("mnist", "fedavg", agree, floors)
    assert row["verdict"] == "agree" and row["gap"] == pytest.approx(0.1)  # within 1 point beyond t(2) x 0.16
    differ = {
        f"{s}-seed{k}": cell(s, k, 90.0 + (3.0 if s == "pfedkit" else 0))
        for s in ("pfllib", "pfedkit")
        for k in range(3)
    }
    assert conformance.method_row("mnist", "fedavg", differ, floors)["verdict"] == "differ"
    assert conformance.method_row("mnist", "fedavg", {}, floors)["verdict"] == "not run"
    far = {f"{s}-seed{k}": cell(s, k, 60.0) for s in ("pfllib", "pfedkit") for k in range(3)}  # 30 points away
    row = conformance.method_row("mnist", "fedavg", far, floors)
    assert row["verdict"] == "cannot tell" and "far from 60.0%" in row["why"]
