"""Replays issue 60's probe of bad input and faults, from a scratch folder outside the repository, and prints what
each case did: its command and pfedkit's answer, and whether that is clean (a refusal or message naming the problem
and the fix, nothing of the user's lost, a killed or interrupted run resuming to the numbers of an uninterrupted one)
or a defect (a traceback, a silent change, a hang).

The cases: the issue's items 1-10 (what its fixes cover) and what the issue found to hold (kills and resumes in
memory, on the cohort path, with client state on disk and during a temporary file's write; unsafe pickles; another
run's checkpoint; read-only and full folders; divergence; SIGINT and SIGTERM; Ctrl-C during compare, repeated).
The read-only and full-disk cases mount a small tmpfs and need root; elsewhere they are reported as not tried.

Usage: python benchmarks/safety/fault_probe.py [--out results/fault_probe.txt] [--interrupts 10]
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

CONFIG = """
[data]
dataset = "synthetic"
options = {samples = 600, test_samples = 200}
[partition]
clients = 4
beta = 0.5
[model]
name = "mlp"
options = {hidden = 16}
[train]
rounds = 3
batch_size = 16
lr = 0.05
[run]
workers = 1
checkpoint_every = 1
"""


REPOSITORY = Path(__file__).resolve().parents[2]
SLOW = (  # rounds long enough (about 0.5 s here) to be killed in the middle of a run
    "--set",
    "data.options={samples = 6000, test_samples = 500}",
    "--set",
    "model.options={hidden = 512}",
    "--set",
    "train.rounds=10",
)
TIMES = ("train_s", "eval_s")  # wall-clock columns: the only ones a resumed run may differ in


def pfedkit(*args: str, cwd: Path) -> tuple[int, str]:
    done = subprocess.run([sys.executable, "-m", "pfedkit", *args], cwd=cwd, capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip()


def api(code: str, cwd: Path) -> tuple[int, str]:
    """A call of the Python API: pfedkit's own error with its message is its clean answer (exit 2 here); any other
    exception (a TypeError from deep inside) shows as a traceback, a defect."""
    wrapped = f"import sys\nfrom pfedkit.errors import PfedkitError\ntry:\n    {code}\nexcept PfedkitError as err:\n"
    wrapped += "    print(f'{type(err).__name__}: {err}')\n    sys.exit(2)\n"
    done = subprocess.run([sys.executable, "-c", wrapped], cwd=cwd, capture_output=True, text=True)
    return done.returncode, (done.stdout + done.stderr).strip()


def numbers(folder: Path) -> list[list[str]]:
    """metrics.csv without its wall-clock columns."""
    path = folder / "metrics.csv"
    if not path.exists():
        return []
    header, *rows = [line.split(",") for line in path.read_text().splitlines()]
    keep = [i for i, name in enumerate(header) if name not in TIMES]
    return [[row[i] for i in keep] for row in rows]


def rows_written(folder: Path) -> int:
    return len(numbers(folder))


def partial_file(folder: Path) -> bool:
    return folder.is_dir() and any(p.name.endswith(".pfedkit-partial") for p in folder.rglob("*"))


def start(args: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "pfedkit", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,  # its own process group, as a terminal's job: a Ctrl-C reaches all of it
    )


def interrupt(proc: subprocess.Popen, when: Callable[[], bool], sig: int, group: bool) -> tuple[bool, int, str]:
    """Send `sig` once `when()` holds; (whether it was sent before the process ended, exit code, output). A process
    still running 90 s after the signal is killed and reported with exit code None's stand-in -999 (a hang)."""
    while proc.poll() is None and not when():
        time.sleep(0.002)
    sent = proc.poll() is None
    if sent:
        (os.killpg if group else os.kill)(proc.pid, sig)
    try:
        out, _ = proc.communicate(timeout=90)
        return sent, proc.returncode, out
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return sent, -999, out


def mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    return done.returncode == 0


def unmount(folder: Path) -> None:
    subprocess.run(["umount", str(folder)], capture_output=True)


