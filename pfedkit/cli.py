"""The `pfedkit` command: run, compare, tune, reproduce, curves, partition, data, pretrain, methods, flower, demo."""

from __future__ import annotations

import dataclasses
import errno
import json
import os
import sys
from collections import Counter
from pathlib import Path
from typing import Optional

import click

from pfedkit.errors import PfedkitError

SET_HELP = "override any key: section.key=value (repeatable), e.g. --set train.lr=0.01"
ROOT_HELP = "data folder (else data.root, else $PFEDKIT_DATA, else ~/.cache/pfedkit)"


def with_root(overrides: tuple[str, ...], root: Optional[str]) -> list[str]:
    """`--data-root` is `--set data.root=...` with the path quoted as a TOML string."""
    return list(overrides) + ([f"data.root={json.dumps(root)}"] if root else [])


def parse_seeds(ctx: click.Context, param: click.Parameter, text: str, none_allowed: bool = False) -> list[int]:
    """--seeds 0,1,2 as a list of integers, each once (a seed given twice would be counted twice in a mean); none
    only where `none_allowed` (tune's test seeds)."""
    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
        if not seeds and not none_allowed:
            raise ValueError
    except ValueError:
        raise click.BadParameter(f"{text!r}: seeds are integers, e.g. 0,1,2") from None
    outside = [s for s in seeds if not 0 <= s < 2**32]
    if outside:  # before anything trains, not when the first seed has run
        raise click.BadParameter(f"{text!r}: seed {outside[0]} is outside 0 .. 2**32 - 1")
    twice = sorted({s for s in seeds if seeds.count(s) > 1})
    if twice:
        raise click.BadParameter(
            f"{text!r} names seed {', '.join(map(str, twice))} more than once; give each seed once"
        )
    return seeds


def parse_seeds_or_none(ctx: click.Context, param: click.Parameter, text: str) -> list[int]:
    return parse_seeds(ctx, param, text, none_allowed=True)


CONTINUE = {  # how each command carries on after an interruption or a full disk
    "run": "continue with --resume",
    "compare": "continue with --resume",
    "reproduce": "run the same command again to continue (finished cells are kept)",
    "tune": "run the same command again to continue the study",
}


def describe_os_error(err: OSError, command: str = "") -> str:
    """What a failed read or write of the system means for the run, and what to do."""
    where = f" {err.filename}" if err.filename else ""
    if err.errno == errno.ENOSPC:
        how = CONTINUE.get(command, "continue with --resume")
        return (
            f"the disk is full (writing{where}); free some space and {how}: checkpoints and results are replaced "
            "whole, so the last ones written are intact"
        )
    if err.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
        return f"cannot write{where} ({err.strerror}); choose an --out (or data folder) you can write to"
    return f"{err.strerror or err}{':' + where if where else ''}"


def _fail(err: Exception) -> None:
    click.echo(f"error: {err}", err=True)
    sys.exit(2)


