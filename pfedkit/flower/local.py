"""A SuperLink and SuperNodes on 127.0.0.1 for trying a run out (and for the tests): insecure, local only.

Every process is started here and stopped here by its own pid (SIGTERM, then SIGKILL after a grace period).
Real deployments use TLS and node authentication instead; see docs/flower.md.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

from pfedkit.engine.lifeline import Guardian, descendants, send
from pfedkit.engine.store import WORK_MARKER
from pfedkit.errors import PfedkitError

FEDERATION = "loopback"


def offline_env(home: Path) -> dict[str, str]:
    """No telemetry, no update checks, no `uv sync` of app dependencies: use the installed pfedkit and torch."""
    env = dict(os.environ)
    env.update(
        {
            "FLWR_HOME": str(home),
            "FLWR_TELEMETRY_ENABLED": "0",
            "FLWR_DISABLE_UPDATE_CHECK": "1",
            "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
            "RAY_USAGE_STATS_ENABLED": "0",
            "RAY_TMPDIR": str(home),
            "PYTHONUNBUFFERED": "1",
            # Flower's processes start others by name (flower-superexec): this Python's scripts first, so a virtual
            # environment need not be activated
            "PATH": os.pathsep.join(filter(None, [str(Path(sys.executable).parent), env.get("PATH", "")])),
        }
    )
    return env


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tool(name: str) -> str:
    beside = Path(sys.executable).parent / name  # this Python's scripts, even when its folder is not on PATH
    path = str(beside) if beside.is_file() else shutil.which(name)
    if path is None:
        raise PfedkitError(f"`{name}` is not on PATH; install Flower with `pip install pfedkit[flower]`")
    return path


def node_config_text(values: Mapping[str, Any]) -> str:
    """`key=value ...` as `flower-supernode --node-config` reads it (values are TOML literals)."""

    def literal(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        return str(v) if isinstance(v, (int, float)) else json.dumps(str(v))

    return " ".join(f"{k}={literal(v)}" for k, v in values.items())


def stop(proc: Optional[subprocess.Popen], grace: float = 15.0, sig: int = signal.SIGTERM) -> None:
    """Signal the process (started in its own session), its group and every descendant; SIGKILL what lingers."""
    if proc is None:
        return
    below = descendants(proc.pid)
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    send(below, sig)
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=grace)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in below):
        time.sleep(0.1)
    send([pid for pid in below if Path(f"/proc/{pid}").exists()], signal.SIGKILL)


class LoopbackFederation:
    """`with LoopbackFederation(workdir) as fed: fed.start_node(0, ...); fed.run_app(app_dir)`."""

    def __init__(self, workdir: str | Path, start_timeout: float = 60.0):
        self.workdir = Path(workdir).resolve()
        self.home = self.workdir / "flwr-home"
        self.env = offline_env(self.home)
        self.port = free_port()
        self.start_timeout = start_timeout
        self.superlink: Optional[subprocess.Popen] = None
        self.nodes: dict[int, subprocess.Popen] = {}
        self.runs: list[subprocess.Popen] = []
        self.guardian: Optional[Guardian] = None

    def _spawn(self, cmd: list[str], log_name: str) -> subprocess.Popen:
        log = open(self.workdir / log_name, "ab")
        try:  # own session: stopping the group also stops the app processes it spawned
            proc = subprocess.Popen(
                cmd,
                env=self.env,
                cwd=self.workdir,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        finally:
            log.close()
        self.guardian.watch(proc.pid)  # killed with its helpers should this process die without close()
        return proc

    def __enter__(self) -> "LoopbackFederation":
        self.home.mkdir(parents=True, exist_ok=True)
        self.guardian = Guardian()
        (self.home / "config.toml").write_text(
            f'[superlink.{FEDERATION}]\naddress = "127.0.0.1:{self.port}"\ninsecure = true\n'
        )
        try:
            self.superlink = self._spawn(
                [
                    _tool("flower-superlink"),
                    "--insecure",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--disable-runtime-dependency-installation",
                    "--database",
                    str(self.workdir / "superlink.db"),
                ],
                "superlink.log",
            )
            self._wait_healthy()
        except BaseException:
            self.close()
            raise
        return self

    def _wait_healthy(self) -> None:
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.superlink.poll() is not None:
                raise PfedkitError(
                    f"flower-superlink exited ({self.superlink.returncode}); see {self.workdir / 'superlink.log'}"
                )
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise PfedkitError(
            f"flower-superlink not healthy after {self.start_timeout:.0f} s; see {self.workdir / 'superlink.log'}"
        )

    def start_node(self, cid: int, **node_config: Any) -> subprocess.Popen:
        """A SuperNode for client `cid`; extra node config (data-dir, state-dir, threads, ...) as keywords."""
        values = {"client-id": cid, **{k.replace("_", "-"): v for k, v in node_config.items()}}
        self.nodes[cid] = self._spawn(
            [
                _tool("flower-supernode"),
                "--insecure",
                "--superlink",
                f"127.0.0.1:{self.port}",
                "--port",
                str(free_port()),
                "--node-config",
                node_config_text(values),
            ],
            f"node-{cid}.log",
        )
        return self.nodes[cid]

    def reap_dead_nodes(self) -> list[tuple[int, int]]:
        """(client, exit code) of each node process that has ended since the last call; what it left running in its
        process group (an app process) is stopped with it, not left to linger until the run ends."""
        dead = [(cid, proc) for cid, proc in self.nodes.items() if proc.poll() is not None]
        for cid, proc in dead:
            del self.nodes[cid]
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the group outlives its leader while a member runs
            except (ProcessLookupError, PermissionError):
                pass
        return [(cid, proc.returncode) for cid, proc in dead]

    def kill_node(self, cid: int) -> None:
        """Kill a node abruptly (SIGKILL to its group): as a crashed machine would leave."""
        stop(self.nodes.pop(cid), grace=30, sig=signal.SIGKILL)

    def run_app(self, app_dir: str | Path, log_name: str = "run.log") -> subprocess.Popen:
        """`flwr run APP loopback --stream`, its output in WORKDIR/LOG_NAME; returns the process."""
        proc = self._spawn([_tool("flwr"), "run", str(Path(app_dir).resolve()), FEDERATION, "--stream"], log_name)
        self.runs.append(proc)
        return proc

    def close(self) -> None:
        for proc in self.runs:
            stop(proc)
        for cid in list(self.nodes):
            stop(self.nodes.pop(cid))
        stop(self.superlink)
        if self.guardian is not None:
            self.guardian.close()
            self.guardian = None

    def __exit__(self, *exc: Any) -> None:
        self.close()


def rounds_done(metrics: Path) -> int:
    """Rows in the server's metrics.csv so far (0 while it has none)."""
    try:
        return max(len(metrics.read_text().splitlines()) - 1, 0)
    except OSError:
        return 0


