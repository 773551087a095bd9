"""Where the workers' time goes during a benchmark phase: py-spy samples every worker process (pool
children included) and the samples taken inside a task (below ``mcm_tasks.queue.processing.process``)
are summarised per reconciler and per function. Used by the benchmarks' ``--profile DIR`` option
(CPU time: only the thread holding the GIL is sampled, ``py-spy --gil``, since on the threads pool a
thread blocked in a socket read or waiting for the GIL otherwise counts as busy; ``--profile-idle``
counts waits on the API servers and Redis too, i.e. the wall time a task holds a worker slot); needs
``py-spy`` (dev extra).

``python bench/profiling.py DIR/*.txt`` prints the summary of saved samples again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

#: py-spy's raw (collapsed) format: ``frame;frame;…;frame count``, frame = ``func (file:line)``
FRAME = re.compile(r"^(?P<func>.*) \((?P<file>[^():]*)(?::\d+)?\)$")
#: the contract's entry frame of a task (``process`` was renamed ``deliver``): read either
ENTRIES = ("deliver (mcm_tasks/queue/processing.py)", "process (mcm_tasks/queue/processing.py)")
OWN_CODE = ("mcm_tasks/", "informers/", "providers/")
RATE = 100
PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))


def _short(frame: str) -> str:
    """``reconcile (/…/mcm_tasks/controllers/x.py:12)`` → ``reconcile (mcm_tasks/controllers/x.py)``."""
    found = FRAME.match(frame)
    if not found:
        return frame
    path = found["file"]
    for root in (*OWN_CODE, "site-packages/"):
        if root in path:
            path = path[path.index(root) :].removeprefix("site-packages/")
            break
    return f"{found['func']} ({path})"


def summarize(files: list[Path], top: int = 25) -> dict[str, Any]:
    """Shares of the in-task samples: per reconciler (the frame below ``process``), per function of
    the project's code (inclusive), and per leaf function (exclusive, any code)."""
    in_task = total = 0
    reconcilers: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    for file in files:
        for line in file.read_text(errors="replace").splitlines():
            stack, _, count = line.rpartition(" ")
            if not count.isdigit():
                continue
            frames = [_short(f) for f in stack.split(";")]
            total += int(count)
            entry = next((i for i, f in enumerate(frames) if f in ENTRIES), None)
            if entry is None:
                continue
            n = int(count)
            in_task += n
            below = frames[entry + 1 :]
            reconcilers[below[0] if below else "(process itself)"] += n
            for frame in set(below):
                if any(f"({root}" in frame for root in OWN_CODE):
                    inclusive[frame] += n
            leaves[frames[-1]] += n

    def shares(counter: Counter[str]) -> dict[str, float]:
        return {k: round(100 * v / max(in_task, 1), 1) for k, v in counter.most_common(top)}

    return {
        "samples_in_tasks": in_task,
        "seconds_in_tasks": round(in_task / RATE, 1),
        "percent_of_samples_in_tasks": round(100 * in_task / max(total, 1), 1),
        "percent_by_reconciler": shares(reconcilers),
        "percent_inclusive_own_code": shares(inclusive),
        "percent_by_leaf": shares(leaves),
    }


