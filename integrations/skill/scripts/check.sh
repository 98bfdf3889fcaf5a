#!/bin/sh
# The same command on CPU and on tpx, compared: Ferry's CheckResult JSON (exit 1 when parity fails).
set -eu
exec "${FERRY:-ferry}" check "${1:?usage: check.sh PATH CMD}" --run "${2:?usage: check.sh PATH CMD}" --json
