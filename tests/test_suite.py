"""Suite tables read whatever runs finished, in any order, and say what is missing."""

from __future__ import annotations

import json

from pfedkit.io import atomic_write_csv
from pfedkit.reports.tables import paper_table


def fake_run(folder, accs, rounds):
    folder.mkdir(parents=True)
    rows = [{"round": i, "acc": a} for i, a in enumerate(accs)]
    atomic_write_csv(folder / "metrics.csv", rows, ["round", "acc"])
    (folder / "summary.json").write_text(json.dumps({"best_acc": max(accs), "last_acc": accs[-1], "rounds": rounds}))


def test_paper_table_averages_finished_seeds_and_marks_missing_cells(tmp_path):
    fake_run(tmp_path / "col" / "a" / "seed0", [0.1, 0.5, 0.4], 2)
    fake_run(tmp_path / "col" / "a" / "seed2", [0.1, 0.7, 0.6], 2)
    (tmp_path / "col" / "a" / "seed1").mkdir()  # started, never finished: not counted
    lines, rounds = paper_table(tmp_path, {"col": "Col"}, ["a", "b"], {"a": {"col": 65.0}}, last_k=2)
    assert lines[0] == "| method | Col ours (best) | last | mean of last 2 rounds | paper | best - paper |"
    # three evaluations are too few to tell a flat curve from a rising one: "?"
    assert lines[2] == "| a | 60.00 ± 14.14 (n=2) ? | 50.00 ± 14.14 (n=2) | 55.00 ± 14.14 (n=2) | 65.00 | -5.00 |"
    assert lines[3] == "| b | not run | not run | not run | - | - |"
    assert rounds == {2}


def test_curves_of_many_rows_never_draw_two_lines_alike(tmp_path, monkeypatch):
    from pfedkit.reports import plots

    figures = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: figures.append(fig) or path)
    runs = {f"row{i}": [{"round": 0, "acc": 0.1}, {"round": 1, "acc": 0.01 * i}] for i in range(25)}  # a suite's rows
    plots.save_curves(runs, tmp_path / "curves.png")
    lines = figures[0].axes[0].get_lines()
    assert len(lines) == 25 and len({(line.get_color(), line.get_linestyle()) for line in lines}) == 25


def test_rows_outside_a_column_show_n_a_even_when_no_column_runs_them(tmp_path):
    fake_run(tmp_path / "x" / "a" / "seed0", [0.1, 0.5, 0.5], 2)
    fake_run(
        tmp_path / "y" / "b" / "seed0", [0.1, 0.6, 0.6, 0.6], 3
    )  # rows of different lengths: labels name the rounds
    lines, rounds = paper_table(
        tmp_path, {"x": "X", "y": "Y"}, ["a", "b", "c"], {}, column_rows={"x": ("a",), "y": ("b",)}
    )
    assert lines[2].startswith("| a (2 rounds) | 50.00 ? |") and lines[2].endswith("| n/a | n/a | n/a | n/a |")
    assert lines[3].startswith("| b (3 rounds) | n/a |")
    assert lines[4] == "| c | " + " | ".join(["n/a"] * 8) + " |" and rounds == {2, 3}


def test_a_cell_is_marked_rising_peaked_or_flat_from_its_mean_curve(tmp_path):
    from pfedkit.reports.tables import curve_trend

    def curve(accs, every=1):
        return [(every * r, a) for r, a in enumerate(accs)]

    assert curve_trend(curve([50 + r for r in range(20)])) == "rising"  # +4 points from the fourth fifth to the last
    assert curve_trend(curve([80 + 0.4 * (r % 2) for r in range(500)])) == "flat"  # noise of 0.4 points, no trend
    assert (
        curve_trend(curve([70] * 10 + [80] * 5 + [75] * 5, every=50)) == "peaked"
    )  # the best far above the last fifth
    assert curve_trend(curve([50 + 0.002 * r for r in range(500)])) == "flat"  # 0.2 points between fifths 100 apart
    # the same rate (0.2 points per 100 rounds) over a short run is flat too; 1 point per 100 rounds is not
    assert curve_trend(curve([50 + 0.002 * r for r in range(10)])) == "flat"
    assert curve_trend(curve([50 + 0.01 * r for r in range(50)])) == "rising"  # 0.1 points between fifths 10 apart
    assert curve_trend(curve([50 + 0.01 * r for r in range(500)])) == "rising"  # 1 point between fifths 100 apart
    assert curve_trend(curve([50, 60, 70])) == "short"
    fake_run(tmp_path / "col" / "up" / "seed0", [r / 100 for r in range(20)], 19)
    fake_run(tmp_path / "col" / "up" / "seed1", [0.3] * 20, 19)  # the mean over seeds still rises: marked
    fake_run(tmp_path / "col" / "flat" / "seed0", [0.5] * 20, 19)
    lines, _ = paper_table(tmp_path, {"col": "Col"}, ["up", "flat"], {})
    assert lines[2].startswith("| up | 24.50 ± 7.78 (n=2) ↑ |") and lines[3].startswith("| flat | 50.00 |")


