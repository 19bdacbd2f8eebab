#!/usr/bin/env bash
# Release build (README "Install"): two binaries in DIR, each checked with
# objdump -T for the C library it needs. DIR is relative to the folder the
# script is started from; without it, .gpuguard/dist in the repository (git
# ignores .gpuguard/, gpuguard's own folder), so that nothing is left in the
# repository's root.
#
#   gpuguard-linux-amd64         cgo, samples GPU memory through NVML (go-nvml
#                                dlopens libnvidia-ml.so.1); starts on glibc
#                                2.28 or newer (RHEL and Rocky 8 onwards),
#                                whatever glibc it is built on: linked by
#                                scripts/release-ld.sh, which binds each glibc
#                                symbol to its version of glibc 2.28 or older.
#   gpuguard-linux-amd64-nonvml  CGO_ENABLED=0, static: needs no C library at
#                                all (Alpine, musl) but samples no GPU memory;
#                                everything else is the same.
#
# GPUGUARD_GLIBC sets the oldest glibc the NVML build must start on (2.28).
# Needs go, gcc, binutils (objdump, objcopy) and git; the version is
# `git describe`, set with -ldflags -X main.version.
set -euo pipefail
caller=$PWD
cd "$(dirname "$0")/.."
root=$PWD
if [ $# -gt 0 ]; then
  case $1 in
    /*) out=$1 ;;
    *) out=$caller/$1 ;;
  esac
  shown=$1
else
  out=$root/.gpuguard/dist
  shown=$out
  [ "$caller" = "$root" ] && shown=.gpuguard/dist
fi
glibc=${GPUGUARD_GLIBC:-2.28}
export GPUGUARD_GLIBC=$glibc
for tool in go gcc objdump objcopy; do
  command -v "$tool" >/dev/null || { echo "release: $tool is missing: install go, gcc and binutils (Debian: apt-get install gcc binutils)" >&2; exit 1; }
done
mkdir -p "$out"
version=$(git describe --tags --always --dirty 2>/dev/null || echo dev)
ldflags="-s -w -X main.version=$version"

export CGO_CFLAGS="${CGO_CFLAGS:--Wno-deprecated-declarations}"
# go build skips a link whose inputs it has seen; the linker script is not
# one of them, so the old binaries go first.
rm -f "$out/gpuguard-linux-amd64" "$out/gpuguard-linux-amd64-nonvml"
CGO_ENABLED=1 go build -trimpath -ldflags "$ldflags -linkmode=external -extld='$root/scripts/release-ld.sh'" -o "$out/gpuguard-linux-amd64" .
CGO_ENABLED=0 go build -trimpath -tags nonvml -ldflags "$ldflags" -o "$out/gpuguard-linux-amd64-nonvml" .

# The newest glibc symbol version a binary needs ("" for none).
needs() { { objdump -T "$1" 2>/dev/null || true; } | { grep -o 'GLIBC_[0-9.]*[0-9]' || true; } | sed 's/GLIBC_//' | sort -uV | tail -1; }

cgo=$(needs "$out/gpuguard-linux-amd64")
static=$(needs "$out/gpuguard-linux-amd64-nonvml")
if [ -n "$static" ]; then
  echo "release: $shown/gpuguard-linux-amd64-nonvml needs glibc $static; it must need none" >&2
  exit 1
fi
if [ -z "$cgo" ] || [ "$(printf '%s\n%s\n' "$cgo" "$glibc" | sort -V | tail -1)" != "$glibc" ]; then
  echo "release: $shown/gpuguard-linux-amd64 needs glibc ${cgo:-(none found: is it dynamically linked?)}, not $glibc or older as the README states (objdump -T $shown/gpuguard-linux-amd64)" >&2
  exit 1
fi
echo "$shown/gpuguard-linux-amd64: $version, NVML; its newest glibc symbol version is $cgo (objdump -T): starts on glibc $glibc (RHEL/Rocky 8) and later"
echo "$shown/gpuguard-linux-amd64-nonvml: $version, static, needs no glibc; samples no GPU memory"