class Group(click.Group):
    """Turn pfedkit's own errors into one clear message and exit code 2, without a traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except PfedkitError as err:
            _fail(err)
        except KeyboardInterrupt:  # Ctrl-C: the runs keep what their checkpoints hold
            how = CONTINUE.get(ctx.invoked_subcommand or "", "")
            click.echo(f"interrupted{': every run keeps its last checkpoint; ' + how if how else ''}", err=True)
            sys.exit(130)
        except OSError as err:  # a full disk, a read-only folder: a message, not a traceback (PFEDKIT_DEBUG=1 shows it)
            if os.environ.get("PFEDKIT_DEBUG"):
                raise
            _fail(PfedkitError(describe_os_error(err, ctx.invoked_subcommand or "")))


@click.group(cls=Group)
@click.version_option(package_name="pfedkit")
def main() -> None:
    """Personalized federated learning: run, compare and reproduce PFL methods."""


@main.command()
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--out", "out", required=True, type=click.Path(file_okay=False), help="run folder")
@click.option("--resume", is_flag=True, help="continue the run in --out from its last checkpoint")
@click.option("--set", "overrides", multiple=True, help=SET_HELP)
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
@click.option("--quiet", is_flag=True, help="no progress bar")
@click.option("--force", is_flag=True, help="write a new run into an --out that holds files pfedkit did not write")
@click.option(
    "--accept-code-change",
    is_flag=True,
    help="with --resume: continue although the method's code changed since the run began (recorded in the run folder)",
)
def run(
    config: Optional[str],
    out: str,
    resume: bool,
    overrides: tuple[str, ...],
    root: Optional[str],
    quiet: bool,
    force: bool,
    accept_code_change: bool,
) -> None:
    """Run one experiment described by CONFIG (a TOML file)."""
    from pfedkit.experiments import run_experiment
    from pfedkit.registry import load_config

    saved = Path(out) / "config.toml"
    if config is None:
        if not resume:
            raise click.UsageError("give a CONFIG file, or --resume to continue the run in --out")
        if not saved.exists():
            started = any((Path(out) / name).exists() for name in ("checkpoint.pt", "metrics.csv"))
            raise PfedkitError(
                f"{out} holds a run without its config.toml: resume it with the config it was started with, "
                f"`pfedkit run CONFIG --out {out} --resume`"
                if started
                else f"there is no run in {out} to resume (no config.toml there); start one with "
                f"`pfedkit run CONFIG --out {out}`"
            )
        config = str(saved)
    elif not resume and saved.exists() and Path(config).resolve() == saved.resolve():
        raise PfedkitError(
            f"{config} is --out's own config.toml: a run writes its resolved config there and would "
            "replace yours; choose another --out (e.g. a subfolder)"
        )
    cfg = load_config(config, with_root(overrides, root))
    summary = run_experiment(
        cfg, out, resume=resume, progress=not quiet, force=force, accept_code_change=accept_code_change
    )
    click.echo(
        f"{summary['method']}: best acc {summary['best_acc']:.4f} (round {summary['best_round']}), "
        f"last {summary['last_acc']:.4f} [{summary['protocol']} protocol, "
        f"{'after local training' if summary['eval_point'] == 'after-local' else 'at round start'}]"
        + (
            f"; after local training best {summary['best_acc_after']:.4f}, last {summary['last_acc_after']:.4f}"
            if summary["eval_point"] == "both"
            else ""
        )
        + (f"; evaluated on the {summary['evaluated_on']}" if "evaluated_on" in summary else "")
        + f"; results in {out}"
    )
    if not quiet and (trained := describe_training(summary.get("training", {}))):
        click.echo(trained)


def describe_training(record: dict) -> str:
    """One line on how a run's clients trained: per path, and the cohort's steps (captured, replayed, eager)."""
    paths = ", ".join(f"{n} {path}" for path, n in record.get("paths", {}).items())
    if not paths:
        return ""
    line = f"clients trained: {paths}" + (f", in {record['executor']}" if "executor" in record else "")
    if "step_mode" in record:
        steps = ", ".join(f"{record[k]} {k.removeprefix('steps_')}" for k in sorted(record) if k.startswith("steps_"))
        line += f"; cohort steps: {record['step_mode']} ({steps})"
        if "trained_together" in record:
            line += f", shared by {record['trained_together']} runs trained as one"
    if forms := record.get("conv_forms"):  # run.conv_form "auto": the form each convolution shape took
        taken = Counter(choice.split(" ", 1)[0] for choice in forms.values())
        line += "; convolutions " + ", ".join(f"{n} {form}" for form, n in sorted(taken.items()))
    if "cohort_size" in record:
        line += f"; clients per step {record['cohort_size']}"
    if "capture_failed" in record:
        line += f"; capture failed, eager instead: {record['capture_failed']}"
    if tf32 := [part for part, allowed in record.get("tf32", {}).items() if allowed]:
        line += f"; TF32 allowed for {' and '.join(tf32)}"
    return line


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--methods", required=True, help="comma-separated method names")
@click.option("--seeds", default="0", show_default=True, callback=parse_seeds, help="comma-separated seeds")
@click.option(
    "--out",
    "out",
    required=True,
    type=click.Path(file_okay=False),
    help="comparison folder: a run folder per method and seed (METHOD/seedN), table.md, results.csv, the plot",
)
@click.option("--set", "overrides", multiple=True, help=SET_HELP)
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
@click.option("--resume", is_flag=True, help="keep finished runs, resume unfinished ones")
@click.option("--quiet", is_flag=True, help="no progress bars")
def compare(
    config: str,
    methods: str,
    seeds: list[int],
    out: str,
    overrides: tuple[str, ...],
    root: Optional[str],
    resume: bool,
    quiet: bool,
) -> None:
    """Run several methods over several seeds on CONFIG; write a markdown table and one plot."""
    from pfedkit.experiments.compare import run_comparison

    names = [m.strip() for m in methods.split(",") if m.strip()]
    if twice := sorted({m for m in names if names.count(m) > 1}):
        raise click.BadParameter(
            f"{methods!r} names {', '.join(twice)} more than once; give each method once", param_hint="--methods"
        )
    table, plot = run_comparison(
        config, names, seeds, Path(out), with_root(overrides, root), resume=resume, progress=not quiet
    )
    click.echo(table)
    click.echo(f"table: {Path(out) / 'table.md'}\nplot: {plot}")


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--set", "overrides", multiple=True, help=SET_HELP)
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
@click.option(
    "--plot",
    "plot",
    default="partition.png",
    show_default=True,
    type=click.Path(dir_okay=False),
    help="where to write the heatmap PNG",
)
def partition(config: str, overrides: tuple[str, ...], root: Optional[str], plot: str) -> None:
    """Print per-client sample and label counts of CONFIG's partition and write a heatmap."""
    from pfedkit.data.federated import build_federated
    from pfedkit.registry import load_config
    from pfedkit.reports.partition_plot import save_partition_heatmap

    cfg = load_config(config, with_root(overrides, root))
    fed = build_federated(cfg)
    counts = fed.label_counts("train")
    click.echo(
        f"{fed.name}: {fed.num_clients} clients, {fed.num_classes} classes, scheme {cfg.partition.scheme}, "
        f"protocol {fed.protocol}"
    )
    header = "client  train   test  classes  label counts (train)"
    click.echo(header)
    for cid in range(fed.num_clients):
        labels = " ".join(f"{k}:{int(c)}" for k, c in enumerate(counts[cid]) if c)
        click.echo(
            f"{cid:>6} {fed.train_sizes()[cid]:>6} {fed.test_sizes()[cid]:>6} "
            f"{int((counts[cid] > 0).sum()):>8}  {labels}"
        )
    path = save_partition_heatmap(
        counts, Path(plot), title=f"{fed.name} {cfg.partition.scheme} ({fed.num_clients} clients)"
    )
    click.echo(f"heatmap: {path}")


