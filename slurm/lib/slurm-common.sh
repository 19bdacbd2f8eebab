# shellcheck shell=bash
# slurm-common.sh: what the start and stop scripts of slurm/ share (start-local-slurm.sh,
# stop-local-slurm.sh, start-multinode-slurm.sh, stop-multinode-slurm.sh). Sourced, never run.
#
# A script sets, before it sources this file:
#   PROG     its name, for log lines ("[PROG] ...")
# and, before it calls the functions that use them:
#   DIR      the cluster's state dir (absolute, no trailing /)
#   CONF     $DIR/etc/slurm.conf
#   RECORD   $DIR/run/started.pids: "name pid" for every daemon the start script started
#   TIMEOUT  seconds to wait for a daemon (start scripts)
#   SOCK     munged's socket (start scripts)
#   INSTALL  1 to install missing packages, 0 to fail (start scripts)
#
# Our own daemons are found only through pid files in $DIR/run and $RECORD, and only when the
# process's command line names the state dir: nothing is ever looked up or killed by name.

log()  { printf '[%s] %s\n' "$PROG" "$*" >&2; }
die()  { printf '[%s] ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }
# the script's header comment, from its second line to the first empty one
usage() { sed -n '2,/^$/p' "$0" | sed 's/^# \{0,1\}//' >&2; }

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# state_dir VAR DEFAULT: the state dir from environment variable VAR, checked, without a trailing /
state_dir() {
    local d=${!1:-$2}
    case "$d" in /*) ;; *) die "$1 must be an absolute path (got '$d')" ;; esac
    echo "${d%/}"
}

# lock_state_dir: one start/stop of this state dir at a time (fd 9 holds $DIR.lock)
lock_state_dir() {
    mkdir -p "$(dirname "$DIR")"
    exec 9>"$DIR.lock"
    flock -w 300 9 || die "another start/stop holds $DIR.lock for more than 300 s"
}

# ---------------------------------------------------------------------------------------------
# packages

# install_packages "COMMANDS" PACKAGE...: install the Debian packages when one of COMMANDS is
# missing (unless INSTALL=0), keeping their maintainer scripts from starting the system's own
# munge/slurm services: a policy-rc.d that exits 101 ("do not start"), added only when the host
# has none and removed afterwards. apt's output goes to $DIR/log/apt.log.
install_packages() {
    local need_cmds=$1 missing="" c ti own_policy=0 apt_ok=1
    shift
    for c in $need_cmds; do command -v "$c" >/dev/null 2>&1 || missing="$missing $c"; done
    if [ -n "$missing" ]; then
        [ "$INSTALL" = 1 ] || die "missing commands:$missing (and --no-install given)"
        command -v apt-get >/dev/null || die "missing commands:$missing and no apt-get to install them"
        log "installing $* (missing:$missing)"
        mkdir -p "$DIR/log"
        ti=$(now)
        if [ ! -e /usr/sbin/policy-rc.d ]; then
            printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
            chmod 755 /usr/sbin/policy-rc.d
            own_policy=1
        fi
        {
            export DEBIAN_FRONTEND=noninteractive
            apt-get -q -o DPkg::Lock::Timeout=300 update &&
            apt-get -q -y -o DPkg::Lock::Timeout=300 -o Dpkg::Use-Pty=0 install --no-install-recommends "$@"
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
}

# ---------------------------------------------------------------------------------------------
# our own processes

running() {   # pid: exists and is not a zombie (PID 1 here may reap exited daemons late)
    local st
    st=$(sed -n 's/^State:[[:space:]]*\(.\).*/\1/p' "/proc/$1/status" 2>/dev/null)
    [ -n "$st" ] && [ "$st" != Z ]
}

is_ours() {   # name pid: a live process of daemon NAME started from our state dir
    local name=$1 pid=$2 cmd
    [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] || return 1
    running "$pid" || return 1
    cmd=$(tr '\0' ' ' 2>/dev/null < "/proc/$pid/cmdline") || return 1
    case "$cmd" in *"$name"*"$DIR/"*) return 0 ;; esac
    return 1
}

