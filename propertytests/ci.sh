#!/usr/bin/env bash
# The long property-test run, called by .ci/run. The lock machines the
# project's fairness rests on (reentrant, Redisson-compatible fair,
# scalable fair) run 600 sequences per backend (miniredis and
# redis-server), about 100 steps each; every other machine (fenced,
# read-write, semaphores, seats, corrupt-state, ...) runs 120; the
# client-level machine (whose steps wait for real grants) runs 350
# sequences of about 30 steps. About 10 minutes on an idle 2-core machine
# (CI as a whole must stay under 50: the counts were 800/200/500, 17
# minutes, until the etcd module's tests brought CI near that limit; every
# machine and every fault kind still runs, with fewer sequences). Each test logs the sequences and
# steps it ran. Override with RAPID_CHECKS (the lock machines) /
# OTHER_CHECKS / CLIENT_CHECKS / RAPID_STEPS / CLIENT_STEPS.
set -euo pipefail
cd "$(dirname "$0")/.."
checks="${RAPID_CHECKS:-600}"
other_checks="${OTHER_CHECKS:-120}"
client_checks="${CLIENT_CHECKS:-350}"
steps="${RAPID_STEPS:-100}"
client_steps="${CLIENT_STEPS:-30}"
core='^Test(Fair|Scalable|Reentrant)'
# The proofs that the checkers catch broken scripts (about 4 minutes here)
# ran in the README's test command already: each stops at its first catch,
# so more sequences per round change nothing they show.
proofs='BrokenVariantsFail|CatchesBroken|CatchesAStale'

echo "== lock machines: RAPID_CHECKS=$checks RAPID_STEPS=$steps"
RAPID_CHECKS="$checks" RAPID_STEPS="$steps" \
  go test ./propertytests/ -count=1 -v -timeout 40m -run "$core" -skip "TestFairClient|$proofs"

echo "== every other machine: RAPID_CHECKS=$other_checks RAPID_STEPS=$steps"
RAPID_CHECKS="$other_checks" RAPID_STEPS="$steps" \
  go test ./propertytests/ -count=1 -v -timeout 40m -skip "$core|$proofs"

echo "== client-level machine: RAPID_CHECKS=$client_checks RAPID_STEPS=$client_steps"
RAPID_CHECKS="$client_checks" RAPID_STEPS="$client_steps" \
  go test ./propertytests/ -count=1 -v -timeout 20m -run 'TestFairClient'