class Unsafe:
    """Pickled as a call of open(): a file that would run code when loaded without weights_only."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("note:")]
    return lines[-1][:300] if lines else ""


def more_cases(root: Path, case: Callable, interrupts: int) -> None:
    """The cases the first 17 leave out: the rest of items 1-10, then what the issue found to hold."""
    # 1. dotfiles in an --out without --force: refused or kept, never deleted
    out = root / "dotfiles-plain"
    out.mkdir()
    (out / ".env.template").write_text("mine")
    answer = pfedkit("run", "run.toml", "--out", str(out), "--quiet", cwd=root)
    kept = (out / ".env.template").read_text() == "mine"
    case("user dotfiles beside a new run", "pfedkit run run.toml --out dotfiles-plain", answer, kept)
    # 2. the other result-named files of a user
    for name in ("curves.png", "clients.csv"):
        out = root / f"user-{name}"
        out.mkdir()
        (out / name).write_text("mine")
        answer = pfedkit("run", "run.toml", "--out", str(out), "--quiet", cwd=root)
        kept = (out / name).read_text() == "mine"
        case(f"a user's {name} in --out", f"pfedkit run run.toml --out user-{name}", answer, answer[0] == 2 and kept)
    # 3, 9. a finished run's metrics.csv cut short, or not numbers, read by compare and by reproduce
    for damage in ("cut short", "not a number"):
        cmp = root / f"cmp-{damage.replace(' ', '-')}"
        pfedkit("compare", "run.toml", "--methods", "fedavg", "--seeds", "0", "--out", str(cmp), "--quiet", cwd=root)
        spoil(cmp / "fedavg" / "seed0" / "metrics.csv", damage)
        answer = pfedkit(
            "compare",
            "run.toml",
            "--methods",
            "fedavg",
            "--seeds",
            "0",
            "--out",
            str(cmp),
            "--resume",
            "--quiet",
            cwd=root,
        )
        case(f"metrics.csv {damage}, read by compare", "pfedkit compare ... --resume", answer, answer[0] == 2)
        suite = root / f"suite-{damage.replace(' ', '-')}"
        shutil.copytree(REPOSITORY / "results" / "fedafk_mu", suite)
        before = (suite / "table.md").read_text()
        spoil(sorted(suite.glob("dir/*/seed0/metrics.csv"))[0], damage)
        answer = pfedkit("reproduce", "fedafk-mu", "--out", str(suite), "--table-only", cwd=root)
        unchanged = (suite / "table.md").read_text() == before
        case(
            f"metrics.csv {damage}, read by reproduce",
            "pfedkit reproduce fedafk-mu --out COPY --table-only",
            answer,
            answer[0] == 2 and unchanged,
        )
    # 4, 8. client states: without the wrapper, damaged (then deleted), unsafe
    out = root / "states"
    pfedkit("run", "run.toml", "--out", str(out), "--quiet", "--set", 'run.client_state="disk"', cwd=root)
    newest = sorted((out / "client-state" / "client-1").glob("after-*.pt"))[-1]
    original = newest.read_bytes()
    torch.save(torch.load(newest, weights_only=True)["state"], newest)
    answer = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=5", cwd=root)
    case("a client state without its wrapper", "pfedkit run --out states --resume", answer, answer[0] == 2)
    newest.write_bytes(original[: len(original) // 2])
    damaged = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=5", cwd=root)
    newest.unlink()
    deleted = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=5", cwd=root)
    one_way = damaged[0] == deleted[0] == 2 and "delete" not in damaged[1] + deleted[1]
    case(
        "a damaged client state, then deleted",
        "pfedkit run --out states --resume (twice)",
        (damaged[0], damaged[1] + "\n" + last_line(deleted[1])),
        one_way,
    )
    marker = root / "code-ran"
    torch.save(Unsafe(marker), newest)
    answer = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=5", cwd=root)
    case("an unsafe client state", "pfedkit run --out states --resume", answer, answer[0] == 2 and not marker.exists())
    # checkpoints: an unsafe one; another run's, differing in one key
    out = root / "unsafe-checkpoint"
    pfedkit("run", "run.toml", "--out", str(out), "--quiet", "--set", "train.rounds=2", cwd=root)
    torch.save({"model": Unsafe(marker)}, out / "checkpoint.pt")
    refused = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=3", cwd=root)
    (out / "checkpoint.pt").unlink()  # the way out the message gives: the run starts again
    again = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=3", cwd=root)
    case(
        "an unsafe checkpoint, then deleted",
        "pfedkit run --out unsafe-checkpoint --resume (twice)",
        (refused[0], refused[1] + "\n" + last_line(again[1])),
        refused[0] == 2 and not marker.exists() and again[0] == 0,
    )
    base = root / "base"
    pfedkit("run", "run.toml", "--out", str(base), "--quiet", cwd=root)
    for key, value in (
        ("run.seed", "1"),
        ("method.name", '"fedper"'),
        ("train.lr", "0.1"),
        ("train.batch_size", "32"),
        ("data.fraction", "0.5"),
    ):
        other, mine = root / f"other-{key}", root / f"mine-{key}"
        pfedkit("run", "run.toml", "--out", str(other), "--quiet", "--set", f"{key}={value}", cwd=root)
        shutil.copytree(base, mine)
        shutil.copy(other / "checkpoint.pt", mine / "checkpoint.pt")
        answer = pfedkit("run", "--out", str(mine), "--resume", "--quiet", "--set", "train.rounds=5", cwd=root)
        case(
            f"another run's checkpoint ({key} differs)",
            "cp other/checkpoint.pt mine/; pfedkit run --out mine --resume",
            answer,
            answer[0] == 2 and key in answer[1],
        )
    # kills and resumes: a killed or interrupted run ends with the numbers of an uninterrupted one
    kills = (
        ("kill -9 mid-run, resume", (), lambda o: rows_written(o) >= 4, signal.SIGKILL, True),
        (
            "kill -9 on the cohort path",
            ("--set", 'run.cohort="on"'),
            lambda o: rows_written(o) >= 4,
            signal.SIGKILL,
            True,
        ),
        (
            "kill -9 with client state on disk",
            ("--set", 'run.client_state="disk"'),
            lambda o: rows_written(o) >= 4,
            signal.SIGKILL,
            True,
        ),
        (
            "kill -9 during a temporary file's write",
            ("--set", 'run.client_state="disk"'),
            lambda o: rows_written(o) >= 2 and partial_file(o),  # mid-run: a state or checkpoint half written
            signal.SIGKILL,
            True,
        ),
        ("Ctrl-C (SIGINT to the job) mid-run", (), lambda o: rows_written(o) >= 4, signal.SIGINT, True),
        (
            "Ctrl-C during a temporary file's write",
            ("--set", 'run.client_state="disk"'),
            lambda o: rows_written(o) >= 2 and partial_file(o),
            signal.SIGINT,
            True,
        ),
        ("SIGTERM to the run's process", (), lambda o: rows_written(o) >= 4, signal.SIGTERM, False),
    )
    for index, (name, sets, when, sig, group) in enumerate(kills):
        whole, out = root / f"whole-{index}", root / f"killed-{index}"
        pfedkit("run", "run.toml", "--out", str(whole), "--quiet", *SLOW, *sets, cwd=root)
        proc = start(["run", "run.toml", "--out", str(out), "--quiet", *SLOW, *sets], root)
        sent, code, said = interrupt(proc, lambda: when(out), sig, group)
        resumed = pfedkit("run", "--out", str(out), "--resume", "--quiet", *SLOW, *sets, cwd=root)
        same = numbers(out) == numbers(whole) and len(numbers(whole)) > 0
        told = code == 130 or sig != signal.SIGINT  # Ctrl-C: "interrupted" and exit 130, not a failed write
        answer = (
            resumed[0],
            f"signalled: exit {code}{': ' + last_line(said) if said.strip() else ''}; resumed: "
            f"{last_line(resumed[1])}; metrics.csv {'equal to' if same else 'DIFFERENT from'} uninterrupted",
        )
        case(
            name,
            f"pfedkit run ... (signal {sig}) then --resume",
            answer,
            sent and code != -999 and told and resumed[0] == 0 and same and not partial_file(out),
        )
    # read-only and full folders (a small tmpfs)
    mounted = root / "mnt"
    if mount_tmpfs(mounted, "64k"):
        try:
            subprocess.run(["mount", "-o", "remount,ro", str(mounted)], check=True)
            answer = pfedkit("run", "run.toml", "--out", str(mounted / "run"), "--quiet", cwd=root)
            case(
                "a read-only --out",
                "pfedkit run run.toml --out READ-ONLY",
                answer,
                answer[0] == 2 and "cannot write" in answer[1],
            )
            subprocess.run(["mount", "-o", "remount,rw", str(mounted)], check=True)
            whole = root / "whole-full"
            pfedkit("run", "run.toml", "--out", str(whole), "--quiet", *SLOW, cwd=root)
            full = pfedkit("run", "run.toml", "--out", str(mounted / "run"), "--quiet", *SLOW, cwd=root)
            subprocess.run(["mount", "-o", "remount,size=64m", str(mounted)], check=True)
            resumed = pfedkit("run", "--out", str(mounted / "run"), "--resume", "--quiet", *SLOW, cwd=root)
            same = numbers(mounted / "run") == numbers(whole)
            answer = (
                full[0],
                f"{last_line(full[1])}; after freeing space, --resume: {last_line(resumed[1])}; "
                f"metrics.csv {'equal to' if same else 'DIFFERENT from'} uninterrupted",
            )
            case(
                "a full disk, then space freed",
                "pfedkit run ... --out FULL; then --resume",
                answer,
                full[0] == 2 and "disk is full" in full[1] and resumed[0] == 0 and same,
            )
        finally:
            unmount(mounted)
    else:
        case("read-only and full folders", "(needs root to mount a tmpfs)", (0, "not tried"), True)
    # divergence
    answer = pfedkit("run", "run.toml", "--out", str(root / "diverged"), "--quiet", "--set", "train.lr=1e9", cwd=root)
    case("a diverging run (lr 1e9)", "pfedkit run ... --set train.lr=1e9", answer, answer[0] != 0 and "lr" in answer[1])
    # a user's method file edited between a run and its resume (issue 59's item)
    (root / "mine.py").write_text(USER_METHOD.format(step=0.5))
    out = root / "own"
    pfedkit(
        "run",
        "run.toml",
        "--out",
        str(out),
        "--quiet",
        "--set",
        'method.module="mine.py"',
        "--set",
        'method.name="probe-avg"',
        "--set",
        "train.rounds=2",
        cwd=root,
    )
    (root / "mine.py").write_text(USER_METHOD.format(step=0.25))
    answer = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=3", cwd=root)
    case(
        "a user's method file edited before --resume",
        "pfedkit run --out own --resume",
        answer,
        answer[0] == 2 and "accept-code-change" in answer[1],
    )
    # Ctrl-C during compare at random moments: each ends (exit 130), and the compare then resumes to its end
    rng = random.Random(0)
    codes = []
    cmp = root / "cmp-interrupted"
    compare = ["compare", "run.toml", "--methods", "fedavg,fedper", "--seeds", "0,1", "--out", str(cmp), "--quiet"]
    compare += ["--resume", "--set", "run.workers=2", *SLOW[:4], "--set", "train.rounds=30"]
    for _ in range(interrupts):
        proc = start(compare, root)
        moment = time.monotonic() + rng.uniform(1.0, 12.0)
        codes.append(interrupt(proc, lambda: time.monotonic() > moment, signal.SIGINT, True)[1])
    finished = pfedkit(*compare, cwd=root)
    answer = (finished[0], f"exit codes {codes}; then --resume: exit {finished[0]}")
    case(
        f"Ctrl-C during compare, {interrupts} times",
        "pfedkit compare ... (SIGINT at 1-12 s), then --resume",
        answer,
        all(c in (130, 0) for c in codes) and finished[0] == 0,
    )


USER_METHOD = """
from pfedkit.methods import HyperParams, register
from pfedkit.methods.fedavg import FedAvg


