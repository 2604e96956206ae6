"""`python -m selfattn.kernels build`: compile the native kernel now, not on the first `attention` call.

    python -m selfattn.kernels build    compile (if not cached) and load it; prints where, and how long it took
    python -m selfattn.kernels status   built or not, where, and why it cannot be used (never compiles)

Exit status 0 when the kernel is ready, 1 with one line on stderr when it cannot be built here.
"""

from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m selfattn.kernels", description=__doc__.splitlines()[0])
    parser.add_argument("command", choices=("build", "status"), help="build the native kernel, or say its state")
    args = parser.parse_args(argv)
    from . import native_build
    from .notice import notices

    where = native_build.build_dir()
    if args.command == "status":
        reason = native_build.unavailable_reason()
        state = "built" if native_build.is_built() else "not built"
        print(f"native kernel: {state} (cache: {where})" + (f"; cannot be used: {reason}" if reason else ""))
        return 0 if reason is None else 1
    was_built = native_build.is_built()
    start = time.perf_counter()
    try:
        with notices(lambda n: print(n, file=sys.stderr, flush=True)):  # heard: no SlowStartWarning
            native_build.build()
    except RuntimeError as error:
        print(f"python -m selfattn.kernels build: error: {error}", file=sys.stderr)
        return 1
    how = "already built" if was_built else f"built in {time.perf_counter() - start:.1f} s"
    print(f"native kernel: {how} (cache: {where})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
