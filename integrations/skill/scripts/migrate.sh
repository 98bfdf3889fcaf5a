#!/bin/sh
# Ferry's whole migration of a copy of the repository; outputs in ./ferry-out, result.json on stdout.
set -eu
path="${1:?usage: migrate.sh PATH RUN [TEST]}"
run="${2:?usage: migrate.sh PATH RUN [TEST]}"
if [ -n "${3:-}" ]; then
  exec "${FERRY:-ferry}" migrate "$path" --run "$run" --test "$3" --out ferry-out --json
fi
exec "${FERRY:-ferry}" migrate "$path" --run "$run" --out ferry-out --json