@main.command()
@click.argument("runs", nargs=-1, required=True, type=click.Path(exists=True, file_okay=False))
@click.option("--window", default=20, show_default=True, type=click.IntRange(min=1), help="rounds per block")
@click.option(
    "--last",
    "last_k",
    default=10,
    show_default=True,
    type=click.IntRange(min=1),
    help="the final accuracy is the mean of this many last evaluations",
)
@click.option(
    "--point",
    type=click.Choice(["start", "after-local"]),
    default=None,
    help="evaluation point to read (default: the run's own; a run measured at both headlines start)",
)
def curves(runs: tuple[str, ...], window: int, last_k: int, point: Optional[str]) -> None:
    """Mean accuracy of each block of rounds of one or more run folders (finished or still training), with the
    mean of the last evaluations, the best and the curve's trend mark: how far a curve has flattened."""
    from pfedkit.reports.tables import TREND_MARKS, TREND_NOTE, curve_trend, headline_curve, window_means

    table = {}
    for run in runs:
        if not (Path(run) / "metrics.csv").exists():
            raise click.UsageError(
                f"{run} holds no metrics.csv: give run folders (a suite's are <out>/<column>/<row>/seed<N>)"
            )
        curve = [(r, 100 * a) for r, a in headline_curve(Path(run), point)]
        if not curve:
            raise click.UsageError(f"{run} has no evaluations at point {point!r}: its run measured another point")
        table[run] = curve
    blocks = sorted({(a, b) for curve in table.values() for a, b, _ in window_means(curve, window)})
    click.echo(
        "| run | " + " | ".join(f"{a}-{b}" for a, b in blocks) + f" | last {last_k} | best (round) | last round |"
    )
    click.echo("|---" * (len(blocks) + 4) + "|")
    for run, curve in table.items():
        means = {(a, b): m for a, b, m in window_means(curve, window)}
        best_round, best = max(curve, key=lambda p: p[1])
        final = sum(a for _, a in curve[-last_k:]) / len(curve[-last_k:])
        cells = [f"{means[k]:.2f}" if k in means else "" for k in blocks]
        click.echo(
            f"| {run} | " + " | ".join(cells) + f" | {final:.2f}{TREND_MARKS[curve_trend(curve)]} | "
            f"{best:.2f} ({best_round}) | {curve[-1][0]} |"
        )
    click.echo(f"\nAccuracy in %, blocks of {window} rounds from round 1. {TREND_NOTE}.")


