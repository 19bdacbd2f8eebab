#!/usr/bin/env bash
# start-local-slurm.sh: a real single-node Slurm cluster on localhost, without systemd, for
# gpuguard's Slurm integration tests (slurm/slurm_test.go) and for trying gpuguard under Slurm.
#
# Installs the Debian packages if they are missing (slurmctld, slurmd, slurm-client, munge),
# writes a private configuration under $LOCAL_SLURM_DIR, starts munged, slurmctld and slurmd
# in daemon mode, waits until the node ($LOCAL_SLURM_NODE, "localhost") is idle, and runs one
# `srun` as a smoke test. Safe to run again: daemons that are already running are left alone
# (or restarted when the configuration changed). Needs root. See docs/slurm.md ("A Slurm on
# this machine"); based on the team's notes in shared/slurm/README.md.
#
# Progress goes to stderr. On success stdout gets exactly one line,
#     export SLURM_CONF=<state dir>/etc/slurm.conf
# so that `eval "$(bash slurm/start-local-slurm.sh)"` sets up the calling shell.
#
# Options:
#   --fresh        stop our daemons (if running) and wipe the state dir first (job ids restart at 1)
#   --no-install   fail instead of installing missing packages
#   -h, --help     this text
#
# Environment (all optional):
#   LOCAL_SLURM_DIR          state dir                          [/var/tmp/gpuguard-slurm]
#   LOCAL_SLURM_CGROUP       auto | yes | no                    [auto]
#                            auto: proctrack/task cgroup plugins when cgroup v1 is usable,
#                            else proctrack/linuxproc (and fall back to it if the cgroup setup
#                            fails its smoke test)
#   LOCAL_SLURM_TIMEOUT      seconds to wait for each daemon / the node  [90]
#   LOCAL_SLURM_KILLWAIT     KillWait: seconds between SIGTERM and SIGKILL [10]
#   LOCAL_SLURM_CRED_EXPIRE  AuthInfo cred_expire; a requeued job waits this long + 1 s [10]
#   LOCAL_SLURM_MIN_JOB_AGE  MinJobAge: seconds `scontrol show job` keeps a finished job [3600]
#   LOCAL_SLURM_CTLD_PORT    SlurmctldPort                      [6817]
#   LOCAL_SLURM_SLURMD_PORT  SlurmdPort                         [6818]
#   LOCAL_SLURM_CPUS         CPUs to declare (more than real is allowed) [real count]
#   LOCAL_SLURM_NODE         the node's name                    [localhost]
#                            slurmd keeps its cgroups in /sys/fs/cgroup/*/slurm_<node>, so two
#                            clusters on one machine (different state dirs and ports) need
#                            different node names: the tests start theirs as gg<port>.

set -euo pipefail
umask 022

PROG=start-local-slurm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib/slurm-common.sh
. "$HERE/lib/slurm-common.sh"

FRESH=0
INSTALL=1
while [ $# -gt 0 ]; do
    case "$1" in
        --fresh) FRESH=1 ;;
        --no-install) INSTALL=0 ;;
        -h|--help) usage; exit 0 ;;
        *) usage; die "unknown argument: $1" ;;
    esac
    shift
done

DIR=$(state_dir LOCAL_SLURM_DIR /var/tmp/gpuguard-slurm)
CGROUP_MODE=${LOCAL_SLURM_CGROUP:-auto}
TIMEOUT=${LOCAL_SLURM_TIMEOUT:-90}
KILLWAIT=${LOCAL_SLURM_KILLWAIT:-10}
CRED_EXPIRE=${LOCAL_SLURM_CRED_EXPIRE:-10}
MIN_JOB_AGE=${LOCAL_SLURM_MIN_JOB_AGE:-3600}
CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${LOCAL_SLURM_SLURMD_PORT:-6818}
NODE=${LOCAL_SLURM_NODE:-localhost}

case "$CGROUP_MODE" in auto|yes|no) ;; *) die "LOCAL_SLURM_CGROUP must be auto, yes or no" ;; esac
case "$NODE" in ''|*[!a-z0-9-]*) die "LOCAL_SLURM_NODE must be lower-case letters, digits and - (got '$NODE')" ;; esac

CONF=$DIR/etc/slurm.conf
SOCK=$DIR/run/munge.socket
RECORD=$DIR/run/started.pids   # "name pid" lines for every daemon this script started

