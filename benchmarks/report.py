"""What every benchmark does last: print its report and, with --out, keep it (written anew, or added after the runs
before it where the file records a series, like before-and-after pairs)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional, Union


def emit(text: str, out: Optional[Union[str, Path]], append: bool = False) -> None:
    print(text)
    if not out:
        return
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    if append:
        with path.open("a") as f:
            f.write(text + "\n\n")
    else:
        path.write_text(text + "\n")