@main.group(cls=Group)
def data() -> None:
    """Fetch or check dataset files."""


@data.command("fetch")
@click.argument("name")
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
def data_fetch(name: str, root: Optional[str]) -> None:
    """Download NAME's official files and verify their checksums."""
    from pfedkit.data.sources import fetch_dataset

    paths = fetch_dataset(name, root)
    for path in paths:
        click.echo(f"ok  {path}")
    if not paths:
        click.echo(f"{name} needs no download: it is bundled or generated")


@data.command("check")
@click.argument("name")
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
def data_check(name: str, root: Optional[str]) -> None:
    """Verify NAME's files against their checksums."""
    from pfedkit.data.sources import check_dataset
    from pfedkit.errors import DataError

    try:
        lines = check_dataset(name, root)
    except DataError as err:
        for line in getattr(err, "checked", []):  # the good files, then the problems as the error
            click.echo(line)
        raise
    for line in lines:
        click.echo(line)


@main.command()
@click.option("--dataset", required=True, help="data set to train on, e.g. mnist")
@click.option(
    "--model",
    "model",
    default="small-resnet-adapter",
    show_default=True,
    help="backbone: resnet18-adapter or small-resnet-adapter (trained without adapters)",
)
@click.option("--out", "out", required=True, type=click.Path(dir_okay=False), help="state-dict file to write")
@click.option(
    "--option", "options", multiple=True, help="model option key=value (TOML value), e.g. --option widths=[8,16,32,64]"
)
@click.option("--epochs", default=2, show_default=True, type=click.IntRange(min=1), help="passes over DATASET")
@click.option("--batch-size", default=64, show_default=True, type=click.IntRange(min=1), help="samples per SGD step")
@click.option(
    "--lr",
    default=0.05,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="SGD lr, cosine-annealed over the epochs",
)
@click.option(
    "--momentum", default=0.9, show_default=True, type=click.FloatRange(0, 1, max_open=True), help="SGD momentum"
)
@click.option("--seed", default=0, show_default=True, type=int, help="seeds the initial weights and batch order")
@click.option(
    "--threads",
    default=1,
    show_default=True,
    type=click.IntRange(min=0),
    help="torch CPU threads (small batches run fastest on one; 0 = torch's default)",
)
@click.option("--device", default="cpu", show_default=True, help="cpu, or cuda for a GPU")
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
def pretrain(
    dataset: str,
    model: str,
    out: str,
    options: tuple[str, ...],
    epochs: int,
    batch_size: int,
    lr: float,
    momentum: float,
    seed: int,
    threads: int,
    device: str,
    root: Optional[str],
) -> None:
    """Train a backbone centrally on DATASET and save a torchvision-format state dict for model.options.pretrained."""
    import torch

    from pfedkit.config import override_value
    from pfedkit.errors import ConfigError
    from pfedkit.experiments.pretrain import pretrain_backbone

    if threads > 0:
        torch.set_num_threads(threads)

    if bad := [o for o in options if "=" not in o]:
        raise click.BadParameter(
            f"{', '.join(bad)}: give KEY=VALUE, e.g. --option widths=[8,16,32,64]", param_hint="--option"
        )
    pairs = [o.split("=", 1) for o in options]
    try:
        parsed = {key.strip(): override_value(value, f"--option {key}={value}") for key, value in pairs}
    except ConfigError as err:
        raise click.BadParameter(str(err), param_hint="--option") from None
    result = pretrain_backbone(
        dataset,
        model,
        out,
        options=parsed,
        epochs=epochs,
        batch_size=batch_size,
        lr=lr,
        momentum=momentum,
        seed=seed,
        root=root,
        device=device,
        log=click.echo,
    )
    acc = f", test accuracy {result['test_acc']:.4f}" if "test_acc" in result else ""
    click.echo(
        f"saved {out} ({model} on {dataset}, {result['seconds']:.0f} s{acc}); use it with "
        f'model.options.pretrained = "{out}"'
    )


