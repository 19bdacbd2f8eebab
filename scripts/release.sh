#!/usr/bin/env bash
# Release build (README "Install"): two binaries in DIR (default dist/), and
# a check of each one's C library requirement with objdump -T.
#
#   gpuguard-linux-amd64         cgo, samples GPU memory through NVML (go-nvml);
#                                needs the glibc it was built against, at least
#                                2.34 (GLIBC_2.34: pthread_*, dl* and
#                                __libc_start_main moved into libc in 2.34).
#   gpuguard-linux-amd64-nonvml  CGO_ENABLED=0, static: runs on any Linux (RHEL
#                                or Rocky 8's glibc 2.28, Alpine) but samples no
#                                GPU memory; everything else (OOM messages,
#                                policy, relaunches, host memory) is the same.
#
# Binding the cgo build to glibc 2.28 was tried (.symver headers with
# internal linking): Go's internal linker rejects versioned references and the
# external one pulls __libc_start_main@GLIBC_2.34 from crt1.o, so the honest
# release for glibc < 2.34 is the static build.
#
# The version is `git describe`, set with -ldflags -X main.version.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-dist}
mkdir -p "$out"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
ldflags="-s -w -X main.version=$version"

export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
CGO_ENABLED=1 go build -trimpath -ldflags "$ldflags" -o "$out/gpuguard-linux-amd64" .
CGO_ENABLED=0 go build -trimpath -tags nonvml -ldflags "$ldflags" -o "$out/gpuguard-linux-amd64-nonvml" .

# The newest glibc symbol version a binary needs ("" for none).
needs() { { objdump -T "$1" 2>/dev/null || true; } | { grep -o 'GLIBC_[0-9.]*' || true; } | sed 's/GLIBC_//' | sort -uV | tail -1; }

cgo=$(needs "$out/gpuguard-linux-amd64")
static=$(needs "$out/gpuguard-linux-amd64-nonvml")
if [ -n "$static" ]; then
  echo "release: $out/gpuguard-linux-amd64-nonvml needs glibc $static; it must need none" >&2
  exit 1
fi
if [ "$(printf '%s\n2.34\n' "$cgo" | sort -V | tail -1)" != "2.34" ] && [ "${GPUGUARD_RELEASE_ANY_GLIBC:-}" != 1 ]; then
  echo "release: $out/gpuguard-linux-amd64 needs glibc $cgo, newer than the 2.34 the README states; build on an older distribution (Debian 12, Ubuntu 22.04), or set GPUGUARD_RELEASE_ANY_GLIBC=1 and say so" >&2
  exit 1
fi
echo "$out/gpuguard-linux-amd64: $version, needs glibc $cgo or newer (objdump -T)"
echo "$out/gpuguard-linux-amd64-nonvml: $version, static, needs no glibc; samples no GPU memory"
