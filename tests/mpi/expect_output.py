"""Runs a command (an mpirun job) with a time limit and checks what it printed.

Usage: expect_output.py [--timeout S] [--fail] [--expect REGEX]... [--limiter-within E SLACK] -- command...

  --fail           the command must exit non-zero (default: zero)
  --expect REGEX   a line of stdout+stderr must match (re.search), once per flag
  --limiter-within E SLACK
                   the server's final line reports the rate limiter's offsets
                   "seen [lo, hi]": both must lie within [-E - SLACK, E + SLACK]
The job's output is echoed, so a failing ctest shows it.
"""
import argparse
import re
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--fail", action="store_true")
    parser.add_argument("--expect", action="append", default=[])
    parser.add_argument("--limiter-within", nargs=2, type=float)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    try:
        run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             timeout=args.timeout)
    except subprocess.TimeoutExpired as expired:
        # TimeoutExpired holds the output as bytes even with text=True.
        output = expired.stdout or b""
        sys.stdout.write(output.decode(errors="replace") if isinstance(output, bytes) else output)
        print(f"expect_output: the job did not end within {args.timeout} s")
        return 1
    sys.stdout.write(run.stdout)
    failures = []
    if args.fail and run.returncode == 0:
        failures.append("the job succeeded; it should have failed")
    if not args.fail and run.returncode != 0:
        failures.append(f"the job exited with {run.returncode}")
    for pattern in args.expect:
        if not re.search(pattern, run.stdout, re.MULTILINE):
            failures.append(f"no line matches {pattern!r}")
    if args.limiter_within:
        bound, slack = args.limiter_within
        seen = re.findall(r"seen \[(-?\d+), (-?\d+)\]", run.stdout)
        if not seen:
            failures.append("no rate limiter offsets in the output")
        else:
            low, high = (float(x) for x in seen[-1])
            if low < -bound - slack or high > bound + slack:
                failures.append(f"the rate limiter's offsets [{low}, {high}] leave [-{bound}, {bound}] "
                                f"by more than {slack}")
            else:
                print(f"expect_output: rate limiter offsets [{low}, {high}] within +-{bound} (slack {slack})")
    for failure in failures:
        print("expect_output:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
