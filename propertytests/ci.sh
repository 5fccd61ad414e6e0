#!/usr/bin/env bash
# The long property-test run, called by .ci/run: 1000 sequences of about 100
# steps for every machine on both backends (miniredis and redis-server),
# and the client-level machine, about 5 minutes on a 2-core machine. Each
# test logs the sequences and steps it ran. Override with RAPID_CHECKS /
# RAPID_STEPS.
set -euo pipefail
cd "$(dirname "$0")/.."
export RAPID_CHECKS="${RAPID_CHECKS:-1000}" RAPID_STEPS="${RAPID_STEPS:-100}"
echo "RAPID_CHECKS=$RAPID_CHECKS RAPID_STEPS=$RAPID_STEPS"
go test ./propertytests/ -count=1 -v -timeout 30m