our_pid() {   # name [pidfile-name]: the pid in $DIR/run/<pidfile-name>.pid if it is ours, else ""
    local pidfile=$DIR/run/${2:-$1}.pid pid
    [ -s "$pidfile" ] || return 0
    pid=$(tr -dc '0-9' < "$pidfile")
    if is_ours "$1" "$pid"; then echo "$pid"; fi
    return 0
}

record_pid() { echo "$1 $2" >> "$RECORD"; }

wait_for_pidfile() {   # name [pidfile-name]: wait until the daemon wrote its pid file and is alive
    local end=$(( $(date +%s) + TIMEOUT )) pid
    while [ "$(date +%s)" -lt "$end" ]; do
        pid=$(our_pid "$@")
        if [ -n "$pid" ]; then echo "$pid"; return 0; fi
        sleep 0.1
    done
    return 1
}

stop_pid() {   # name pid: SIGTERM, wait, SIGKILL as a last resort (only our own verified pid)
    local name=$1 pid=$2
    kill -TERM "$pid" 2>/dev/null || return 0
    for _ in $(seq 1 200); do
        running "$pid" || return 0
        sleep 0.1
    done
    log "$name (pid $pid) ignored SIGTERM for 20 s; sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.5
}

# start_daemon NAME CMD...: run CMD, a daemon that detaches and writes $DIR/run/NAME.pid (its
# output goes to $DIR/log/NAME.stderr, its log is $DIR/log/NAME.log), wait until it is up and
# record it; sets pid (the caller's local)
start_daemon() {
    local name=$1
    shift
    rm -f "$DIR/run/$name.pid"
    "$@" < /dev/null >> "$DIR/log/$name.stderr" 2>&1 9>&- \
        || { show_log_tail "$DIR/log/$name.stderr" "$DIR/log/$name.log"; die "$name failed to start"; }
    pid=$(wait_for_pidfile "$name") \
        || { show_log_tail "$DIR/log/$name.stderr" "$DIR/log/$name.log"; die "$name did not come up"; }
    record_pid "$name" "$pid"
}

port_busy() {  # port: true when something accepts TCP connections on 127.0.0.1:PORT
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

show_log_tail() {   # file...: the last lines of each non-empty one, to stderr
    local f
    for f in "$@"; do
        [ -s "$f" ] || continue
        log "---- last lines of $f"
        tail -n 20 "$f" >&2
    done
}

# ---------------------------------------------------------------------------------------------
# starting

make_state_dirs() {   # etc state spool log run (0755) and munge (0700) under $DIR; $RECORD
    mkdir -p "$DIR"/etc "$DIR"/state "$DIR"/spool "$DIR"/log "$DIR"/run "$DIR"/munge
    chmod 755 "$DIR" "$DIR"/etc "$DIR"/state "$DIR"/spool "$DIR"/log "$DIR"/run
    chmod 700 "$DIR"/munge
    touch "$RECORD"
}

munge_ok() { munge -S "$SOCK" -n 2>/dev/null | unmunge -S "$SOCK" >/dev/null 2>&1; }

# start_munged: a private key and socket and our own munged (never the system's /run/munge one);
# one already running from this state dir is kept when it answers
start_munged() {
    local pid ok=0
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
    pid=$(our_pid munged)
    if [ -n "$pid" ] && munge_ok; then
        log "munged already running (pid $pid)"
        return 0
    fi
    if [ -n "$pid" ]; then log "munged (pid $pid) does not answer; restarting it"; stop_pid munged "$pid"; fi
    start_daemon munged munged --key-file="$DIR/munge/munge.key" --socket="$SOCK" \
        --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
        --seed-file="$DIR/munge/munged.seed"
    for _ in $(seq 1 50); do if munge_ok; then ok=1; break; fi; sleep 0.1; done
    [ "$ok" = 1 ] || { show_log_tail "$DIR/log/munged.log"; die "munged (pid $pid) does not encode/decode credentials"; }
    log "munged started (pid $pid, socket $SOCK)"
}

cgroup_v1_usable() {   # the cgroup v1 controllers Slurm's cgroup plugins need, writable
    local c t
    [ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" != cgroup2fs ] || return 1
    for c in memory freezer cpuset cpuacct; do
        [ "$(stat -fc %T "/sys/fs/cgroup/$c" 2>/dev/null)" = cgroupfs ] || return 1
    done
    t=/sys/fs/cgroup/memory/$PROG-probe.$$
    mkdir "$t" 2>/dev/null || return 1
    rmdir "$t"
}

# choose_mode VAR: sets mode, cgroup or none, from the script's CGROUP_MODE (auto | yes | no,
# from the environment variable VAR); auto takes none where cgroup mode failed its smoke test
# before (etc/cgroup-failed)
choose_mode() {
    case "$CGROUP_MODE" in
        yes) mode=cgroup; cgroup_v1_usable || die "$1=yes but cgroup v1 (memory, freezer, cpuset, cpuacct) is not usable here" ;;
        no)  mode=none ;;
        auto)
            if [ -e "$DIR/etc/cgroup-failed" ]; then
                mode=none
                log "cgroup mode failed here before ($DIR/etc/cgroup-failed); using linuxproc (--fresh retries)"
            elif cgroup_v1_usable; then mode=cgroup
            else mode=none; fi ;;
    esac
}