@main.command()
@click.argument("suite", required=False)
@click.option("--list", "show_list", is_flag=True, help="show every suite: paper, rows, columns, data, time")
@click.option(
    "--scale",
    default="small",
    show_default=True,
    help="small: a reduced setting that runs on a CPU; others per suite (full or paper: the paper's setting, "
    "long: more rounds); --list shows each suite's scales and times",
)
@click.option("--seeds", default="0", show_default=True, callback=parse_seeds, help="comma-separated seeds")
@click.option(
    "--out",
    "out",
    default=None,
    type=click.Path(file_okay=False),
    help="default runs/reproduce/SUITE with dashes as underscores (e.g. runs/reproduce/fedafk_table3; "
    "SUITE_SCALE beyond the small scale); with --claims, the folder holding those (default runs/reproduce)",
)
@click.option("--rows", default=None, help="comma-separated rows to run (the table shows every finished row)")
@click.option("--columns", default=None, help="comma-separated columns to run")
@click.option("--workers", default=None, type=int, help="worker processes; 0 = one per core")
@click.option(
    "--threads",
    default=None,
    type=click.IntRange(min=1),
    help="torch CPU threads of the suite's own process (default: the suite's `threads`, else torch's); 1 when "
    "another training shares the cores (spinning threads on busy cores slow a round several times over)",
)
@click.option("--set", "overrides", multiple=True, help=SET_HELP)
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
@click.option("--table-only", is_flag=True, help="write the table from the finished runs in --out, train nothing")
@click.option(
    "--tuned",
    "tuned",
    default=None,
    type=click.Path(file_okay=False),
    help="folder of `pfedkit tune` outputs, one per row (DIR/<row>/): those rows run at their tuned values",
)
@click.option(
    "--reuse-from",
    "reuse_from",
    default=None,
    type=click.Path(file_okay=False),
    help="copy a cell from a finished run under this folder that had the same config, instead of training "
    "it (default: the folder holding --out, i.e. the other suites' results)",
)
@click.option("--no-reuse", is_flag=True, help="train every cell, even one an identical finished run already holds")
@click.option("--quiet", is_flag=True, help="no progress bars")
@click.option(
    "--claims",
    "claims",
    is_flag=True,
    help="print where each paper's claims stand, judged by code on the finished runs of every suite (or "
    "SUITE) under --out; train nothing",
)
@click.option(
    "--update",
    "update",
    default=None,
    type=click.Path(exists=True, dir_okay=False),
    help="with --claims: write the table into this markdown file, between its generated-table markers",
)
@click.option(
    "--repo-script",
    is_flag=True,
    hidden=True,
    help="with --claims: suggest benchmarks/reproduce.py (it passes this for the committed table)",
)
def reproduce(
    suite: Optional[str],
    show_list: bool,
    scale: str,
    seeds: list[int],
    out: Optional[str],
    rows: Optional[str],
    columns: Optional[str],
    workers: Optional[int],
    threads: Optional[int],
    overrides: tuple[str, ...],
    root: Optional[str],
    table_only: bool,
    tuned: Optional[str],
    reuse_from: Optional[str],
    no_reuse: bool,
    quiet: bool,
    claims: bool,
    update: Optional[str],
    repo_script: bool,
) -> None:
    """Run a paper's table (SUITE) and write table.md, table.csv and curves beside the paper's numbers."""
    from pfedkit.papers.reproduce import (
        CLAIMS_BEGIN,
        CLAIMS_END,
        VERDICT_COUNTS_HEADING,
        claims_table,
        describe,
        results_folder,
        run_suite,
        update_claims,
        verdict_changes,
    )
    from pfedkit.papers.suites import SUITES

    if suite is not None and suite not in SUITES:
        raise click.BadParameter(f"{suite!r}: suites are {', '.join(SUITES)} (see --list)", param_hint="SUITE")
    if update and not claims:
        raise click.UsageError("--update writes the claims table: add --claims")
    if claims:
        results = Path(out) if out else Path("runs") / "reproduce"
        if not results.is_dir():
            raise click.BadParameter(
                f"{results} is not a folder: give the --out your suites ran into", param_hint="--out"
            )
        table = claims_table(results, [SUITES[suite]] if suite else list(SUITES.values()), repo_script)
        if not update:
            click.echo("\n".join(table))
            return
        replaced = update_claims(Path(update), table)
        if replaced is None:
            raise click.UsageError(
                f"{update} has no generated-table markers: put the lines\n{CLAIMS_BEGIN}\n"
                f"{CLAIMS_END}\nwhere the table goes, then run this again"
            )
        # the table is in the document now: say what it counts and what moved, not its hundreds of lines again
        counts = table.index(VERDICT_COUNTS_HEADING) if VERDICT_COUNTS_HEADING in table else len(table)
        end = table.index("", counts + 2) if "" in table[counts + 2 :] else len(table)
        click.echo(f"Wrote the claims table into {update}.\n" + "\n".join(table[counts:end]))
        changes = verdict_changes(replaced, table)  # what a reader of the document should look at again
        click.echo(f"\nVerdicts changed in {update}:" if changes else f"\nNo verdict changed in {update}.")
        click.echo("\n".join(f"- {change}" for change in changes), nl=bool(changes))
        if not suite:  # every paper's page beside the document: its tables as the paper prints them, its claims
            from pfedkit.papers.paper_pages import write_paper_pages

            pages = write_paper_pages(results, list(SUITES.values()), Path(update).parent / "papers")
            click.echo(f"\nPapers' pages: {', '.join(str(p) for p in pages)}")
        return
    if show_list or suite is None:
        click.echo("\n\n".join(describe(s) for s in SUITES.values()))
        if suite is None and not show_list:
            click.echo("\nrun one with: pfedkit reproduce SUITE [--scale small|full|...] [--seeds 0,1,2] [--out DIR]")
        return
    split = lambda text: [x.strip() for x in text.split(",") if x.strip()] if text else None  # noqa: E731
    folder = Path(out) if out else Path("runs") / "reproduce" / results_folder(suite, scale)
    chosen = SUITES[suite] if threads is None else dataclasses.replace(SUITES[suite], threads=threads)
    table = run_suite(
        chosen,
        scale=scale,
        seeds=seeds,
        out=folder,
        overrides=overrides,
        rows=split(rows),
        columns=split(columns),
        data_root=root,
        workers=workers,
        table_only=table_only,
        progress=not quiet,
        tuned=Path(tuned) if tuned else None,
        reuse_from=None if no_reuse else Path(reuse_from) if reuse_from else folder.parent,
        log=click.echo,
    )
    if not table:
        click.echo(f"no run in {folder} yet: no table written (run the suite first: drop --table-only)")
        return
    click.echo(table)
    click.echo(f"table: {folder / 'table.md'}  ({folder / 'table.csv'}, curves_<column>.png)")