[ "$(uname -s)" = Linux ] || die "Linux only"
[ "$(id -u)" -eq 0 ] || die "must run as root (slurmd has to start jobs as their users); try: sudo bash $0"

T0=$(now)

# ---------------------------------------------------------------------------------------------
# 0. one start/stop at a time
lock_state_dir

# ---------------------------------------------------------------------------------------------
# 1. packages
install_packages "slurmctld slurmd slurmstepd sinfo squeue sbatch srun scontrol scancel munged munge unmunge" \
    slurmctld slurmd slurm-client munge

stop_slurm_daemons() {
    local p
    p=$(our_pid slurmd);    [ -z "$p" ] || { log "stopping slurmd (pid $p)";    stop_pid slurmd "$p"; }
    p=$(our_pid slurmctld); [ -z "$p" ] || { log "stopping slurmctld (pid $p)"; stop_pid slurmctld "$p"; }
}

# ---------------------------------------------------------------------------------------------
# 2. fresh start requested: stop what we run and wipe the state
if [ "$FRESH" = 1 ] && [ -d "$DIR" ]; then
    log "--fresh: stopping our daemons and removing $DIR"
    if [ -n "$(our_pid slurmctld)" ] && [ -f "$HERE/stop-local-slurm.sh" ]; then
        # let the stop script cancel jobs cleanly; it takes the same lock, so release ours
        flock -u 9
        LOCAL_SLURM_DIR=$DIR bash "$HERE/stop-local-slurm.sh" >&2 || true
        flock -w 300 9 || die "could not re-take $DIR.lock"
    fi
    stop_slurm_daemons
    p=$(our_pid munged); [ -z "$p" ] || stop_pid munged "$p"
    rm -rf "$DIR"
fi

# the ports must be free unless our own daemons hold them (checked before anything is started)
if [ -z "$(our_pid slurmctld)" ] && port_busy "$CTLD_PORT"; then
    die "port $CTLD_PORT is taken by another program (a system slurmctld?); set LOCAL_SLURM_CTLD_PORT"
fi
if [ -z "$(our_pid slurmd)" ] && port_busy "$SLURMD_PORT"; then
    die "port $SLURMD_PORT is taken by another program (a system slurmd?); set LOCAL_SLURM_SLURMD_PORT"
fi

make_state_dirs

# ---------------------------------------------------------------------------------------------
# 3. munge: private key, private socket, own munged (never the system's /run/munge one)
start_munged

# ---------------------------------------------------------------------------------------------
# 4. configuration