class Profiler:
    """``with profiler.phase("scale_down"):`` samples the workers for that phase when a folder is set."""

    def __init__(self, directory: Path | None, pids: dict[str, int], idle: bool = False) -> None:
        self.directory, self.idle = directory, idle
        self.workers = {name: pid for name, pid in pids.items() if name.startswith("worker")}
        self.pids = dict(pids)
        self.summaries: dict[str, Any] = {}
        if directory is not None and not Path(PY_SPY).exists():
            raise SystemExit("--profile needs py-spy: .venv/bin/pip install py-spy")

    @contextlib.contextmanager
    def phase(self, name: str, also: tuple[str, ...] = ()) -> Iterator[None]:
        """``also``: more processes by role (``informer``), sampled into files of their own and left
        out of the summary (it counts task samples, which only the workers have)."""
        if self.directory is None:
            yield
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        targets = {**self.workers, **{role: self.pids[role] for role in also if role in self.pids}}
        files = [self.directory / f"{name}-{role}.txt" for role in targets]
        options = ["--subprocesses", "--nonblocking", "--rate", str(RATE), "--format", "raw"]
        # without --idle, only the thread holding the GIL: on the threads pool a thread blocked in
        # a socket read or waiting for the GIL would otherwise count as busy
        options += ["--idle"] if self.idle else ["--gil"]
        procs = [
            subprocess.Popen(
                [PY_SPY, "record", "--pid", str(pid), *options, "--output", str(out)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for pid, out in zip(targets.values(), files, strict=True)
        ]
        try:
            yield
        finally:
            for proc in procs:
                proc.send_signal(signal.SIGINT)
            for proc in procs:
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
            self.summaries[name] = summarize([f for f in files[: len(self.workers)] if f.exists()])


#: put first on the workers' PYTHONPATH by ``--phase-cpu``: its ``sitecustomize`` wraps the parts
PHASE_CPU_PATH = Path(__file__).resolve().parent / "phase_cpu"
#: the workers write their counters twice a second: a phase's end waits this long for the last
FLUSH_SECONDS = 1.2


class PhaseCpu:
    """``--phase-cpu``: the workers' own CPU by part, inside the workers (``bench/phase_cpu``).

    ``environ()`` is what the sandbox's processes must inherit; ``with phase_cpu.phase(name, per)``
    records, for the phase, each part's calls, CPU seconds, µs per call and ms per ``per`` (a
    machine) in ``figures[name]``. Unlike py-spy's samples these are each call's own thread CPU, so
    a part's cost per call reads directly and compares across runs of the same host."""

    def __init__(self, enabled: bool) -> None:
        self.directory = Path(tempfile.mkdtemp(prefix="mcm-phase-cpu-")) if enabled else None
        self.figures: dict[str, Any] = {}

    def environ(self) -> dict[str, str]:
        if self.directory is None:
            return {}
        path = os.environ.get("PYTHONPATH", "")
        return {
            "MCM_BENCH_PHASE_CPU_DIR": str(self.directory),
            "PYTHONPATH": os.pathsep.join(p for p in (str(PHASE_CPU_PATH), path) if p),
        }

    def totals(self) -> dict[str, tuple[float, float]]:
        """Calls and CPU seconds by part, summed over every worker process (and pool child)."""
        summed: dict[str, tuple[float, float]] = {}
        for file in self.directory.glob("*.json") if self.directory is not None else ():
            try:
                counts = json.loads(file.read_text())
            except (OSError, ValueError):  # being replaced: the next phase reads it
                continue
            for name, (calls, cpu) in counts.items():
                before = summed.get(name, (0.0, 0.0))
                summed[name] = (before[0] + calls, before[1] + cpu)
        return summed

    @contextlib.contextmanager
    def phase(self, name: str, per: int) -> Iterator[None]:
        if self.directory is None:
            yield
            return
        time.sleep(FLUSH_SECONDS)
        before = self.totals()
        yield
        time.sleep(FLUSH_SECONDS)
        after = self.totals()
        parts: dict[str, Any] = {}
        for part, (calls, cpu) in sorted(after.items(), key=lambda kv: -kv[1][1]):
            calls -= before.get(part, (0.0, 0.0))[0]
            cpu -= before.get(part, (0.0, 0.0))[1]
            if calls <= 0:
                continue
            parts[part] = {
                "calls": int(calls),
                "cpu_s": round(cpu, 3),
                "us_per_call": round(cpu / calls * 1e6, 1),
                "ms_per_machine": round(cpu / max(per, 1) * 1e3, 3),
                "calls_per_machine": round(calls / max(per, 1), 2),
            }
        self.figures[name] = parts

    def close(self) -> None:
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


if __name__ == "__main__":
    print(json.dumps(summarize([Path(a) for a in sys.argv[1:]]), indent=2))
