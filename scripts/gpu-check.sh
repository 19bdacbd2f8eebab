#!/usr/bin/env bash
# gpu-check.sh [OUT]: every check that needs a real NVIDIA GPU, in one run of under five minutes
# (docs/gpu-validation.md). CI has no GPU; run this on a machine that has one, from the repository
# root, with Go, gcc and a CUDA build of PyTorch on python3. It writes what each check printed, the
# run directory of the recovered job and a plot under OUT (default .gpuguard/gpu-check; $OUT when the
# device tool sets it), and ends with one line per check:
#
#   gpu-check: nvml        ok    (…)
#   gpu-check: doctor      ok
#   gpu-check: recovery    ok    (attempt 1 died of GPU OOM in validation … ; exit 0)
#   gpu-check: probe       ok    (oom record with allocator figures and a snapshot)
#   gpu-check: plot        ok
#
# Exit status: 0 when every check passed; 1 when one failed; 2 when there is no GPU to check (nvidia-smi
# finds none), so that a run on a machine without one says so instead of failing in pieces.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-.gpuguard/gpu-check}}
mkdir -p "$out"
out=$(cd "$out" && pwd)
export CGO_CFLAGS=-Wno-deprecated-declarations
results=()
failed=0

say() { printf 'gpu-check: %s\n' "$*" | tee -a "$out/summary.txt"; }
record() { # NAME ok|FAIL DETAIL
    results+=("$(printf '%-11s %-5s %s' "$1" "$2" "${3:+($3)}")")
    [ "$2" = ok ] || failed=1
}

: > "$out/summary.txt"
say "started $(date -u +%FT%TZ) on $(hostname); output in $out"
if ! nvidia-smi -L > "$out/nvidia-smi.txt" 2>&1 || ! grep -q '^GPU ' "$out/nvidia-smi.txt"; then
    say "no GPU found (nvidia-smi -L: $(head -c 200 "$out/nvidia-smi.txt"))"
    exit 2
fi
say "$(head -n 4 "$out/nvidia-smi.txt" | tr '\n' ';')"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >> "$out/nvidia-smi.txt" 2>&1

# The binary, where the README's commands put it.
if ! timeout 240 go build -o .gpuguard/bin/gpuguard . > "$out/build.txt" 2>&1; then
    say "build failed:"; cat "$out/build.txt"; exit 1
fi
gg=$PWD/.gpuguard/bin/gpuguard

# 1. NVML against the real driver: device and per-process memory, utilisation, visible devices;
#    then what one sample costs.
if timeout 90 go test -count=1 -v -run 'TestRealNVML' ./internal/probes/gpu/ > "$out/nvml.txt" 2>&1 &&
    grep -q -- '--- PASS: TestRealNVML' "$out/nvml.txt" && ! grep -q -- '--- SKIP: TestRealNVML' "$out/nvml.txt"; then
    timeout 60 go test -run '^$' -bench RealNVML -benchtime 200x ./internal/probes/gpu/ >> "$out/nvml.txt" 2>&1
    record nvml ok "$(grep -m1 -o 'BenchmarkRealNVML[^ ]* *[0-9]* *[0-9.]* ns/op' "$out/nvml.txt" || echo 'no benchmark line')"
else
    record nvml FAIL "see $out/nvml.txt"
fi

# 2. What a person checks before blaming their code.
if timeout 60 "$gg" doctor > "$out/doctor.txt" 2>&1; then record doctor ok; else record doctor FAIL "exit $?; see $out/doctor.txt"; fi

# 3. A real PyTorch job that runs out of CUDA memory in validation and is recovered from its
#    checkpoint (e2e/torchjob on cuda; --gpu-memory-mib caps the allocator so that the scenario's
#    sizes run out on a large GPU), with the torch probe on: its allocator figures and snapshot.
job=$out/job
rm -rf "$job"; mkdir -p "$job"
cp -r e2e/torchjob/. "$job/"
(
    cd "$job" &&
        timeout 180 "$gg" run --probe torch --run-dir "$job/run" --policy gpuguard.yaml -- \
            python3 train_torch.py --config config.yaml --device cuda --gpu-memory-mib 512
) > "$out/recovery.txt" 2>&1
code=$?
decision=$(grep -m1 'attempt 1 died of' "$out/recovery.txt" | sed 's/^gpuguard: //' | cut -c1-160)
if [ "$code" = 0 ] && grep -q 'attempt 1 died of GPU OOM in validation' "$out/recovery.txt"; then
    record recovery ok "$decision; exit 0"
else
    record recovery FAIL "exit $code; ${decision:-no decision line}; see $out/recovery.txt"
fi
oom=$(cat "$job"/run/probe/attempt-1/probe-*.jsonl 2>/dev/null | grep -m1 '"t":"oom"')
snap=$(ls "$job"/run/probe/attempt-1/oom-snapshot-*.pickle 2>/dev/null | head -n1)
if [ -n "$oom" ] && printf '%s' "$oom" | grep -q '"cuda_reserved":' && [ -s "$snap" ]; then
    record probe ok "oom record with the CUDA allocator's figures ($(printf '%s' "$oom" | grep -o '"cuda_reserved":[0-9]*')); snapshot $(stat -c %s "$snap") bytes"
else
    record probe FAIL "oom record: ${oom:+found}${oom:-none}; snapshot: ${snap:-none}"
fi

# 4. The report and the plot of that run, from NVML's samples.
if timeout 60 "$gg" report --plot "$out/gpu-run.png" "$job/run" > "$out/report.txt" 2>&1 && [ -s "$out/gpu-run.png" ]; then
    record plot ok "$out/gpu-run.png"
else
    record plot FAIL "see $out/report.txt"
fi

for r in "${results[@]}"; do say "$r"; done
say "finished $(date -u +%FT%TZ)"
exit "$failed"
