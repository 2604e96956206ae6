"""Issue 11's attack run, reproducible: many hostile inputs per surface, then the measurements.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python scripts/hostile_run.py [--only library,cli,http] [--json]

(a) the library: attention, attention_weights, modules, KVCache, hostile model folders (scripts/hostile/library.py)
(b) the CLI: every subcommand as a subprocess (scripts/hostile/cli_cases.py)
(c) HTTP: a real `selfattn serve` on 127.0.0.1 only, then peak RSS, answer sizes and latency
    (scripts/hostile/http_cases.py, scripts/hostile/measure.py)
(d) ring attention in process groups of 2-5 ranks (scripts/hostile/ring_cases.py, issue 18)
(e) the library findings of issue 18 and their neighbours (scripts/hostile/library18.py, library18_child.py)
(f) the CLI findings of issue 18 and their neighbours (scripts/hostile/cli18.py)
(g) HTTP: ordinary Unicode and control characters in the text (issue 18; http_cases.unicode_cases)
(h) GGUF files, transformers folders and the experiments over the CLI (issue 28; scripts/hostile/issue28.py)
(i) HTTP: patch and explain requests sent together equal the same sent alone, byte for byte (issue 28)

Prints one row per surface (inputs tried, accepted and right, clear errors, wrong results, tracebacks,
hangs, files lost) and every bad outcome. Every loop is bounded in count and time; the run stops by itself
(on 2 busy cores about 4-5 minutes for library, cli and http; ring ~1.5, library18 ~2, cli18 ~5, http18
seconds) and exits 1 if anything was wrong, crashed, hung or lost a file. Address space is capped
at ADDRESS_SPACE_LIMIT so that a defect that allocates without bound fails instead of taking the machine.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: tests.live_server

from hostile import cli18, cli_cases, http_cases, issue28, library, library18, measure, ring_cases  # noqa: E402
from hostile.tally import format_table  # noqa: E402

ADDRESS_SPACE_LIMIT = 16 << 30
SURFACES = ("library", "cli", "http", "ring", "library18", "cli18", "http18", "files28", "http28")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SURFACES), help="surfaces to run, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the table and measurements as JSON")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE_LIMIT, ADDRESS_SPACE_LIMIT))
    tallies, measurements, seconds = [], {}, {}
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        work = Path(tmp)
        if "library" in only:
            start = time.monotonic()
            tallies += library.run(work / "library")
            seconds["library"] = round(time.monotonic() - start)
        if "cli" in only:
            start = time.monotonic()
            tallies.append(cli_cases.run(work / "cli"))
            seconds["cli"] = round(time.monotonic() - start)
        if "http" in only:
            start = time.monotonic()
            (work / "http").mkdir()
            with http_cases.Server(work / "http") as server:
                tallies.append(http_cases.run(server))
                measurements = measure.run(server)
                if "Traceback" in server.log.read_text(errors="replace"):
                    tallies[-1].record("traceback", "server log", "Traceback in its output (cases and measurements)")
            seconds["http"] = round(time.monotonic() - start)
        if "ring" in only:
            start = time.monotonic()
            tallies.append(ring_cases.run(work / "ring"))
            seconds["ring"] = round(time.monotonic() - start)
        if "library18" in only:
            start = time.monotonic()
            tallies += library18.run(work / "library18")
            seconds["library18"] = round(time.monotonic() - start)
        if "cli18" in only:
            start = time.monotonic()
            tallies.append(cli18.run(work / "cli18"))
            seconds["cli18"] = round(time.monotonic() - start)
        if "http18" in only:
            start = time.monotonic()
            (work / "http18").mkdir()
            with http_cases.Server(work / "http18") as server:
                tallies.append(http_cases.unicode_cases(server))
                if "Traceback" in server.log.read_text(errors="replace"):
                    tallies[-1].record("traceback", "server log", "Traceback in its output")
            seconds["http18"] = round(time.monotonic() - start)
        if "files28" in only:
            start = time.monotonic()
            tallies.append(issue28.run(work / "files28"))
            seconds["files28"] = round(time.monotonic() - start)
        if "http28" in only:
            start = time.monotonic()
            tallies.append(issue28.run_http(work / "http28"))
            seconds["http28"] = round(time.monotonic() - start)
    rows = [t.row() for t in tallies]
    total = {"surface": "total", **{k: sum(r[k] for r in rows) for k in rows[0] if k != "surface"}}
    failures = [n for t in tallies for n in t.notes]
    if args.json:
        print(
            json.dumps(
                {"table": rows + [total], "failures": failures, "measurements": measurements, "seconds": seconds},
                indent=1,
                ensure_ascii=False,
            )
        )
    else:
        print(format_table(rows + [total]))
        for note in failures:
            print("  " + note)
        outside = [n for t in tallies for n in t.outside_notes]
        if outside:
            print("clear errors raised from outside selfattn:")
            for note in outside:
                print("  " + note)
        if measurements:
            print("measurements:")
            print(json.dumps(measurements, indent=1, ensure_ascii=False))
        print(f"seconds per surface: {seconds}")
    return 1 if any(total[k] for k in ("wrong results", "tracebacks", "hangs", "files lost")) else 0


if __name__ == "__main__":
    sys.exit(main())