@main.command()
@click.argument("config", type=click.Path(exists=True, dir_okay=False))
@click.option("--method", "method", default=None, help="method to tune (default: the config's method.name)")
@click.option("--trials", default=20, show_default=True, type=int, help="trials in all (complete, pruned or diverged)")
@click.option(
    "--out", "out", required=True, type=click.Path(file_okay=False), help="tune folder (resumes if it holds one)"
)
@click.option("--params", default="", help="comma-separated hyper-parameters to search (default: every declared range)")
@click.option(
    "--validation",
    default=0.2,
    show_default=True,
    type=float,
    help="share of each client's training data held out to score trials (never the test split)",
)
@click.option(
    "--last-k",
    default=5,
    show_default=True,
    type=click.IntRange(min=1),
    help="score: mean accuracy of the last k evaluations",
)
@click.option(
    "--seeds",
    default="0",
    show_default=True,
    callback=parse_seeds_or_none,
    help="seeds of the test-split re-runs of the best and the default values ('' for none)",
)
@click.option(
    "--batch",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="trials drawn and run at a time; on a GPU's cohort path those differing only in hyper-parameters marked "
    "[packs] in `pfedkit methods` train as one stacked computation (elsewhere they run one after another)",
)
@click.option("--set", "overrides", multiple=True, help=SET_HELP)
@click.option("--data-root", "root", default=None, help=ROOT_HELP)
@click.option("--quiet", is_flag=True, help="no progress bars")
def tune(
    config: str,
    method: Optional[str],
    trials: int,
    out: str,
    params: str,
    validation: float,
    last_k: int,
    seeds: list[int],
    batch: int,
    overrides: tuple[str, ...],
    root: Optional[str],
    quiet: bool,
) -> None:
    """Search a method's hyper-parameters on a validation split (Optuna), then re-run the best on the test split."""
    from pfedkit.config import apply_overrides
    from pfedkit.experiments.pipeline import check_method_overrides, method_config
    from pfedkit.registry import read_config_file
    from pfedkit.tune import Tuner

    given = with_root(overrides, root)
    raw = apply_overrides(read_config_file(config), given)  # method.module beside the file
    method = method or raw.get("method", {}).get("name")
    if not method:
        raise click.UsageError("name the method to tune: --method NAME, or method.name in the config")
    check_method_overrides(raw, given, [method])
    cfg = method_config(raw, method, raw.get("run", {}).get("seed", 0))  # the config's values apply to its own method
    tuner = Tuner(
        cfg,
        Path(out),
        trials=trials,
        validation=validation,
        last_k=last_k,
        progress=not quiet,
        params=[p.strip() for p in params.split(",") if p.strip()],
        batch=batch,
    )
    result = tuner.run(seeds)
    click.echo((Path(out) / "tune.md").read_text().rstrip())
    click.echo(
        f"best config: {Path(out) / 'best.toml'} (pfedkit run {Path(out) / 'best.toml'} --out ...); "
        f"trials: {Path(out) / 'trials.csv'}, {Path(out) / 'search.png'}; tuned {result['tuned']}"
    )


