#!/usr/bin/env bash
# The long property-test run, called by .ci/run: 1000 sequences per machine
# and backend (miniredis and redis-server), about 100 steps each for the
# script machines and about 30 for the client-level machine (whose steps
# wait for real grants), about 6 minutes on an idle 2-core machine. Each test
# logs the sequences and steps it ran. Override with RAPID_CHECKS /
# RAPID_STEPS / CLIENT_STEPS.
set -euo pipefail
cd "$(dirname "$0")/.."
checks="${RAPID_CHECKS:-1000}"
steps="${RAPID_STEPS:-100}"
client_steps="${CLIENT_STEPS:-30}"

echo "== script machines: RAPID_CHECKS=$checks RAPID_STEPS=$steps"
RAPID_CHECKS="$checks" RAPID_STEPS="$steps" \
  go test ./propertytests/ -count=1 -v -timeout 40m -skip 'TestFairClient'

echo "== client-level machine: RAPID_CHECKS=$checks RAPID_STEPS=$client_steps"
RAPID_CHECKS="$checks" RAPID_STEPS="$client_steps" \
  go test ./propertytests/ -count=1 -v -timeout 20m -run 'TestFairClient'