# conf_common MODE SLURMD_SUFFIX: the slurm.conf lines both clusters share, from AuthType to the
# scheduler (with SOCK, CRED_EXPIRE, def_mem, KILLWAIT, MIN_JOB_AGE); slurmd's spool dir, pid file
# and log get SLURMD_SUFFIX ("" or "-%n", %n the node's name)
# shellcheck disable=SC2153,SC2154  # the sourcing script's settings
conf_common() {
    local mode=$1 sfx=$2
    echo "AuthType=auth/munge"
    echo "CredType=cred/munge"
    echo "AuthInfo=socket=$SOCK,cred_expire=$CRED_EXPIRE"
    echo "SlurmUser=root"
    echo "SlurmdUser=root"
    echo "StateSaveLocation=$DIR/state"
    echo "SlurmdSpoolDir=$DIR/spool${sfx:+/${sfx#-}}"
    echo "SlurmctldPidFile=$DIR/run/slurmctld.pid"
    echo "SlurmdPidFile=$DIR/run/slurmd$sfx.pid"
    echo "SlurmctldLogFile=$DIR/log/slurmctld.log"
    echo "SlurmdLogFile=$DIR/log/slurmd$sfx.log"
    echo "SlurmctldDebug=info"
    echo "SlurmdDebug=info"
    echo "MailProg=/bin/true"
    echo "MpiDefault=none"
    echo "SwitchType=switch/none"
    if [ "$mode" = cgroup ]; then
        echo "ProctrackType=proctrack/cgroup"
        # task/cgroup without task/affinity: the test nodes may declare more CPUs than the machine
        # has (start-multinode-slurm.sh: four on two), and task/affinity's automatic binding folds
        # the declared cores onto the real ones, so a job given cores 1 and 3 of a two-CPU machine
        # gets CPU 1 twice and its step fails to launch ("Unable to layout tasks on given cpus").
        # No test binds tasks to CPUs; memory constraint and process tracking are task/cgroup's.
        echo "TaskPlugin=task/cgroup"
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
}