@main.command()
@click.option(
    "--module",
    "modules",
    multiple=True,
    help="import this method module (a .py file or a module name; repeatable) and list its methods alone",
)
@click.argument("names", nargs=-1)
def methods(names: tuple[str, ...], modules: tuple[str, ...]) -> None:
    """List methods with their hyper-parameters and defaults, and the path each trains and evaluates on: NAMES, or
    the methods of --module, or every method (yours first)."""
    from types import SimpleNamespace

    from pfedkit.methods import METHODS
    from pfedkit.methods.base import search_space
    from pfedkit.registry import import_installed_methods, import_method_module

    built_in = set(METHODS)
    for module in modules:
        import_method_module(module)
    from_modules = sorted(set(METHODS) - built_in)
    if modules and not from_modules and not names:
        raise PfedkitError(
            f"{', '.join(modules)} registers no method (or only ones already known); see `pfedkit methods`"
        )
    for problem in import_installed_methods():  # the installed packages' methods are listed too, as runs find them
        click.echo(f"warning: {problem}", err=True)
    yours = sorted(set(METHODS) - built_in)
    unknown = [n for n in names if n not in METHODS]
    if unknown:
        raise PfedkitError(f"no method {', '.join(map(repr, unknown))}; `pfedkit methods` lists them all")
    for name in names or from_modules or yours + sorted(built_in):
        cls = METHODS[name]
        ability = cls.capabilities()
        origin = f" (from {cls.__module__})" if name in yours else ""
        click.echo(f"{name}{origin}: {cls.summary}")
        click.echo(f"    training: {cls.training} -> {ability.training_path()}")
        click.echo(f"    evaluation: {cls.evaluation} -> {ability.evaluation_path()}")
        from_run = cls.Params.run_defaults(SimpleNamespace(rounds=1, join_ratio=1.0))  # keys filled in from the run
        space = search_space(cls.Params)
        for field, info in cls.Params.model_fields.items():
            default = (
                "(from the run)" if field in from_run else "(required)" if info.is_required() else repr(info.default)
            )
            searched = space.get(field)
            tune = (
                f" [tune: {searched['low']}..{searched['high']}{', log' if searched['log'] else ''}; "
                f"{searched['source']}]"
                if searched
                else ""
            )
            packs = " [packs: runs differing in it train as one cohort]" if field in cls.packable else ""
            click.echo(f"    {field} = {default}  # {info.description or ''}{tune}{packs}")