def last_error(log: Path) -> str:
    """The last line of a log that names an error (pfedkit's refusals and Python's exceptions), for the terminal."""
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line.strip() for line in lines if "Error" in line or "error:" in line]
    return errors[-1] if errors else ""


def run_loopback(
    settings,
    workdir: str | Path,
    nodes: int,
    *,
    timeout: float = 3600.0,
    node_config: Optional[Mapping[str, Any]] = None,
    log: Callable[[str], None] = lambda line: None,
) -> dict[str, Any]:
    """Write the app, start a SuperLink and one SuperNode per client on 127.0.0.1, run to the end, stop them all;
    `log` hears each step and each finished round."""
    from pfedkit.flower.settings import write_app

    workdir = Path(workdir).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / WORK_MARKER).touch()  # the default OUT/flower sits in the run's own folder: the run must accept it
    app_dir = workdir / "app"
    write_app(app_dir, settings)
    metrics = Path(settings.out) / "metrics.csv"
    rounds = settings.config.train.rounds
    log(f"starting a SuperLink on 127.0.0.1 (logs in {workdir})")
    with LoopbackFederation(workdir) as fed:
        log(f"starting {nodes} SuperNodes")
        for cid in range(nodes):
            fed.start_node(cid, **(node_config or {}))
        proc = fed.run_app(app_dir)
        log("run started; each round costs about 10 s of Flower polling on top of training")
        deadline, seen = time.monotonic() + timeout, rounds_done(metrics)
        while proc.poll() is None:
            if time.monotonic() > deadline:
                raise PfedkitError(f"the Flower run did not finish in {timeout:.0f} s; see {workdir / 'run.log'}")
            time.sleep(1.0)
            for cid, code in fed.reap_dead_nodes():
                log(
                    f"the node of client {cid} stopped (exit code {code}; see {workdir / f'node-{cid}.log'}): "
                    "rounds go on without its replies, as Flower leaves out a node that does not answer"
                )
            if (done := rounds_done(metrics)) != seen:
                seen = done
                last = done - 1  # metrics.csv row k is round k; round R is the final evaluation
                log(
                    "final evaluation done"
                    if last == rounds
                    else f"round {last} done ({done}/{rounds} training rounds)"
                )
    summary_path = Path(settings.out) / "summary.json"
    if not summary_path.exists():
        cause = last_error(workdir / "run.log")
        raise PfedkitError(
            f"the Flower run ended without results{': ' + cause if cause else ''}; see {workdir / 'run.log'}"
        )
    return json.loads(summary_path.read_text())
