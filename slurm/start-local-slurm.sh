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
log()  { printf '[%s] %s\n' "$PROG" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }

usage() { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2; }

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

DIR=${LOCAL_SLURM_DIR:-/var/tmp/gpuguard-slurm}
CGROUP_MODE=${LOCAL_SLURM_CGROUP:-auto}
TIMEOUT=${LOCAL_SLURM_TIMEOUT:-90}
KILLWAIT=${LOCAL_SLURM_KILLWAIT:-10}
CRED_EXPIRE=${LOCAL_SLURM_CRED_EXPIRE:-10}
MIN_JOB_AGE=${LOCAL_SLURM_MIN_JOB_AGE:-3600}
CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-6817}
SLURMD_PORT=${LOCAL_SLURM_SLURMD_PORT:-6818}
NODE=${LOCAL_SLURM_NODE:-localhost}

case "$DIR" in /*) ;; *) die "LOCAL_SLURM_DIR must be an absolute path (got '$DIR')" ;; esac
DIR=${DIR%/}
case "$CGROUP_MODE" in auto|yes|no) ;; *) die "LOCAL_SLURM_CGROUP must be auto, yes or no" ;; esac
case "$NODE" in ''|*[!a-z0-9-]*) die "LOCAL_SLURM_NODE must be lower-case letters, digits and - (got '$NODE')" ;; esac

CONF=$DIR/etc/slurm.conf
SOCK=$DIR/run/munge.socket
RECORD=$DIR/run/started.pids   # "name pid" lines for every daemon this script started
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

[ "$(uname -s)" = Linux ] || die "Linux only"
[ "$(id -u)" -eq 0 ] || die "must run as root (slurmd has to start jobs as their users); try: sudo bash $0"

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
T0=$(now)

# ---------------------------------------------------------------------------------------------
# 0. one start/stop at a time
mkdir -p "$(dirname "$DIR")"
exec 9>"$DIR.lock"
if ! flock -w 300 9; then die "another start/stop holds $DIR.lock for more than 300 s"; fi

# ---------------------------------------------------------------------------------------------
# 1. packages
need_cmds="slurmctld slurmd slurmstepd sinfo squeue sbatch srun scontrol scancel munged munge unmunge"
missing=""
for c in $need_cmds; do command -v "$c" >/dev/null 2>&1 || missing="$missing $c"; done
if [ -n "$missing" ]; then
    [ "$INSTALL" = 1 ] || die "missing commands:$missing (and --no-install given)"
    command -v apt-get >/dev/null || die "missing commands:$missing and no apt-get to install them"
    log "installing slurmctld slurmd slurm-client munge (missing:$missing)"
    mkdir -p "$DIR/log"
    ti=$(now)
    # Keep the packages' maintainer scripts from starting the system's own munge/slurm services:
    # policy-rc.d exit 101 = "do not start". Only added when the host has none, removed after.
    own_policy=0
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        own_policy=1
    fi
    apt_ok=1
    {
        export DEBIAN_FRONTEND=noninteractive
        apt-get -q -o DPkg::Lock::Timeout=300 update &&
        apt-get -q -y -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0 install --no-install-recommends \
            slurmctld slurmd slurm-client munge
    } > "$DIR/log/apt.log" 2>&1 < /dev/null || apt_ok=0
    [ "$own_policy" = 1 ] && rm -f /usr/sbin/policy-rc.d
    if [ "$apt_ok" != 1 ]; then
        tail -n 25 "$DIR/log/apt.log" >&2
        die "package installation failed (full log: $DIR/log/apt.log)"
    fi
    for c in $need_cmds; do command -v "$c" >/dev/null 2>&1 || die "'$c' still missing after install"; done
    log "packages installed in $(since "$ti") s"
fi
log "$(slurmctld -V 2>/dev/null || true), $(munged -V 2>/dev/null | head -n1 || true)"

# ---------------------------------------------------------------------------------------------
# helpers for our own daemons

# pid of daemon $1 if it is running from OUR config (its pid file is in $DIR/run and its command
# line names our state dir); empty otherwise. Never matches a daemon we did not start.
our_pid() {
    local name=$1 pidfile=$DIR/run/$1.pid pid cmd
    [ -s "$pidfile" ] || return 0
    pid=$(tr -dc '0-9' < "$pidfile")
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 0
    cmd=$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)
    case "$cmd" in
        *"$name"*"$DIR/"*) echo "$pid" ;;
    esac
}

record_pid() { echo "$1 $2" >> "$RECORD"; }

wait_for_pidfile() {   # name: wait until the daemon wrote its pid file and is alive
    local name=$1 end=$(( $(date +%s) + TIMEOUT )) pid
    while [ "$(date +%s)" -lt "$end" ]; do
        pid=$(our_pid "$name")
        if [ -n "$pid" ]; then echo "$pid"; return 0; fi
        sleep 0.2
    done
    return 1
}

running() {   # pid: exists and is not a zombie (PID 1 here may reap exited daemons late)
    local st
    st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ]
}

stop_pid() {   # name pid: SIGTERM, wait, SIGKILL as a last resort (only our own verified pid)
    local name=$1 pid=$2
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 100); do
        running "$pid" || return 0
        sleep 0.2
    done
    log "$name (pid $pid) ignored SIGTERM for 20 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
}

port_busy() {  # true when something accepts TCP connections on 127.0.0.1:$1
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

show_log_tail() {
    local f
    for f in "$@"; do
        [ -s "$f" ] || continue
        log "---- last lines of $f"
        tail -n 20 "$f" >&2
    done
}

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

mkdir -p "$DIR"/etc "$DIR"/state "$DIR"/spool "$DIR"/log "$DIR"/run "$DIR"/munge
chmod 755 "$DIR" "$DIR"/etc "$DIR"/state "$DIR"/spool "$DIR"/log "$DIR"/run
chmod 700 "$DIR"/munge
touch "$RECORD"

# ---------------------------------------------------------------------------------------------
# 3. munge: private key, private socket, own munged (never the system's /run/munge one)
if [ ! -s "$DIR/munge/munge.key" ]; then
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --keyfile="$DIR/munge/munge.key" --bits=1024 2>/dev/null \
            || die "mungekey could not create $DIR/munge/munge.key"
    else
        dd if=/dev/urandom of="$DIR/munge/munge.key" bs=1 count=1024 2>/dev/null \
            || die "could not create $DIR/munge/munge.key"
    fi
    chmod 400 "$DIR/munge/munge.key"
    log "created munge key $DIR/munge/munge.key"
fi

munge_ok() { munge -S "$SOCK" -n 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1; }

pid=$(our_pid munged)
if [ -n "$pid" ] && munge_ok; then
    log "munged already running (pid $pid)"
else
    if [ -n "$pid" ]; then log "munged (pid $pid) does not answer; restarting it"; stop_pid munged "$pid"; fi
    rm -f "$DIR/run/munged.pid"
    munged --key-file="$DIR/munge/munge.key" --socket="$SOCK" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed" < /dev/null 2>> "$DIR/log/munged.stderr" 9>&- \
        || { show_log_tail "$DIR/log/munged.stderr" "$DIR/log/munged.log"; die "munged failed to start"; }
    pid=$(wait_for_pidfile munged) || { show_log_tail "$DIR/log/munged.log"; die "munged did not come up"; }
    record_pid munged "$pid"
    ok=0
    for _ in $(seq 1 50); do if munge_ok; then ok=1; break; fi; sleep 0.2; done
    [ "$ok" = 1 ] || { show_log_tail "$DIR/log/munged.log"; die "munged (pid $pid) does not encode/decode credentials"; }
    log "munged started (pid $pid, socket $SOCK)"
fi

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

cgroup_v1_usable() {
    local c t
    [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ] || return 1
    for c in memory freezer cpuset cpuacct; do
        [ "$(stat -fc %T "/sys/fs/cgroup/$c" 2>/dev/null)" = cgroupfs ] || return 1
    done
    t=/sys/fs/cgroup/memory/local-slurm-probe.$$
    mkdir "$t" 2>/dev/null || return 1
    rmdir "$t"
}

write_config() {   # $1 = cgroup | none ; writes $CONF (+ cgroup.conf), returns 0 if it changed
    local mode=$1 tmp=$CONF.new
    {
        echo "# written by slurm/start-local-slurm.sh; edits are overwritten on the next start"
        echo "# mode: $mode"
        echo "ClusterName=gpuguard"
        echo "SlurmctldHost=localhost"
        echo "SlurmctldPort=$CTLD_PORT"
        echo "SlurmdPort=$SLURMD_PORT"
        echo "AuthType=auth/munge"
        echo "CredType=cred/munge"
        echo "AuthInfo=socket=$SOCK,cred_expire=$CRED_EXPIRE"
        echo "SlurmUser=root"
        echo "SlurmdUser=root"
        echo "StateSaveLocation=$DIR/state"
        echo "SlurmdSpoolDir=$DIR/spool"
        echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
        echo "SlurmdPidFile=$DIR/run/slurmd.pid"
        echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
        echo "SlurmdLogFile=$DIR/log/slurmd.log"
        echo "SlurmctldDebug=info"
        echo "SlurmdDebug=info"
        echo "MailProg=/bin/true"
        echo "MpiDefault=none"
        echo "SwitchType=switch/none"
        if [ "$mode" = cgroup ]; then
            echo "ProctrackType=proctrack/cgroup"
            echo "TaskPlugin=task/cgroup,task/affinity"
            echo "JobAcctGatherType=jobacct_gather/cgroup"
        else
            echo "ProctrackType=proctrack/linuxproc"
            echo "TaskPlugin=task/none"
            echo "JobAcctGatherType=jobacct_gather/linux"
        fi
        echo "AccountingStorageType=accounting_storage/none"
        echo "JobCompType=jobcomp/filetxt"
        echo "JobCompLoc=$DIR/log/jobcomp.log"
        echo "SelectType=select/cons_tres"
        echo "SelectTypeParameters=CR_Core_Memory"
        echo "DefMemPerCPU=$def_mem"
        echo "ReturnToService=2"
        echo "JobRequeue=1"
        echo "KillWait=$KILLWAIT"
        echo "MinJobAge=$MIN_JOB_AGE"
        echo "InactiveLimit=0"
        echo "SchedulerType=sched/backfill"
        echo "SchedulerParameters=bf_interval=2,sched_interval=5"
        [ -z "$slurmd_params" ] || echo "$slurmd_params"
        echo "NodeName=$NODE NodeAddr=127.0.0.1 NodeHostname=$NODE $node_hw State=UNKNOWN"
        echo "PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP"
    } > "$tmp"
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
    local changed=1
    if cmp -s "$tmp" "$CONF" && {
           { [ ! -e "$DIR/etc/cgroup.conf.new" ] && [ ! -e "$DIR/etc/cgroup.conf" ]; } ||
           cmp -s "$DIR/etc/cgroup.conf.new" "$DIR/etc/cgroup.conf"; }; then
        changed=0
    fi
    mv -f "$tmp" "$CONF"
    if [ -e "$DIR/etc/cgroup.conf.new" ]; then mv -f "$DIR/etc/cgroup.conf.new" "$DIR/etc/cgroup.conf"
    else rm -f "$DIR/etc/cgroup.conf"; fi
    chmod 644 "$CONF"
    [ "$changed" = 1 ]
}

node_state() {
    timeout 20 sinfo -h -n "$NODE" -o '%T' 2>/dev/null | head -n1 || true
}

# start slurmctld + slurmd (whatever is not running yet) and wait for the node
start_slurm() {
    local pid end st resumed=0
    export SLURM_CONF=$CONF

    pid=$(our_pid slurmctld)
    if [ -n "$pid" ]; then
        log "slurmctld already running (pid $pid)"
    else
        ! port_busy "$CTLD_PORT" || die "port $CTLD_PORT is taken by another program (a system slurmctld?); set LOCAL_SLURM_CTLD_PORT"
        rm -f "$DIR/run/slurmctld.pid"
        slurmctld -f "$CONF" < /dev/null >> "$DIR/log/slurmctld.stderr" 2>&1 9>&- \
            || { show_log_tail "$DIR/log/slurmctld.stderr" "$DIR/log/slurmctld.log"; die "slurmctld failed to start"; }
        pid=$(wait_for_pidfile slurmctld) \
            || { show_log_tail "$DIR/log/slurmctld.stderr" "$DIR/log/slurmctld.log"; die "slurmctld did not come up"; }
        record_pid slurmctld "$pid"
        log "slurmctld started (pid $pid)"
    fi
    end=$(( $(date +%s) + TIMEOUT ))
    until timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; do
        [ "$(date +%s)" -lt "$end" ] || { show_log_tail "$DIR/log/slurmctld.log"; die "slurmctld does not answer 'scontrol ping' after $TIMEOUT s"; }
        [ -n "$(our_pid slurmctld)" ] || { show_log_tail "$DIR/log/slurmctld.stderr" "$DIR/log/slurmctld.log"; die "slurmctld exited"; }
        sleep 0.3
    done

    pid=$(our_pid slurmd)
    if [ -n "$pid" ]; then
        log "slurmd already running (pid $pid)"
    else
        ! port_busy "$SLURMD_PORT" || die "port $SLURMD_PORT is taken by another program (a system slurmd?); set LOCAL_SLURM_SLURMD_PORT"
        rm -f "$DIR/run/slurmd.pid"
        slurmd -f "$CONF" -N "$NODE" < /dev/null >> "$DIR/log/slurmd.stderr" 2>&1 9>&- \
            || { show_log_tail "$DIR/log/slurmd.stderr" "$DIR/log/slurmd.log"; die "slurmd failed to start"; }
        pid=$(wait_for_pidfile slurmd) \
            || { show_log_tail "$DIR/log/slurmd.stderr" "$DIR/log/slurmd.log"; die "slurmd did not come up"; }
        record_pid slurmd "$pid"
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

case "$CGROUP_MODE" in
    yes) mode=cgroup; cgroup_v1_usable || die "LOCAL_SLURM_CGROUP=yes but cgroup v1 (memory, freezer, cpuset, cpuacct) is not usable here" ;;
    no)  mode=none ;;
    auto)
        if [ -e "$DIR/etc/cgroup-failed" ]; then
            mode=none
            log "cgroup mode failed here before ($DIR/etc/cgroup-failed); using linuxproc (--fresh retries)"
        elif cgroup_v1_usable; then mode=cgroup
        else mode=none; fi ;;
esac

if write_config "$mode"; then
    if [ -n "$(our_pid slurmctld)$(our_pid slurmd)" ]; then
        log "configuration changed; restarting slurmctld and slurmd"
        stop_slurm_daemons
    fi
fi
log "config $CONF (mode: $mode; node: $node_hw)"
TS=$(now)

start_slurm
if ! smoke_test; then
    show_log_tail "$DIR/log/slurmd.log"
    if [ "$mode" = cgroup ] && [ "$CGROUP_MODE" = auto ]; then
        log "falling back to proctrack/linuxproc without cgroups"
        date > "$DIR/etc/cgroup-failed"
        mode=none
        write_config none || true
        stop_slurm_daemons
        start_slurm
        smoke_test || die "smoke test failed without cgroups too; see $DIR/log/slurmd.log"
    else
        die "smoke test failed; see $DIR/log/slurmd.log and $DIR/log/slurmctld.log"
    fi
fi

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