@main.command()
@click.option(
    "--out",
    "out",
    default="runs/demo",
    show_default=True,
    type=click.Path(file_okay=False),
    help="folder for the four methods' runs, the table and the plot",
)
@click.option("--rounds", default=None, type=int, help="rounds per method (default: the demo's)")
@click.option("--quiet", is_flag=True, help="no progress bars")
def demo(out: str, rounds: Optional[int], quiet: bool) -> None:
    """Offline demo on scikit-learn's digits: Local, FedAvg, FedPer, FedRep over 20 clients, Dirichlet 0.1."""
    from pfedkit.experiments.compare import run_demo

    table, plot = run_demo(Path(out), rounds=rounds, progress=not quiet)
    click.echo(table)
    click.echo(
        f"\nplot: {plot}\nrun folders (each runnable again with `pfedkit run <folder>/config.toml --out NEW`): "
        f"{out}/<method>/seed0"
    )


from pfedkit.flower.cli import flower  # noqa: E402  (imports no flwr until a command runs)

main.add_command(flower)


def program() -> None:
    """The `pfedkit` program (its console script and `python3 -m pfedkit`): `main`, and after a Ctrl-C, out at once.
    The runs have closed what they hold by then; a thread the interrupt left waiting (a worker pool's result reader,
    after a worker stopped mid-reply) would otherwise hold the interpreter's exit forever. In-process callers
    (`main` itself, click's test runner) keep the ordinary SystemExit."""
    try:
        main()
    except SystemExit as done:
        if done.code == 130:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise


if __name__ == "__main__":
    program()
