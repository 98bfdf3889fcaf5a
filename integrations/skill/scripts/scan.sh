#!/bin/sh
# The CUDA idioms of a repository, as Ferry's ScanReport JSON.
set -eu
exec "${FERRY:-ferry}" scan "${1:?usage: scan.sh PATH}" --json
