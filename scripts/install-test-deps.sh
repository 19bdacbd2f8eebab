#!/usr/bin/env bash
# Installs, when missing, the Debian packages the real-program tests use:
# python3-torch (real PyTorch on the CPU) and python3-yaml (the job's config)
# for the end-to-end recovery tests, zsh and fish for the completion tests.
# Needs root; does nothing for packages already installed.
set -euo pipefail
need=()
/usr/bin/python3 -c 'import torch' 2>/dev/null || need+=(python3-torch)
/usr/bin/python3 -c 'import yaml' 2>/dev/null || need+=(python3-yaml)
# The shells whose completion scripts `gpuguard completion` writes.
command -v zsh >/dev/null || need+=(zsh)
command -v fish >/dev/null || need+=(fish)
# An older glibc (Debian 11's) for the release test to start the release binary with.
"$(dirname "$0")/old-glibc.sh"
if [ ${#need[@]} -eq 0 ]; then echo "test dependencies present"; exit 0; fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
