"""`pfedkit reproduce SUITE` with this repository's defaults: results under benchmarks/results/<suite>/ (committed)
and the data in ../shared/data. Any `pfedkit reproduce` option may follow and overrides these.

Usage: python benchmarks/reproduce.py fedafk-table3 [--rows fedafk,fedrep] [--seeds 0,1] [--table-only] ...
       python benchmarks/reproduce.py --claims   (the claims table of every suite, written into docs/REPRODUCTION.md)
       python benchmarks/reproduce.py fedafk-cifar10 --scale long ...
           (results in benchmarks/results/fedafk_cifar10_long/)
       python benchmarks/reproduce.py --list
"""

import sys
from pathlib import Path

from pfedkit.cli import main
from pfedkit.experiments.reproduce import results_folder

HERE = Path(__file__).resolve().parent


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--claims" in args:  # every suite's: written into the document; one suite's: printed
        whole = not any(not a.startswith("-") for a in args)
        main(
            [
                "reproduce",
                *args,
                "--out",
                str(HERE / "results"),
                *(["--update", str(HERE.parent / "docs" / "REPRODUCTION.md")] if whole else []),
            ]
        )
    suite = next((a for a in args if not a.startswith("-")), None)
    defaults = ["--data-root", str(HERE.parents[1] / "shared" / "data")]
    if suite:
        scale = next((b for a, b in zip(args, args[1:]) if a == "--scale"), "small")
        defaults += ["--out", str(HERE / "results" / results_folder(suite, scale))]
    main(["reproduce", *(args[:1] if suite == args[0] else []), *defaults, *args[1 if suite == args[0] else 0 :]])
