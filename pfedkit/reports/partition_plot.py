"""Heatmap PNG of a [clients, classes] sample-count matrix (Agg canvas, so no display or global backend is needed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from pfedkit.errors import DataError

_LABEL_EVERY_TICK = 40  # above this many clients or classes, let matplotlib pick the ticks
_ANNOTATE_TOTALS = 60  # above this many clients the per-client totals no longer fit


def save_partition_heatmap(counts: np.ndarray, path, title: str = "") -> Path:
    """Clients on x, classes on y, colour = samples (empty cells left white); per-client totals on top if they fit."""
    counts = np.asarray(counts)
    if counts.ndim != 2 or counts.size == 0:
        raise DataError(
            f"counts must be a non-empty [clients, classes] matrix, got shape {counts.shape}; "
            "build it with pfedkit.data.partition.label_counts"
        )
    if not np.issubdtype(counts.dtype, np.number) or (counts < 0).any():
        raise DataError("counts must hold non-negative numbers of samples")
    n_clients, n_classes = counts.shape
    # Width grows with the client count but is capped so 500 clients still give a readable, small PNG.
    fig = Figure(
        figsize=(min(4 + 0.25 * n_clients, 20), min(2.5 + 0.25 * n_classes, 12)), dpi=100, layout="constrained"
    )
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    cmap = colormaps["viridis"].with_extremes(bad="white")  # masked (zero) cells: the client holds none of that class
    # Square-root colour scale: non-IID counts are heavy-tailed, and a linear scale paints every small cell alike.
    image = ax.imshow(
        np.ma.masked_equal(counts.T, 0),
        aspect="auto",
        interpolation="nearest",
        origin="lower",
        cmap=cmap,
        norm=PowerNorm(0.5, vmin=0, vmax=max(float(counts.max()), 1.0)),
    )
    fig.colorbar(image, ax=ax, label="samples")
    ax.set_xlabel("client")
    ax.set_ylabel("class")
    for axis, size in ((ax.xaxis, n_clients), (ax.yaxis, n_classes)):
        if size <= _LABEL_EVERY_TICK:
            axis.set_ticks(range(size))
        else:
            axis.set_major_locator(MaxNLocator(nbins=10, integer=True))
    if n_clients <= _LABEL_EVERY_TICK:
        ax.tick_params(axis="x", labelsize=7)
    if n_clients <= _ANNOTATE_TOTALS:
        top = ax.secondary_xaxis("top")
        top.set_ticks(range(n_clients), [str(int(t)) for t in counts.sum(axis=1)])
        top.tick_params(labelsize=6, rotation=90)
        top.set_xlabel("samples per client", fontsize=8)
    if title:
        fig.suptitle(title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    return path
