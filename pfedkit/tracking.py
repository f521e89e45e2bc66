"""Run tracking (`run.log_to`): every round's metrics row, the resolved config and the curves in TensorBoard and
Weights & Biases. Both are optional extras, imported only when a run asks for them."""

from __future__ import annotations

import importlib.util
import os
import uuid
from pathlib import Path
from typing import Any, Optional

from pfedkit.config import Config, dump_toml, flat
from pfedkit.errors import ConfigError

EXTRA = 'pip install -e ".[tracking]"'


def missing(tracker: str, package: str) -> ConfigError:
    return ConfigError(
        f"run.log_to names {tracker}, but {package} is not installed: {EXTRA} (or pip install {package}), "
        f"or take {tracker} out of run.log_to"
    )


def numbers(row: dict[str, Any]) -> dict[str, float]:
    """A metrics row's measured values (round is the step; empty cells, e.g. an unevaluated round, are left out)."""
    return {
        k: float(v) for k, v in row.items() if k != "round" and isinstance(v, (int, float)) and not isinstance(v, bool)
    }


def hyper_parameters(config: Config) -> dict[str, Any]:
    """The config as flat key -> value pairs a tracker can show and filter on (lists and tables as text)."""
    return {k: v if isinstance(v, (int, float, str, bool)) else str(v) for k, v in flat(config.to_dict()).items()}


class TensorBoardLog:
    """Event files in <run>/tensorboard: one scalar per metrics column per round, the config (text and HParams)."""

    def __init__(self, config: Config, out: Path):
        try:
            from torch.utils.tensorboard import SummaryWriter
            from torch.utils.tensorboard.summary import hparams
        except ImportError:
            raise missing("tensorboard", "tensorboard") from None
        self.writer = SummaryWriter(str(out / "tensorboard"), flush_secs=30)
        self.writer.add_text("config", "```\n" + dump_toml(config.to_dict()) + "\n```")
        experiment, start, self.end = hparams(hyper_parameters(config), {"acc": 0.0, "acc_client_mean": 0.0})
        for summary in (experiment, start):
            self.writer.file_writer.add_summary(summary)

    def log(self, row: dict[str, Any]) -> None:
        for key, value in numbers(row).items():
            self.writer.add_scalar(key, value, row["round"])

    def close(self, summary: Optional[dict[str, Any]], curves: Optional[Path]) -> None:
        if curves is not None and curves.exists():
            import numpy as np
            from PIL import Image

            self.writer.add_image("curves", np.asarray(Image.open(curves).convert("RGB")), dataformats="HWC")
        self.writer.file_writer.add_summary(self.end)
        self.writer.close()


class WandbLog:
    """A W&B run: offline into <run>/wandb unless you are logged in; its id is kept in the run folder, so a resumed
    run continues the same W&B run."""

    def __init__(self, config: Config, out: Path):
        try:
            import wandb
        except ImportError:
            raise missing("wandb", "wandb") from None
        id_file = out / "wandb-id.txt"
        if not id_file.exists():
            id_file.write_text(uuid.uuid4().hex[:16])
        mode = os.environ.get("WANDB_MODE") or ("online" if wandb.login(prompt=False) else "offline")
        self.wandb = wandb
        self.run = wandb.init(
            project=os.environ.get("WANDB_PROJECT", "pfedkit"),
            dir=str(out),
            mode=mode,
            id=id_file.read_text().strip(),
            resume="allow",
            name=f"{config.method.name}/{out.name}",
            config=hyper_parameters(config),
            reinit="finish_previous",
        )

    def log(self, row: dict[str, Any]) -> None:
        self.run.log(numbers(row), step=row["round"])

    def close(self, summary: Optional[dict[str, Any]], curves: Optional[Path]) -> None:
        if curves is not None and curves.exists():
            self.run.log({"curves": self.wandb.Image(str(curves))})
        if summary:
            self.run.summary.update({k: v for k, v in summary.items() if isinstance(v, (int, float, str))})
        self.run.finish()
        if self.wandb.run is None:  # finish returns before the offline run file is written; teardown waits for it
            self.wandb.teardown()


TRACKERS = {"tensorboard": (TensorBoardLog, "tensorboard"), "wandb": (WandbLog, "wandb")}  # class, package


class Trackers:
    """The trackers `run.log_to` names, as one round observer of the engine's loop: checked at once (a missing extra
    fails before any training), opened with the first round (inside the run's lock), ended by `close`."""

    def __init__(self, config: Config, out: Path):
        self.config, self.out, self.logs = config, Path(out), None
        for name in config.run.log_to:
            if importlib.util.find_spec(TRACKERS[name][1]) is None:
                raise missing(name, TRACKERS[name][1])

    def __call__(self, row: dict[str, Any]) -> None:
        if self.logs is None:
            self.logs = []
            for name in self.config.run.log_to:
                self.logs.append(TRACKERS[name][0](self.config, self.out))
        for log in self.logs:
            log.log(row)

    def close(self, summary: Optional[dict[str, Any]], curves: Optional[Path]) -> None:
        for log in self.logs or []:
            log.close(summary, curves)
        self.logs = None