# hardware as slurmd sees it, e.g. "CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 ThreadsPerCore=1 RealMemory=24105"
hw=$(env -u SLURM_CONF slurmd -C 2>/dev/null | head -n1 | sed -e 's/^NodeName=[^ ]* *//')
case "$hw" in *CPUs=*RealMemory=*) ;; *) die "could not read the hardware from 'slurmd -C' (got: '$hw')" ;; esac
real_cpus=$(printf '%s\n' "$hw" | sed -n 's/.*CPUs=\([0-9]*\).*/\1/p')
real_mem=$(printf '%s\n' "$hw" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
cpus=${LOCAL_SLURM_CPUS:-$real_cpus}
node_hw=$hw
slurmd_params=""
if [ "$cpus" != "$real_cpus" ]; then
    # declare a made-up CPU count; slurmd would drain the node without config_overrides
    node_hw="CPUs=$cpus RealMemory=$real_mem"
    slurmd_params="SlurmdParameters=config_overrides"
fi
def_mem=$(( real_mem / cpus ))

write_config() {   # $1 = cgroup | none ; writes $CONF (+ cgroup.conf), returns 0 if it changed
    local mode=$1
    {
        echo "# written by slurm/start-local-slurm.sh; edits are overwritten on the next start"
        echo "# mode: $mode"
        echo "ClusterName=gpuguard"
        echo "SlurmctldHost=localhost"
        echo "SlurmctldPort=$CTLD_PORT"
        echo "SlurmdPort=$SLURMD_PORT"
        conf_common "$mode" ""
        [ -z "$slurmd_params" ] || echo "$slurmd_params"
        echo "NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE $node_hw State=UNKNOWN"
        echo "PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP"
    } > "$CONF.new"
    if [ "$mode" = cgroup ]; then
        {
            echo "# written by slurm/start-local-slurm.sh"
            echo "CgroupPlugin=cgroup/v1"
            echo "CgroupMountpoint=/sys/fs/cgroup"
            echo "ConstrainCores=yes"
            echo "ConstrainRAMSpace=yes"
            if [ -e /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes ]; then
                # no swapping past --mem: the job is OOM-killed at its limit, as on most clusters
                echo "ConstrainSwapSpace=yes"
                echo "AllowedSwapSpace=0"
            fi
            echo "ConstrainDevices=no"
        } > "$DIR/etc/cgroup.conf.new"
    else
        rm -f "$DIR/etc/cgroup.conf.new"
    fi
    commit_config
}

node_state() {
    timeout 20 sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -n1 || true
}

# start slurmctld + slurmd (whatever is not running yet) and wait for the node
start_slurm() {
    local pid end st resumed=0
    start_slurmctld " (a system slurmctld?); set LOCAL_SLURM_CTLD_PORT"

    pid=$(our_pid slurmd)
    if [ -n "$pid" ]; then
        log "slurmd already running (pid $pid)"
    else
        ! port_busy "$SLURMD_PORT" || die "port $SLURMD_PORT is taken by another program (a system slurmd?); set LOCAL_SLURM_SLURMD_PORT"
        start_daemon slurmd slurmd -f "$CONF" -N "$NODE"
        log "slurmd started (pid $pid)"
    fi

    end=$(( $(date +%s) + TIMEOUT ))
    while :; do
        st=$(node_state)
        case "$st" in
            idle|mixed|allocated|completing) break ;;
            drain*|down*|fail*)
                # left over from an earlier run (e.g. "Kill task failed", "Not responding"); a
                # test cluster should come back by itself
                if [ "$resumed" -lt 3 ] && [ -n "$(our_pid slurmd)" ]; then
                    log "node is '$st' ($(timeout 10 sinfo -h -R -o '%E' 2>/dev/null | head -n1)); resuming it"
                    timeout 10 scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
                    resumed=$((resumed + 1))
                fi ;;
        esac
        if [ "$(date +%s)" -ge "$end" ]; then
            show_log_tail "$DIR/log/slurmd.log" "$DIR/log/slurmctld.log"
            die "node $NODE is '${st:-unknown}', not idle, after $TIMEOUT s"
        fi
        [ -n "$(our_pid slurmd)" ] || { show_log_tail "$DIR/log/slurmd.stderr" "$DIR/log/slurmd.log"; die "slurmd exited"; }
        sleep 0.5
    done
    log "node $NODE is $st"
}

smoke_test() {   # one tiny job step; skipped when the node is busy with earlier jobs
    local st out
    st=$(node_state)
    if [ "$st" != idle ]; then log "node is '$st' (jobs from before are running); smoke test skipped"; return 0; fi
    # shellcheck disable=SC2016  # $SLURM_JOB_ID is expanded by the job's shell
    if out=$(cd "$DIR" && timeout 60 srun --quiet -N1 -n1 -t 1 --job-name=local-slurm-smoke \
                 bash -c 'echo "ok $SLURM_JOB_ID"' < /dev/null 2>&1); then
        case "$out" in ok*) log "smoke test passed: srun ran job ${out#ok }"; return 0 ;; esac
    fi
    log "smoke test failed: $out"
    return 1
}

# ---------------------------------------------------------------------------------------------
# 5. choose the process tracking mode, write config, start

choose_mode LOCAL_SLURM_CGROUP
if write_config "$mode"; then
    if [ -n "$(our_pid slurmctld)$(our_pid slurmd)" ]; then
        log "configuration changed; restarting slurmctld and slurmd"
        stop_slurm_daemons
    fi
fi
log "config $CONF (mode: $mode; node: $node_hw)"
TS=$(now)

start_checked "$DIR/log/slurmd.log"

echo "export SLURM_CONF=$CONF" > "$DIR/env.sh"

cat >&2 <<EOF
[$PROG] local Slurm cluster is up after $(since "$T0") s, daemons $(since "$TS") s (mode: $mode)
  use it:   export SLURM_CONF=$CONF      (or: source $DIR/env.sh)
            sinfo; sbatch --wrap 'hostname'; srun -n1 hostname; squeue; scontrol show job <id>
  exit codes of finished jobs: scontrol show job <id> (kept $MIN_JOB_AGE s), $DIR/log/jobcomp.log
  logs:     $DIR/log/{slurmctld,slurmd,munged}.log
  stop:     LOCAL_SLURM_DIR=$DIR bash $HERE/stop-local-slurm.sh   (add --purge to also delete $DIR)
EOF
echo "export SLURM_CONF=$CONF"