def test_after_local_runs_are_read_at_their_own_point(tmp_path):
    from pfedkit.reports.tables import mean_of_last, run_facts

    folder = tmp_path / "run"
    folder.mkdir()
    rows = [{"round": i, "acc": "", "acc_after": 0.5 + i / 10} for i in range(3)]
    atomic_write_csv(folder / "metrics.csv", rows, ["round", "acc", "acc_after"])
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "eval_point": "after-local",
                "data_origin": "CIFAR-10, JPEG copy",
                "data_file_sha256": "0bfcb68717a0ecb0d5",
            }
        )
    )
    assert abs(mean_of_last(folder, 2) - 0.65) < 1e-12
    assert run_facts([folder]) == [
        "Evaluated right after each trained client's local update (FedPAC's released code, FL-bench).",
        "Data: CIFAR-10, JPEG copy (sha256 0bfcb68717a0…).",
    ]
    (folder / "config.toml").write_text('[run]\ndevice = "cpu"\n')
    assert len(run_facts([folder])) == 2  # the CPU, every run's default, goes unsaid
    (folder / "config.toml").write_text('[run]\ndevice = "cuda"\n')
    assert run_facts([folder])[-1] == "Ran on: cuda (run.device)."


def both_points_run(folder, start, after):
    folder.mkdir(parents=True)
    rows = [{"round": i, "acc": s, "acc_after": a} for i, (s, a) in enumerate(zip(start, after))]
    atomic_write_csv(folder / "metrics.csv", rows, ["round", "acc", "acc_after"])
    (folder / "summary.json").write_text(
        json.dumps(
            {
                "eval_point": "both",
                "rounds": len(start) - 1,
                "best_acc": max(start),
                "last_acc": start[-1],
                "best_acc_after": max(after),
                "last_acc_after": after[-1],
            }
        )
    )
    (folder / "config.toml").write_text('[eval]\npoint = "both"\n')  # one config for every row: like with like


def test_runs_at_both_points_show_both_and_a_claim_can_name_its_point(tmp_path):
    from pfedkit.papers.claims import Evidence, check_claims

    both_points_run(tmp_path / "col" / "a" / "seed0", [0.5, 0.6], [0.8, 0.7])  # a leads at the start point
    both_points_run(tmp_path / "col" / "b" / "seed0", [0.4, 0.5], [0.9, 0.9])  # b leads after local training
    lines, _ = paper_table(tmp_path, {"col": "Col"}, ["a", "b"], {})
    assert lines[0] == "| method | Col ours (best) | last | after local: best | last | paper | best - paper |"
    assert lines[2] == "| a | 60.00 ? | 60.00 | 80.00 ? | 70.00 | - | - |"
    claim = {"text": "a above b", "column": "col", "rows": ["a", "b"]}
    # a gap of 10 or 20 clears 2 x 1.41; a floor read at each point (one read at the start does not bound after-local)
    floor = Evidence(tmp_path, 1, floor=1.0, floors_at_points={"after-local": ((1.0, None),)})
    assert check_claims([claim], floor)[0].startswith("- a above b: holds (a 60.00, b 50.00; gap to b +10.00")
    assert check_claims([{**claim, "point": "after-local"}], floor)[0].startswith(
        "- a above b: does not hold (a 70.00, b 90.00; gap to b -20.00"
    )


def test_a_paper_read_after_local_training_is_compared_there_with_the_mean_of_the_last_rounds(tmp_path):
    both_points_run(tmp_path / "col" / "a" / "seed0", [0.5, 0.6, 0.6], [0.8, 0.7, 0.9])
    lines, _ = paper_table(tmp_path, {"col": "Col"}, ["a"], {"a": {"col": 75.0}}, last_k=2, paper_point="after-local")
    assert lines[0] == (
        "| method | Col ours (best) | last | mean of last 2 rounds | after local: best | last "
        "| mean of last 2 rounds | paper | after local: best - paper |"
    )
    assert lines[2] == "| a | 60.00 ? | 60.00 | 60.00 | 90.00 ? | 90.00 | 80.00 | 75.00 | +15.00 |"
    start_gap, _ = paper_table(tmp_path, {"col": "Col"}, ["a"], {"a": {"col": 75.0}}, last_k=2)
    assert start_gap[2].endswith("| 75.00 | -15.00 |")  # without paper_point the gap is the start point's
