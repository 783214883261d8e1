#!/usr/bin/env bash
# The whole test suite with the calendar moved ahead (default a year): no test may depend on
# today's date. Needs Debian's faketime (apt-get install faketime). Durations stay real:
# the monotonic clock is left alone, so timeouts and sleeps behave as on any day.
# FAKETIME_FORCE_MONOTONIC_FIX=0: libfaketime 0.9.10 turns its "monotonic fix" on by itself
# on current glibc, and with it pthread_cond_timedwait on a CLOCK_MONOTONIC condition
# variable times out at once -- CPython's GIL waits on one, so every thread that wants the
# GIL spins: three threads of pure Python burn 4x the CPU, and a training worker with its
# tracker threads beside two busy loops took 34 s for what takes 8. The fix only matters
# when the monotonic clock is faked, which it is not here.
#   tools/suite_clock_ahead.sh [+365d] [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
offset="${1:-+365d}"
shift || true
export FAKETIME_DONT_FAKE_MONOTONIC=1 FAKETIME_FORCE_MONOTONIC_FIX=0 OMP_NUM_THREADS=1
export PYTHONPATH="$PWD/tools/clock_ahead${PYTHONPATH:+:$PYTHONPATH}"
faketime -f "$offset" date
exec faketime -f "$offset" python -m pytest -q -p no:cacheprovider "$@"
