"""What a Flower run needs beyond the pfedkit config (result folder, timeouts, minimum replies), the app
folder that `flwr run` takes, and the record names shared by the ServerApp and the ClientApp. No flwr import."""

from __future__ import annotations

import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from pfedkit.config import Config, dump_toml
from pfedkit.errors import ConfigError
from pfedkit.registry import build_config

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

CONTROL, EVAL, EVAL_AFTER, INFO = "pfedkit.control", "pfedkit.eval", "pfedkit.eval-after", "pfedkit.info"


def config_from_run_config(run_config: Mapping[str, Any]) -> Config:
    if "pfedkit-config" not in run_config:
        raise ConfigError("the Flower run config has no `pfedkit-config`; write the app with `pfedkit flower app`")
    return build_config(tomllib.loads(str(run_config["pfedkit-config"])))


@dataclass
class RunSettings:
    config: Config
    out: Path
    run_name: str = "pfedkit"
    resume: bool = False
    min_replies: int = 1  # fewer training replies than this: the round aggregates nothing (server state kept)
    round_timeout: float = 600.0  # seconds to wait for replies; a node silent this long counts as missing
    min_clients: int = 0  # clients to wait for before round 0 (0: all of partition.clients)
    connect_timeout: float = 300.0

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[A-Za-z0-9._-]+", self.run_name):
            raise ConfigError(f"run-name {self.run_name!r}: use letters, digits, '.', '_' or '-' (it names folders)")
        wrong = [
            f"{name}={value} (must be {rule})"
            for name, value, bad, rule in (
                ("min-replies", self.min_replies, self.min_replies < 1, ">= 1"),
                ("min-clients", self.min_clients, self.min_clients < 0, ">= 0"),
                ("round-timeout", self.round_timeout, self.round_timeout <= 0, "positive"),
                ("connect-timeout", self.connect_timeout, self.connect_timeout <= 0, "positive"),
            )
            if bad
        ]
        if wrong:
            raise ConfigError(", ".join(wrong))
        clients = self.config.partition.clients
        if self.min_clients > clients:
            raise ConfigError(f"min-clients={self.min_clients} exceeds partition.clients={clients}")
        if self.min_replies > clients:  # no round could ever aggregate
            raise ConfigError(f"min-replies={self.min_replies} exceeds partition.clients={clients}")

    @property
    def wait_for(self) -> int:
        return self.min_clients or self.config.partition.clients

    def run_config(self) -> dict[str, Any]:
        return {
            "pfedkit-config": dump_toml(self.config.to_dict()),
            "out": str(self.out),
            "run-name": self.run_name,
            "resume": self.resume,
            "min-replies": self.min_replies,
            "round-timeout": float(self.round_timeout),
            "min-clients": self.min_clients,
            "connect-timeout": float(self.connect_timeout),
        }

    @classmethod
    def from_run_config(cls, run_config: Mapping[str, Any]) -> "RunSettings":
        known = set(cls(config=Config(), out=Path(".")).run_config())
        unknown = sorted(set(run_config) - known)
        if unknown:
            raise ConfigError(f"unknown run config key(s) {', '.join(unknown)}; valid: {', '.join(sorted(known))}")
        if "out" not in run_config:
            raise ConfigError("the Flower run config has no `out` (the server's result folder)")
        return cls(
            config=config_from_run_config(run_config),
            out=Path(str(run_config["out"])).expanduser(),
            run_name=str(run_config.get("run-name", "pfedkit")),
            resume=bool(run_config.get("resume", False)),
            min_replies=int(run_config.get("min-replies", 1)),
            round_timeout=float(run_config.get("round-timeout", 600)),
            min_clients=int(run_config.get("min-clients", 0)),
            connect_timeout=float(run_config.get("connect-timeout", 300)),
        )


def _toml(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def write_app(folder: str | Path, settings: RunSettings) -> Path:
    """The Flower app folder (one pyproject.toml) for `flwr run FOLDER <federation>`; the code is the installed
    pfedkit."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        "[build-system]",
        'requires = ["hatchling"]',
        'build-backend = "hatchling.build"',
        "",
        "[project]",
        'name = "pfedkit-flower-app"',
        'version = "0.1.0"',
        'description = "A pfedkit method on Flower"',
        'license = "Apache-2.0"',
        'dependencies = ["pfedkit[flower]"]',
        "",
        "[tool.flwr.app]",
        'publisher = "pfedkit"',
        "",
        "[tool.flwr.app.components]",
        'serverapp = "pfedkit.flower.server_app:app"',
        'clientapp = "pfedkit.flower.client_app:app"',
        "",
        "[tool.flwr.app.config]",
    ]
    lines += [f'"{k}" = {_toml(v)}' for k, v in settings.run_config().items()]
    path = folder / "pyproject.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def default_state_root() -> Path:
    """Where a Flower node keeps its clients' state: $PFEDKIT_FLOWER_STATE, else ~/.cache/pfedkit/flower-state."""
    return Path(
        os.environ.get("PFEDKIT_FLOWER_STATE") or Path.home() / ".cache" / "pfedkit" / "flower-state"
    ).expanduser()
