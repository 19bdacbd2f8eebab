#!/usr/bin/env bash
# stop-local-slurm.sh: stop the local Slurm cluster that start-local-slurm.sh started.
#
# Cancels the cluster's jobs (so Slurm itself ends their processes), then stops slurmd,
# slurmctld and munged. Only pids that start-local-slurm.sh recorded (or that the daemons wrote
# into pid files in the state dir) are signalled, and only after checking that the process's
# command line names this state dir; nothing is ever looked up or killed by name. Running it
# when nothing is running is fine. Needs root. See docs/slurm.md.
#
# Options:
#   --purge      also delete the state dir (config, munge key, job state, logs)
#   -h, --help   this text
#
# Environment: LOCAL_SLURM_DIR, the state dir [/var/tmp/gpuguard-slurm], as for the start script.

set -uo pipefail

PROG=stop-local-slurm
# shellcheck source-path=SCRIPTDIR source=lib/slurm-common.sh
. "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib/slurm-common.sh"

parse_stop_args "$@"

DIR=$(state_dir LOCAL_SLURM_DIR /var/tmp/gpuguard-slurm) || exit 1
CONF=$DIR/etc/slurm.conf
RECORD=$DIR/run/started.pids

begin_stop

status=0
stopped=0

# 1. cancel the jobs, so that Slurm ends their processes (SIGTERM, KillWait, SIGKILL)
if [ -n "$(pids_of slurmctld)" ] && [ -n "$(pids_of slurmd)" ] && [ -r "$CONF" ]; then
    cancel_jobs || status=1
fi

# 2. daemons, compute node first
stop_daemon slurmd || status=1

# job step daemons forked by our slurmd have SLURM_CONF=<our slurm.conf> in their environment;
# they end a moment after their job, so give them a few seconds
find_stepds() {
    local envf p found=""
    for envf in /proc/[0-9]*/environ; do
        p=${envf#/proc/}; p=${p%/environ}
        case "$(cat "/proc/$p/comm" 2>/dev/null)" in slurmstepd) ;; *) continue ;; esac
        if { tr '\0' '\n' < "$envf"; } 2>/dev/null | grep -qxF "SLURM_CONF=$CONF"; then found="$found $p"; fi
    done
    echo "$found"
}
for _ in $(seq 1 30); do
    stray=$(find_stepds)
    [ -n "${stray// /}" ] || break
    sleep 0.5
done
if [ -n "${stray// /}" ]; then
    log "WARNING: job step daemons of this cluster are still running (slurmstepd pids:$stray); not killed"
    status=1
fi

stop_daemon slurmctld || status=1
stop_daemon munged || status=1

# 3. empty cgroup v1 directories our slurmd made in cgroup mode, slurm_<node name>
if [ "$status" = 0 ]; then
    node=$(conf_nodes | head -n1)
    remove_cgroup_dirs "${node:-localhost}"
fi

if [ "$status" = 0 ]; then
    forget_daemons
    if [ "$PURGE" = 1 ]; then
        purge_state_dir
        log "stopped; removed $DIR"
    else
        if [ "$stopped" = 0 ]; then log "nothing was running (state kept in $DIR; --purge deletes it)"
        else log "stopped (state kept in $DIR; --purge deletes it)"; fi
    fi
else
    log "some processes are still running (see above); state dir kept"
fi
exit "$status"
