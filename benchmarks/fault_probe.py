"""Replays issue 60's probe of bad input and faults (the cases its fixes cover), from a scratch folder outside the
repository, and prints what each did: its command and pfedkit's answer, and whether that is clean (a refusal or
message naming the problem and the fix, nothing of the user's lost) or a defect (a traceback, a silent change).

Usage: python benchmarks/fault_probe.py [--out benchmarks/results/fault_probe.txt]
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

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


def last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("note:")]
    return lines[-1][:300] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    results: list[tuple[str, str, str, bool]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "run.toml").write_text(CONFIG)

        def case(name: str, command: str, answer: tuple[int, str], clean: bool) -> None:
            results.append((name, command, last_line(answer[1]), clean and "Traceback" not in answer[1]))

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