# commit_config: move $CONF.new and $DIR/etc/cgroup.conf.new (when there is one; else no
# cgroup.conf) into place; true when either changed
commit_config() {
    local changed=1
    if cmp -s "$CONF.new" "$CONF" && {
           { [ ! -e "$DIR/etc/cgroup.conf.new" ] && [ ! -e "$DIR/etc/cgroup.conf" ]; } ||
           cmp -s "$DIR/etc/cgroup.conf.new" "$DIR/etc/cgroup.conf"; }; then
        changed=0
    fi
    mv -f "$CONF.new" "$CONF"
    if [ -e "$DIR/etc/cgroup.conf.new" ]; then mv -f "$DIR/etc/cgroup.conf.new" "$DIR/etc/cgroup.conf"
    else rm -f "$DIR/etc/cgroup.conf"; fi
    chmod 644 "$CONF"
    [ "$changed" = 1 ]
}

# start_slurmctld PORT_HINT [WHERE]: our slurmctld (unless it runs), then wait until it answers
# `scontrol ping`; PORT_HINT ends the message when $CTLD_PORT is taken, WHERE the started line
start_slurmctld() {
    local pid end
    export SLURM_CONF=$CONF
    pid=$(our_pid slurmctld)
    if [ -n "$pid" ]; then
        log "slurmctld already running (pid $pid)"
    else
        ! port_busy "$CTLD_PORT" || die "port $CTLD_PORT is taken by another program$1"
        start_daemon slurmctld slurmctld -f "$CONF"
        log "slurmctld started (pid $pid${2:+, $2})"
    fi
    end=$(( $(date +%s) + TIMEOUT ))
    until timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; do
        [ "$(date +%s)" -lt "$end" ] || { show_log_tail "$DIR/log/slurmctld.log"; die "slurmctld does not answer 'scontrol ping' after $TIMEOUT s"; }
        [ -n "$(our_pid slurmctld)" ] || { show_log_tail "$DIR/log/slurmctld.stderr" "$DIR/log/slurmctld.log"; die "slurmctld exited"; }
        sleep 0.2
    done
}

# start_checked SLURMD_LOGS: start_slurm, then smoke_test (the script's own functions); in
# CGROUP_MODE=auto a cgroup mode that fails the smoke test is recorded in etc/cgroup-failed and
# the cluster restarts without cgroups (write_config none, stop_slurm_daemons, start_slurm).
# SLURMD_LOGS names slurmd's logs in messages. Sets mode.
start_checked() {
    local logs=$1 f
    start_slurm
    smoke_test && return 0
    for f in $logs; do show_log_tail "$f"; done
    if [ "$mode" = cgroup ] && [ "$CGROUP_MODE" = auto ]; then
        log "falling back to proctrack/linuxproc without cgroups"
        date > "$DIR/etc/cgroup-failed"
        mode=none
        write_config none || true
        stop_slurm_daemons
        start_slurm
        smoke_test || die "smoke test failed without cgroups too; see $logs"
    else
        die "smoke test failed; see $logs and $DIR/log/slurmctld.log"
    fi
}

# ---------------------------------------------------------------------------------------------
# stopping

# parse_stop_args "$@": --purge (sets PURGE=1), -h/--help
# shellcheck disable=SC2034  # PURGE is the stop script's
parse_stop_args() {
    PURGE=0
    while [ $# -gt 0 ]; do
        case "$1" in
            --purge) PURGE=1 ;;
            -h|--help) usage; exit 0 ;;
            *) usage; die "unknown argument: $1" ;;
        esac
        shift
    done
}

# begin_stop: as root, with the state dir's lock; exits 0 when there is no state dir
begin_stop() {
    [ "$(id -u)" -eq 0 ] || die "must run as root; try: sudo bash $0"
    if [ ! -d "$DIR" ]; then
        log "nothing to stop: $DIR does not exist"
        exit 0
    fi
    lock_state_dir
}

