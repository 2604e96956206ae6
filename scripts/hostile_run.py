"""The hostile campaign as one table: many hostile inputs per surface, then the measurements.

    HF_HUB_OFFLINE=1 PYTHONPATH=src python scripts/hostile_run.py [--only library,cli,http] [--json]

The cases live in tests/adversarial (one package per surface); pytest runs the same campaign, surface by surface,
with the random attention calls as a hypothesis property:

    pytest -m hostile --hypothesis-profile=hostile tests/adversarial

This script prints what pytest does not: one row per surface and the measurements of the server.

library        attention (ATTENTION_CASES random calls), attention_weights, modules, KVCache, model folders
               (tests/adversarial/library/cases.py)
cli            every subcommand as a subprocess, output paths that are FIFOs or devices, ranges
               (tests/adversarial/cli/cases.py)
http           a real `selfattn serve` on 127.0.0.1 only: bodies, framing, Host and port, slow and short bodies;
               then peak RSS, answer sizes and latency (tests/adversarial/web/cases.py, measure.py)
ring           ring attention in process groups of 2-5 ranks (tests/adversarial/ring/)
library-edges  huge masks, caches, interceptors, layouts, folders, children with limits (library/edges.py)
cli-texts      texts with control and invisible characters, file modes, huge configs (cli/text_and_files.py)
http-unicode   ordinary Unicode and control characters in the text (web/cases.py: unicode_cases)
model-files    GGUF files, transformers folders and the experiments over the CLI (cli/model_files.py)
http-together  patch and explain requests sent together equal the same sent alone, byte for byte (web/together.py)
files          output paths (FIFOs, devices, sockets, killed writes), the GGUF cache's key, ranges (files/cases.py)

Prints one row per surface (inputs tried, accepted and right, clear errors, wrong results, tracebacks,
hangs, files lost) and every bad outcome. Every loop is bounded in count and time; the run stops by itself
(on 2 busy cores about 4-5 minutes for library, cli and http; ring ~1.5, library-edges ~2, cli-texts ~5, http-unicode
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository: tests.adversarial

from tests.adversarial.cli import cases as cli_cases  # noqa: E402
from tests.adversarial.cli import model_files, text_and_files  # noqa: E402
from tests.adversarial.files import cases as file_cases  # noqa: E402
from tests.adversarial.library import cases as library  # noqa: E402
from tests.adversarial.library import edges  # noqa: E402
from tests.adversarial.ring import cases as ring_cases  # noqa: E402
from tests.adversarial.tally import format_table  # noqa: E402
from tests.adversarial.web import cases as http_cases  # noqa: E402
from tests.adversarial.web import measure, together  # noqa: E402

ADDRESS_SPACE_LIMIT = 16 << 30
SURFACES = (
    "library",
    "cli",
    "http",
    "ring",
    "library-edges",
    "cli-texts",
    "http-unicode",
    "model-files",
    "http-together",
    "files",
)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(SURFACES), help="surfaces to run, comma-separated")
    parser.add_argument("--json", action="store_true", help="print the table and measurements as JSON")
    args = parser.parse_args(argv)
    only = set(args.only.split(","))
    unknown = only - set(SURFACES)
    if unknown:
        parser.error(f"unknown surfaces {sorted(unknown)}; the surfaces are {', '.join(SURFACES)}")
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
        if "library-edges" in only:
            start = time.monotonic()
            tallies += edges.run(work / "library-edges")
            seconds["library-edges"] = round(time.monotonic() - start)
        if "cli-texts" in only:
            start = time.monotonic()
            tallies.append(text_and_files.run(work / "cli-texts"))
            seconds["cli-texts"] = round(time.monotonic() - start)
        if "http-unicode" in only:
            start = time.monotonic()
            (work / "http-unicode").mkdir()
            with http_cases.Server(work / "http-unicode") as server:
                tallies.append(http_cases.unicode_cases(server))
                if "Traceback" in server.log.read_text(errors="replace"):
                    tallies[-1].record("traceback", "server log", "Traceback in its output")
            seconds["http-unicode"] = round(time.monotonic() - start)
        if "model-files" in only:
            start = time.monotonic()
            tallies.append(model_files.run(work / "model-files"))
            seconds["model-files"] = round(time.monotonic() - start)
        if "http-together" in only:
            start = time.monotonic()
            tallies.append(together.run_http(work / "http-together"))
            seconds["http-together"] = round(time.monotonic() - start)
        if "files" in only:
            start = time.monotonic()
            tallies.append(file_cases.run(work / "files"))
            seconds["files"] = round(time.monotonic() - start)
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