class ProbeParams(HyperParams):
    server_step: float = {step}


@register
class ProbeAvg(FedAvg):
    name = "probe-avg"
    summary = "FedAvg with a parameter, edited between a run and its resume"
    Params = ProbeParams
"""


def spoil(path: Path, damage: str) -> None:
    """Cut a metrics.csv after its first round, or put a word where its first accuracy was."""
    header, first, *rest = path.read_text().splitlines()
    if damage == "cut short":
        path.write_text(f"{header}\n{first}\n")
    else:
        cells = first.split(",")
        cells[1] = "oops"
        path.write_text("\n".join([header, ",".join(cells), *rest]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    parser.add_argument("--interrupts", type=int, default=10, help="Ctrl-Cs sent to compare at random moments")
    args = parser.parse_args()
    results: list[tuple[str, str, str, bool]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "run.toml").write_text(CONFIG)

        def case(name: str, command: str, answer: tuple[int, str], clean: bool) -> None:
            results.append(
                (
                    name,
                    command,
                    last_line(answer[1]).replace(str(root), "SCRATCH"),
                    clean and "Traceback" not in answer[1],
                )
            )

        # 1. a user's own dotfiles in --out are never taken for a killed write's leftovers
        out = root / "dotfiles"
        out.mkdir()
        for name in (".env.template", ".notes.personal"):
            (out / name).write_text("mine")
        answer = pfedkit("run", "run.toml", "--out", str(out), "--quiet", "--force", cwd=root)
        kept = all((out / n).read_text() == "mine" for n in (".env.template", ".notes.personal"))
        case("user dotfiles beside a new run (--force)", "pfedkit run run.toml --out dotfiles --force", answer, kept)
        # 2. a user's own summary.json in --out
        out = root / "summary"
        out.mkdir()
        (out / "summary.json").write_text('{"mine": true}')
        answer = pfedkit("run", "run.toml", "--out", str(out), "--quiet", cwd=root)
        case("a user's summary.json in --out", "pfedkit run run.toml --out summary", answer, answer[0] == 2)
        # 3. a finished run's metrics.csv cut short
        out = root / "finished"
        pfedkit("run", "run.toml", "--out", str(out), "--quiet", cwd=root)
        metrics = (out / "metrics.csv").read_text().splitlines()
        (out / "metrics.csv").write_text("\n".join(metrics[:2]) + "\n")
        answer = pfedkit("curves", str(out), cwd=root)
        case("truncated metrics.csv of a finished run", "pfedkit curves finished", answer, answer[0] == 2)
        answer = api(f"import pfedkit; pfedkit.load_run({str(out)!r})", root)
        case("the same, read by load_run", "pfedkit.load_run('finished')", answer, "cut short" in answer[1])
        # 4. a client's state copied over another client's
        out = root / "disk"
        pfedkit("run", "run.toml", "--out", str(out), "--quiet", "--set", 'run.client_state="disk"', cwd=root)
        states = out / "client-state"
        newest = sorted(states.glob("client-0/after-*.pt"))[-1].name
        shutil.copy(states / "client-0" / newest, states / "client-1" / newest)
        answer = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=5", cwd=root)
        case("client 0's state copied over client 1's", "pfedkit run --out disk --resume", answer, answer[0] == 2)
        # 5. another run's checkpoint with its config removed
        out = root / "noconfig"
        pfedkit("run", "run.toml", "--out", str(out), "--quiet", "--set", "train.rounds=2", cwd=root)
        ckpt = torch.load(out / "checkpoint.pt", weights_only=True)
        del ckpt["config"]
        torch.save(ckpt, out / "checkpoint.pt")
        answer = pfedkit("run", "--out", str(out), "--resume", "--quiet", "--set", "train.rounds=3", cwd=root)
        case("a checkpoint without its config", "pfedkit run --out noconfig --resume", answer, answer[0] == 2)
        # 6. seeds at or above 2**32
        answer = pfedkit("run", "run.toml", "--out", str(root / "big"), "--set", f"run.seed={2**32}", cwd=root)
        case("run.seed = 2**32", "pfedkit run ... --set run.seed=4294967296", answer, answer[0] == 2)
        # 7. pfedkit.run(resume=True) where there is no run
        answer = api("import pfedkit; pfedkit.run('run.toml', 'empty', resume=True, progress=False)", root)
        case(
            "pfedkit.run(resume=True) with no run",
            "pfedkit.run('run.toml', 'empty', resume=True)",
            answer,
            answer[0] != 0,
        )
        # 9. bad arguments
        answer = pfedkit("compare", "run.toml", "--methods", "fedavg", "--seeds", "", "--out", "cmp", cwd=root)
        case("compare --seeds ''", "pfedkit compare run.toml --methods fedavg --seeds ''", answer, answer[0] == 2)
        answer = api("import pfedkit; pfedkit.run('run.toml', 'x', train=5)", root)
        case(
            "pfedkit.run(..., train=5)",
            "pfedkit.run('run.toml', 'x', train=5)",
            answer,
            "sections are dicts" in answer[1],
        )
        answer = api("import pfedkit; pfedkit.run(None, 'x')", root)
        case("pfedkit.run(None, ...)", "pfedkit.run(None, 'x')", answer, "not NoneType" in answer[1])
        answer = api("import pfedkit; pfedkit.load_run(None)", root)
        case("pfedkit.load_run(None)", "pfedkit.load_run(None)", answer, "run folder's path" in answer[1])
        broken = root / "broken"
        pfedkit("run", "run.toml", "--out", str(broken), "--quiet", cwd=root)
        lines = (broken / "metrics.csv").read_text().splitlines()
        cells = lines[1].split(",")
        cells[1] = "oops"
        (broken / "metrics.csv").write_text("\n".join([lines[0], ",".join(cells), *lines[2:]]) + "\n")
        answer = pfedkit("curves", str(broken), cwd=root)
        case("a non-numeric metrics.csv", "pfedkit curves broken", answer, answer[0] == 2)
        # 10. misleading advice
        answer = pfedkit("run", "run.toml", "--out", "many", "--set", "partition.clients=2000", cwd=root)
        case(
            "2000 clients on 600 samples",
            "pfedkit run ... --set partition.clients=2000",
            answer,
            "fewer clients" in answer[1],
        )
        gone = root / "gone"
        pfedkit("run", "run.toml", "--out", str(gone), "--quiet", "--set", "train.rounds=2", cwd=root)
        (gone / "config.toml").unlink()
        answer = pfedkit("run", "--out", str(gone), "--resume", cwd=root)
        case(
            "config.toml deleted, then --resume",
            "pfedkit run --out gone --resume",
            answer,
            "without its config.toml" in answer[1],
        )
        answer = pfedkit("compare", "run.toml", "--methods", "fedavg", "--seeds", "1,-1", "--out", "neg", cwd=root)
        case(
            "compare --seeds 1,-1",
            "pfedkit compare ... --seeds 1,-1",
            answer,
            answer[0] == 2 and not (root / "neg").exists(),
        )
        answer = pfedkit("compare", "run.toml", "--methods", "fedavg,fedavg", "--out", "dup", cwd=root)
        case("compare --methods fedavg,fedavg", "pfedkit compare ... --methods fedavg,fedavg", answer, answer[0] == 2)
        more_cases(root, case, args.interrupts)
    lines = [
        f"- {name}: `{command}` -> {'clean' if clean else 'DEFECT'}: {said}" for name, command, said, clean in results
    ]
    lines.append(f"\n{sum(r[3] for r in results)} of {len(results)} cases clean")
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
