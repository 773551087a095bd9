"""``make bench``: every benchmark in bench/, one after the other, each in its own process.

Each script prints its figures and saves bench/results/<name>.json itself; this runs them in name
order (one at a time: they measure a shared 2-core machine, so running them together would measure
each other), passes ``--scale`` to those that take it, and ends with a one-line summary per script.
Exit status 1 when any of them failed.

    .venv/bin/python bench/run_all.py [--scale 0.1] [--only machines scale]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
#: modules in bench/ that are helpers, not benchmarks
HELPERS = {"common", "figures", "profiling", "run_all", "watch", "workers"}


def scripts() -> list[Path]:
    return sorted(p for p in BENCH.glob("*.py") if p.stem not in HELPERS and not p.stem.startswith("_"))


def takes_scale(script: Path) -> bool:
    """From the source, not ``--help``: a script without an argument parser would run in full."""
    text = script.read_text()
    return '"--scale"' in text or ("from bench.common import" in text and "parse_args(" in text)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--scale", type=float, default=None, help="passed to the benchmarks that take it")
    parser.add_argument("--only", nargs="*", default=None, help="names of the benchmarks to run")
    args = parser.parse_args()
    chosen = [s for s in scripts() if not args.only or s.stem in args.only]
    summary: list[str] = []
    failed = False
    for script in chosen:
        command = [sys.executable, str(script)]
        if args.scale is not None and takes_scale(script):
            command += ["--scale", str(args.scale)]
        print(f"=== {script.stem}: {' '.join(command[1:])}", flush=True)
        start = time.monotonic()
        code = subprocess.run(command, cwd=BENCH.parent).returncode
        failed = failed or code != 0
        result = "ok" if code == 0 else f"FAILED (exit {code})"
        summary.append(f"{script.stem:<12} {result:<18} {time.monotonic() - start:7.1f}s")
    print("=== summary", *summary, sep="\n")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
