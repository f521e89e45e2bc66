"""Plots (PNG): accuracy curves of one or many runs."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pfedkit.io import atomic_write_bytes  # noqa: E402
from pfedkit.records import AFTER  # noqa: E402


def _save(fig, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())
    return Path(path)


def line_style(index: int) -> dict[str, str]:
    """Colour and dash of the index-th line: the ten default colours solid, then dashed, dotted and dash-dotted, so
    up to 40 lines never look alike."""
    return {"color": f"C{index % 10}", "linestyle": ("-", "--", ":", "-.")[(index // 10) % 4]}


def point_curves(label: str, rows: list[dict[str, Any]], point: str) -> dict[str, list[dict[str, Any]]]:
    """One run's curves for its eval.point: the start accuracy, the after-local one (column acc_after), or both."""
    after = [{"round": r["round"], "acc": r.get("acc" + AFTER)} for r in rows]
    if point == "both":
        return {f"{label} (start)": rows, f"{label} (after local)": after}
    return {label: after if point == "after-local" else rows}


def save_curves(runs: Mapping[str, list[dict[str, Any]]], path: Path, title: str = "", band: bool = False) -> Path:
    """One line per run: sample-weighted test accuracy (%, as the tables) over rounds (rows as in metrics.csv); with
    `band`, a mean curve's spread over seeds (its rows' "std") shaded one standard deviation either side."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for index, (label, rows) in enumerate(runs.items()):
        points = [(int(r["round"]), 100 * float(r["acc"])) for r in rows if r.get("acc") not in (None, "")]
        if points:
            xs, ys = zip(*points)
            (line,) = ax.plot(xs, ys, label=label, linewidth=1.5, **line_style(index))
            spread = [100 * float(r["std"]) for r in rows if r.get("acc") not in (None, "") and "std" in r]
            if band and len(spread) == len(points):  # a mean over seeds: its spread, one standard deviation a side
                low, high = [y - d for y, d in zip(ys, spread)], [y + d for y, d in zip(ys, spread)]
                ax.fill_between(xs, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xlabel("round")
    ax.set_ylabel("test accuracy, % (sample-weighted)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(
        fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1)
    )  # beside the axes: a suite's many rows hide no curve
    return _save(fig, path)
