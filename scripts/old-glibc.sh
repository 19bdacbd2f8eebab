#!/usr/bin/env bash
# Unpacks the oldest glibc Debian's archive still serves (Debian 11's libc6,
# glibc 2.31) into DIR (default /var/cache/gpuguard/old-glibc), for the
# release test (scripts/release_test.go), which starts the release binary
# with that glibc's dynamic linker and libraries:
#
#   DIR/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 --library-path DIR/lib/x86_64-linux-gnu .gpuguard/dist/gpuguard-linux-amd64 version
#
# Glibc 2.28 itself (Debian 10, RHEL 8) is no longer on the archive's main
# mirror; 2.31 is older than 2.34, so it still has libpthread, libdl and
# libresolv apart from libc, which is what a binary built on a newer glibc
# trips over. The binary's symbol versions (objdump -T) are checked against
# 2.28 by the test. Does nothing when DIR already holds it. Needs curl (or
# wget), xz, dpkg-deb and gpgv with debian-archive-keyring (all on Debian):
# the suite's InRelease is checked against Debian's archive keys, the
# package index against InRelease, the package against the index.
set -euo pipefail
dir=${1:-/var/cache/gpuguard/old-glibc}
suite=${GPUGUARD_OLD_SUITE:-bullseye}
mirror=${GPUGUARD_DEBIAN_MIRROR:-http://deb.debian.org/debian}
if [ -x "$dir/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" ]; then
  echo "old glibc present in $dir"
  exit 0
fi
get() {
  if command -v curl >/dev/null; then curl -fsSL -o "$2" "$1"; else wget -q -O "$2" "$1"; fi
}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
keyring=${GPUGUARD_DEBIAN_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
get "$mirror/dists/$suite/InRelease" "$tmp/InRelease"
if ! gpgv --keyring "$keyring" --output "$tmp/Release" "$tmp/InRelease" 2>"$tmp/gpgv.log"; then
  echo "old-glibc: $mirror/dists/$suite/InRelease is not signed by a key of $keyring:" >&2
  cat "$tmp/gpgv.log" >&2
  exit 1
fi
get "$mirror/dists/$suite/main/binary-amd64/Packages.xz" "$tmp/Packages.xz"
want=$(awk '/^SHA256:/ { s = 1; next } /^[^ ]/ { s = 0 } s && $3 == "main/binary-amd64/Packages.xz" { print $1 }' "$tmp/Release")
echo "$want  $tmp/Packages.xz" | sha256sum -c --quiet
read -r file sum < <(xz -dc "$tmp/Packages.xz" | awk '
  /^Package: / { p = ($2 == "libc6") }
  p && /^Filename: / { f = $2 }
  p && /^SHA256: / { s = $2 }
  p && /^$/ { print f, s; exit }')
if [ -z "${file:-}" ] || [ -z "${sum:-}" ]; then
  echo "old-glibc: no libc6 in $mirror's $suite index: set GPUGUARD_OLD_SUITE or GPUGUARD_DEBIAN_MIRROR" >&2
  exit 1
fi
get "$mirror/$file" "$tmp/libc6.deb"
echo "$sum  $tmp/libc6.deb" | sha256sum -c --quiet
mkdir -p "$dir.tmp"
dpkg-deb -x "$tmp/libc6.deb" "$dir.tmp"
rm -rf "$dir"
mv "$dir.tmp" "$dir"
echo "old glibc: $(basename "$file") in $dir"
