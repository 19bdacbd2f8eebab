#!/usr/bin/env bash
# Installs, when missing, the Debian packages the real-program tests use:
# python3-torch (real PyTorch on the CPU) and python3-yaml (the job's config)
# for the end-to-end recovery tests, zsh and fish for the completion tests,
# and what old-glibc.sh needs to fetch Debian 11's glibc for the release test
# (then runs it).
# Needs root; does nothing for packages already installed.
set -euo pipefail
need=()
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
/usr/bin/python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
# The shells whose completion scripts `gpuguard completion` writes.
command -v zsh >/dev/null || need+=(zsh)
command -v fish >/dev/null || need+=(fish)
# What old-glibc.sh fetches and checks Debian 11's libc6 with.
command -v curl >/dev/null || command -v wget >/dev/null || need+=(curl)
command -v xz >/dev/null || need+=(xz-utils)
command -v gpgv >/dev/null || need+=(gpgv)
[ -f /usr/share/keyrings/debian-archive-keyring.gpg ] || need+=(debian-archive-keyring)
if [ ${#need[@]} -eq 0 ]; then
  echo "test packages present"
else
  echo "installing: ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# An older glibc (Debian 11's) for the release test to start the release binary with.
"$(dirname "$0")/old-glibc.sh"
