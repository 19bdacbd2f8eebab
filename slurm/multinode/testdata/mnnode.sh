#!/bin/bash
# A node's launcher, as torchrun is on each node of a multi-node job:
#   mnnode.sh --nnodes N --node-rank K --nproc-per-node P SCRIPT ARGS...
# starts P ranks of SCRIPT (RANK=K*P+i, WORLD_SIZE=N*P, LOCAL_RANK=i) and
# waits; when one fails it kills the node's other ranks (SIGKILL: they may
# ignore SIGTERM in a collective) and exits with the failed rank's status,
# as torchrun does without restarts. It prints its settings first.
# (Debian's torchrun, python3 -m torch.distributed.run of torch 1.13, fails
# here before starting a rank: its --redirects default is None.)
set -u
nnodes=1 node_rank=0 nproc=1
while [ $# -gt 0 ]; do
  case "$1" in
    --nnodes) nnodes=$2; shift 2;;
    --node-rank|--node_rank) node_rank=$2; shift 2;;
    --nproc-per-node|--nproc_per_node) nproc=$2; shift 2;;
    *) break;;
  esac
done
echo "node $node_rank of $nnodes on $(hostname): $nproc ranks: $*"
pids=()
for ((i = 0; i < nproc; i++)); do
  RANK=$((node_rank * nproc + i)) WORLD_SIZE=$((nnodes * nproc)) LOCAL_RANK=$i python3 "$@" &
  pids+=($!)
done
left=$nproc
while [ "$left" -gt 0 ]; do
  wait -n
  rc=$?
  left=$((left - 1))
  if [ "$rc" -ne 0 ]; then
    echo "node $node_rank: a rank exited with status $rc: stopping the node's other ranks"
    kill -KILL "${pids[@]}" 2>/dev/null
    wait
    exit "$rc"
  fi
done
