#!/usr/bin/env bash
# The whole test suite with the calendar moved ahead (default a year): no test may depend on
# today's date. Needs Debian's faketime (apt-get install faketime). Durations stay real:
# the monotonic clock is left alone, so timeouts and sleeps behave as on any day.
#   tools/suite_clock_ahead.sh [+365d] [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
offset="${1:-+365d}"
shift || true
export FAKETIME_DONT_FAKE_MONOTONIC=1 OMP_NUM_THREADS=1
export PYTHONPATH="$PWD/tools/clock_ahead${PYTHONPATH:+:$PYTHONPATH}"
faketime -f "$offset" date
exec faketime -f "$offset" python -m pytest -q -p no:cacheprovider "$@"
