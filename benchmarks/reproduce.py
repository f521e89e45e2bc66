"""`pfedkit reproduce SUITE` with this repository's defaults: results under results/<suite>/ (committed)
and the data in ../shared/data. Any `pfedkit reproduce` option may follow and overrides these.

Usage: python benchmarks/reproduce.py fedafk-table3 [--rows fedafk,fedrep] [--seeds 0,1] [--table-only] ...
       python benchmarks/reproduce.py --claims   (the claims table of every suite, written into docs/REPRODUCTION.md)
       python benchmarks/reproduce.py fedafk-cifar10 --scale long ...
           (results in results/fedafk_cifar10_long/)
       python benchmarks/reproduce.py --list
"""

import sys
from pathlib import Path

from pfedkit.cli import main
from pfedkit.papers.reproduce import results_folder

HERE = Path(__file__).resolve().parent


def repo_args(args: list[str]) -> list[str]:
    """`pfedkit reproduce` arguments with this repository's folders. The suite and scale are read as the command
    reads them, so an option's value (`--seeds 0,1 SUITE`, `--scale long SUITE`) is never taken for the suite."""
    parsed = main.commands["reproduce"].make_context("reproduce", list(args), resilient_parsing=True).params
    suite, scale = parsed.get("suite"), parsed.get("scale") or "small"
    if "--claims" in args:  # every suite's: written into the document; one suite's: printed
        update = [] if suite else ["--update", str(HERE.parent / "docs" / "REPRODUCTION.md")]
        return ["reproduce", *args, "--out", str(HERE.parent / "results"), "--repo-script", *update]
    defaults = ["--data-root", str(HERE.parents[1] / "shared" / "data")]
    if suite:
        defaults += ["--out", str(HERE.parent / "results" / results_folder(suite, scale))]
    return ["reproduce", *args, *defaults]


if __name__ == "__main__":
    main(repo_args(sys.argv[1:]))
