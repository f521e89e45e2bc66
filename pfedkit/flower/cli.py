"""`pfedkit flower ...`: write a Flower app for a config, or run it on a SuperLink and SuperNodes on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import click

SET_HELP = "override any key: section.key=value (repeatable)"


def _settings(
    config: str,
    out: str,
    overrides: tuple[str, ...],
    run_name: Optional[str],
    min_replies: int,
    round_timeout: float,
    min_clients: int,
    resume: bool,
):
    from pfedkit.errors import ConfigError
    from pfedkit.flower.settings import RunSettings
    from pfedkit.registry import load_config

    cfg = load_config(config, list(overrides))
    if cfg.run.device != "cpu":
        raise ConfigError(
            f"run.device = {cfg.run.device!r}: Flower nodes train on the CPU in this version; "
            'set run.device = "cpu" (GPU runs: `pfedkit run` or `pfedkit reproduce`)'
        )
    out_path = Path(out).expanduser().resolve()  # the ServerApp runs in the SuperLink's folder, not this one
    return RunSettings(
        cfg,
        out_path,
        run_name=run_name or out_path.name or "pfedkit",
        resume=resume,
        min_replies=min_replies,
        round_timeout=round_timeout,
        min_clients=min_clients,
    )


def run_options(f):
    options = [
        click.argument("config", type=click.Path(exists=True, dir_okay=False)),
        click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="server's result folder"),
        click.option("--set", "overrides", multiple=True, help=SET_HELP),
        click.option(
            "--run-name", default=None, help="names the clients' state folders (default: the --out folder's name)"
        ),
        click.option(
            "--min-replies", default=1, show_default=True, help="fewer training replies: the round aggregates nothing"
        ),
        click.option("--round-timeout", default=600.0, show_default=True, help="seconds to wait for a round's replies"),
        click.option("--min-clients", default=0, show_default=True, help="clients to wait for before round 0 (0: all)"),
        click.option("--resume", is_flag=True, help="continue the server's run in --out from its checkpoint"),
    ]
    for option in reversed(options):
        f = option(f)
    return f


@click.group("flower")
def flower() -> None:
    """Run a method across machines on Flower (needs `pip install pfedkit[flower]`)."""


@flower.command("app")
@run_options
@click.option("--app", "app_dir", required=True, type=click.Path(file_okay=False), help="folder to write the app into")
def app(config, out, overrides, run_name, min_replies, round_timeout, min_clients, resume, app_dir) -> None:
    """Write the Flower app folder for CONFIG; start it with `flwr run APP <federation>`."""
    from pfedkit.flower.settings import write_app

    settings = _settings(config, out, overrides, run_name, min_replies, round_timeout, min_clients, resume)
    path = write_app(app_dir, settings)
    clients = settings.config.partition.clients
    click.echo(
        f"app: {path}\nper client K in 0..{clients - 1}, on its machine:\n"
        f"  flower-supernode --superlink <host>:<port> --root-certificates ca.crt "
        f"--node-config 'client-id=K data-dir=\"/data/site-K\"'\n"
        f"then: flwr run {app_dir} <federation> --stream   (see docs/flower.md)"
    )


@flower.command("local")
@run_options
@click.option(
    "--work",
    "work",
    default=None,
    type=click.Path(file_okay=False),
    help="folder for the app, logs and Flower's state (default: OUT/flower)",
)
@click.option("--node-config", "node_config", default="", help="extra node config for every node, e.g. 'threads=1'")
@click.option("--timeout", default=3600.0, show_default=True, help="seconds before the whole run is stopped")
def local(
    config, out, overrides, run_name, min_replies, round_timeout, min_clients, resume, work, node_config, timeout
) -> None:
    """Run CONFIG on a SuperLink and one SuperNode per client, all on 127.0.0.1 (insecure: for trying out)."""
    from pfedkit.flower.local import run_loopback

    settings = _settings(config, out, overrides, run_name, min_replies, round_timeout, min_clients, resume)
    extra = {}
    for item in node_config.split():
        if "=" not in item:
            raise click.BadParameter(f"{item!r}: expected key=value", param_hint="--node-config")
        key, value = item.split("=", 1)
        extra[key] = value
    work_dir = Path(work) if work else settings.out / "flower"
    summary = run_loopback(
        settings,
        work_dir,
        settings.config.partition.clients,
        timeout=timeout,
        node_config=extra,
        log=lambda line: click.echo(f"flower local: {line}", err=True),
    )
    click.echo(json.dumps(summary, indent=2))
    click.echo(f"results: {settings.out}; logs: {work_dir}")
