#!/usr/bin/env bash
# The project's test command (README "Test"; .ci/run calls it).
#
# It checks formatting, vet and module tidiness, installs what the real-program
# tests need when it is missing and we are root (Debian's python3-torch and
# python3-yaml for the CPU end-to-end tests; the Slurm tests install Slurm
# themselves), runs every test, then fuzzes each fuzz target briefly.
# Tests whose tools are absent skip with a message saying what to install.
set -euo pipefail
cd "$(dirname "$0")/.."

export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"  # go-nvml's headers warn on every cgo build

step() { printf '\n== %s\n' "$*"; }

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then echo "gofmt would change: $unformatted"; exit 1; fi

step "go vet"
go vet ./...

step "go mod tidy is stable"
cp go.mod /tmp/gpuguard-go.mod.bak; cp go.sum /tmp/gpuguard-go.sum.bak
go mod tidy
if ! cmp -s go.mod /tmp/gpuguard-go.mod.bak || ! cmp -s go.sum /tmp/gpuguard-go.sum.bak; then
  echo "go mod tidy changed go.mod/go.sum:"; diff /tmp/gpuguard-go.mod.bak go.mod || true
  cp /tmp/gpuguard-go.mod.bak go.mod; cp /tmp/gpuguard-go.sum.bak go.sum
  exit 1
fi

if [ "${GPUGUARD_SKIP_DEPS:-}" != 1 ] && [ "$(id -u)" = 0 ]; then
  step "test dependencies"
  scripts/install-test-deps.sh
  # As root, the slurm/ tests start (installing it when missing) and stop a
  # private one-node Slurm of their own: fail rather than skip when they
  # cannot (GPUGUARD_SLURM=off to skip them).
  export GPUGUARD_SLURM="${GPUGUARD_SLURM:-require}"
fi

step "go test"
go test -count=1 -timeout 30m ./...

# After the tests, with the build cache warm: every fuzz target for a few
# seconds (scripts/fuzz.sh; GPUGUARD_FUZZ=off skips it).
if [ "${GPUGUARD_FUZZ:-}" != off ]; then
  step "fuzz (bounded)"
  scripts/fuzz.sh
fi