# pids_of NAME: live pids of our daemon NAME, from $RECORD and the pid files NAME.pid, NAME-*.pid
pids_of() {
    local name=$1 p f seen=" "
    {
        [ -f "$RECORD" ] && awk -v n="$name" '$1 == n { print $2 }' "$RECORD"
        for f in "$DIR/run/$name.pid" "$DIR/run/$name"-*.pid; do
            [ -s "$f" ] && { tr -dc '0-9' < "$f"; echo; }
        done
    } 2>/dev/null | while read -r p; do
        [ -n "$p" ] || continue
        case "$seen" in *" $p "*) continue ;; esac
        seen="$seen$p "
        if is_ours "$name" "$p"; then echo "$p"; fi
    done
}

# stop_daemon NAME: SIGTERM to every pid of NAME, then SIGKILL to any still there after 20 s;
# false when one could not be stopped. Counts them in stopped.
stop_daemon() {
    local name=$1 pid left=0 pids
    pids=$(pids_of "$name")
    for pid in $pids; do
        stopped=$((stopped + 1))
        log "stopping $name (pid $pid)"
        kill -TERM "$pid" 2>/dev/null
    done
    for pid in $pids; do
        for _ in $(seq 1 200); do is_ours "$name" "$pid" || break; sleep 0.1; done
        if is_ours "$name" "$pid"; then
            log "$name (pid $pid) still running 20 s after SIGTERM; sending SIGKILL"
            kill -KILL "$pid" 2>/dev/null
            sleep 0.5
        fi
        if is_ours "$name" "$pid"; then log "could not stop $name (pid $pid)"; left=1; fi
    done
    return "$left"
}

# cancel_jobs: cancel the cluster's jobs, so that Slurm ends their processes (SIGTERM, KillWait,
# SIGKILL), and wait until the queue is empty; false when jobs are left
cancel_jobs() {
    local jobs killwait end pending left
    export SLURM_CONF=$CONF
    jobs=$(timeout 20 squeue -h -o '%A' 2>/dev/null | sort -u | tr '\n' ' ')
    [ -n "${jobs// /}" ] || return 0
    log "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    timeout 20 scancel $jobs 2>/dev/null
    killwait=$(sed -n 's/^KillWait=\([0-9]*\).*/\1/p' "$CONF" | head -n1)
    end=$(( $(date +%s) + ${killwait:-30} + 30 ))
    while [ "$(date +%s)" -lt "$end" ]; do
        [ -z "$(timeout 20 squeue -h -o '%A' 2>/dev/null)" ] && break
        # a job that requeues itself on SIGTERM (gpuguard with slurm.requeue_on: [SIGTERM])
        # comes back PENDING: cancel it again, which removes a pending job at once
        pending=$(timeout 20 squeue -h -t PENDING -o '%A' 2>/dev/null | sort -u | tr '\n' ' ')
        # shellcheck disable=SC2086
        [ -n "${pending// /}" ] && timeout 20 scancel $pending 2>/dev/null
        sleep 0.3
    done
    left=$(timeout 20 squeue -h -o '%A %T' 2>/dev/null | tr '\n' ';')
    if [ -n "$left" ]; then log "jobs still not finished: $left"; return 1; fi
}

# remove_cgroup_dirs NODE...: the empty cgroup v1 directories slurmd made in cgroup mode,
# slurm_<node> (rmdir fails on any that still holds a process, so nothing in use is touched)
remove_cgroup_dirs() {
    local node c
    for node in "$@"; do
        for c in /sys/fs/cgroup/*/"slurm_$node"; do
            [ -d "$c" ] || continue
            find "$c" -depth -type d -exec rmdir {} \; 2>/dev/null
        done
    done
}

# conf_nodes: the node names of $CONF
conf_nodes() { sed -n 's/^NodeName=\([^ ]*\).*/\1/p' "$CONF" 2>/dev/null; }

# forget_daemons: empty $RECORD and remove the daemons' pid files, once they have all stopped
forget_daemons() {
    : > "$RECORD"
    rm -f "$DIR"/run/*.pid
}

# purge_state_dir: delete the state dir and its lock file
purge_state_dir() {
    rm -rf "$DIR"
    rm -f "$DIR.lock"
}
