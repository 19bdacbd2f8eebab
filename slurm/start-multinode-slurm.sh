#!/usr/bin/env bash
# start-multinode-slurm.sh: a real multi-node Slurm cluster on one machine, for gpuguard's multi-node
# tests (slurm/multinode/) and for trying gpuguard across nodes.
#
# Every node is a network namespace with its own address on a private /24 (a bridge on the host side,
# one veth pair per node, made by this script), its own host name (a UTS namespace), its own
# processes (a PID namespace with its own /proc: a process on one node cannot see or signal another
# node's, as on real machines) and its own slurmd (`slurmd -N NODE`, NodeAddr = its address). One slurmctld and one munged run on the host, on
# the host's side of the bridge. The file system is shared by all nodes, as a cluster file system
# would be. There is no route out of a node: traffic goes only between the nodes and the host (no
# NAT, no forwarding). Installs the Debian packages if they are missing. Needs root. See docs/slurm.md
# ("A multi-node Slurm on this machine"); stop-multinode-slurm.sh takes it all away again.
#
# Progress goes to stderr. On success stdout gets exactly one line,
#     export SLURM_CONF=<state dir>/etc/slurm.conf
# so that `eval "$(bash slurm/start-multinode-slurm.sh)"` sets up the calling shell.
#
# Options:
#   --nodes N      number of nodes [2] (also MN_SLURM_NODES)
#   --fresh        stop this cluster (if running) and wipe its state dir first
#   --no-install   fail instead of installing missing packages
#   -h, --help     this text
#
# Environment (all optional):
#   MN_SLURM_DIR          state dir                                  [/var/tmp/gpuguard-mn-slurm]
#   MN_SLURM_PREFIX       names of everything made on the host: namespaces <prefix>-1.., bridge
#                         <prefix>br, host-side veths <prefix>h1.., nodes and host names
#                         <prefix>n1.. (lower-case letters and digits, at most 10)  [ggmn]
#                         Two clusters on one machine need different prefixes, subnets, ports
#                         and state dirs (the tests use gm<port>).
#   MN_SLURM_SUBNET       the private network, a /24: A.B.C.0/24; the host side is A.B.C.1, node K
#                         is A.B.C.(10+K)                                              [10.213.7.0/24]
#   MN_SLURM_CGROUP       auto | yes | no                            [auto]
#                         auto: proctrack/task cgroup plugins when cgroup v1 is usable and they pass
#                         the smoke test, else proctrack/linuxproc
#   MN_SLURM_CTLD_PORT    SlurmctldPort, on the host                 [6827]
#   MN_SLURM_SLURMD_PORT  SlurmdPort, inside each node's namespace   [6818]
#   MN_SLURM_CPUS         CPUs each node declares (more than real is allowed)  [4]
#   MN_SLURM_TIMEOUT      seconds to wait for each daemon / the nodes  [90]
#   MN_SLURM_KILLWAIT     KillWait                                   [10]
#   MN_SLURM_CRED_EXPIRE  AuthInfo cred_expire (a requeued job waits this + 1 s)  [10]
#   MN_SLURM_MIN_JOB_AGE  MinJobAge                                  [3600]
#
# Running a command on node K:  nsenter -t "$(cat <dir>/run/node-init-<prefix>nK.pid)" -n -u -m -p CMD
# (the node's network, host name, /etc/hosts and processes), or `ip netns exec <prefix>-K CMD`
# (its network and /etc/hosts from /etc/netns/<prefix>-K/; the machine's host name and processes).

set -euo pipefail
umask 022

PROG=start-multinode-slurm
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib/slurm-common.sh
. "$HERE/lib/slurm-common.sh"

FRESH=0
INSTALL=1
NODES=${MN_SLURM_NODES:-2}
while [ $# -gt 0 ]; do
    case "$1" in
        --nodes) [ $# -ge 2 ] || die "--nodes needs a number"; NODES=$2; shift ;;
        --nodes=*) NODES=${1#--nodes=} ;;
        --fresh) FRESH=1 ;;
        --no-install) INSTALL=0 ;;
        -h|--help) usage; exit 0 ;;
        *) usage; die "unknown argument: $1" ;;
    esac
    shift
done

DIR=$(state_dir MN_SLURM_DIR /var/tmp/gpuguard-mn-slurm)
PREFIX=${MN_SLURM_PREFIX:-ggmn}
SUBNET=${MN_SLURM_SUBNET:-10.213.7.0/24}
CGROUP_MODE=${MN_SLURM_CGROUP:-auto}
CTLD_PORT=${MN_SLURM_CTLD_PORT:-6827}
SLURMD_PORT=${MN_SLURM_SLURMD_PORT:-6818}
CPUS=${MN_SLURM_CPUS:-4}
TIMEOUT=${MN_SLURM_TIMEOUT:-90}
KILLWAIT=${MN_SLURM_KILLWAIT:-10}
CRED_EXPIRE=${MN_SLURM_CRED_EXPIRE:-10}
MIN_JOB_AGE=${MN_SLURM_MIN_JOB_AGE:-3600}

case "$NODES" in ''|*[!0-9]*) die "--nodes must be a number from 1 to 200 (got '$NODES')" ;; esac
[ "$NODES" -ge 1 ] && [ "$NODES" -le 200 ] || die "--nodes must be a number from 1 to 200 (got '$NODES')"
case "$PREFIX" in [a-z]*) ;; *) die "MN_SLURM_PREFIX must start with a lower-case letter (got '$PREFIX')" ;; esac
case "$PREFIX" in *[!a-z0-9]*) die "MN_SLURM_PREFIX must be lower-case letters and digits (got '$PREFIX')" ;; esac
[ "${#PREFIX}" -le 10 ] || die "MN_SLURM_PREFIX must be at most 10 characters (interface names are limited to 15; got '$PREFIX')"
case "$CGROUP_MODE" in auto|yes|no) ;; *) die "MN_SLURM_CGROUP must be auto, yes or no" ;; esac
NET=${SUBNET%/24}
case "$SUBNET" in */24) ;; *) die "MN_SLURM_SUBNET must be a /24 written A.B.C.0/24 (got '$SUBNET')" ;; esac
case "$NET" in *.0) NET=${NET%.0} ;; *) die "MN_SLURM_SUBNET must be a /24 written A.B.C.0/24 (got '$SUBNET')" ;; esac
echo "$NET" | grep -Eq '^(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){2}$' \
    || die "MN_SLURM_SUBNET must be a /24 written A.B.C.0/24 (got '$SUBNET')"

CONF=$DIR/etc/slurm.conf
SOCK=$DIR/run/munge.socket
RECORD=$DIR/run/started.pids   # "name pid" lines for every daemon this script started
CREATED=$DIR/run/created       # "kind name" lines for everything made on the host, written BEFORE it is made
BRIDGE=${PREFIX}br
HOST_ADDR=$NET.1
CTLD_NAME=${PREFIX}ctl

ns_of()    { echo "$PREFIX-$1"; }       # network namespace of node K
node_of()  { echo "${PREFIX}n$1"; }     # node name = host name of node K
addr_of()  { echo "$NET.$((10 + $1))"; }
hveth_of() { echo "${PREFIX}h$1"; }     # host end of node K's veth pair (the node's end is eth0)

[ "$(uname -s)" = Linux ] || die "Linux only"
[ "$(id -u)" -eq 0 ] || die "must run as root (network namespaces; slurmd has to start jobs as their users); try: sudo bash $0"

T0=$(now)

# ---------------------------------------------------------------------------------------------
# 0. one start/stop at a time
lock_state_dir

# ---------------------------------------------------------------------------------------------
# 1. packages (the same as start-local-slurm.sh, plus iproute2 and util-linux for the namespaces)
install_packages "slurmctld slurmd slurmstepd sinfo squeue sbatch srun scontrol scancel munged munge unmunge ip unshare nsenter flock" \
    slurmctld slurmd slurm-client munge iproute2 util-linux

created() { echo "$1 $2" >> "$CREATED"; }   # before making it, so that a crash leaves a record

stop_slurm_daemons() {
    local p k
    for k in $(seq 1 "$NODES"); do
        p=$(our_pid node-init "node-init-$(node_of "$k")")
        [ -z "$p" ] || { log "stopping node $(node_of "$k") (its init, pid $p, stops its slurmd)"; stop_pid node-init "$p"; }
    done
    p=$(our_pid slurmctld); [ -z "$p" ] || { log "stopping slurmctld (pid $p)"; stop_pid slurmctld "$p"; }
}

# ---------------------------------------------------------------------------------------------
# 2. --fresh: stop everything of this cluster and wipe its state
if [ "$FRESH" = 1 ] && [ -d "$DIR" ]; then
    log "--fresh: stopping this cluster and removing $DIR"
    flock -u 9
    MN_SLURM_DIR=$DIR bash "$HERE/stop-multinode-slurm.sh" --purge >&2 \
        || die "stop-multinode-slurm.sh could not stop the cluster of $DIR (see above)"
    exec 9>"$DIR.lock"
    flock -w 300 9 || die "could not re-take $DIR.lock"
fi

make_state_dirs
touch "$CREATED"

if [ -z "$(our_pid slurmctld)" ] && port_busy "$CTLD_PORT"; then
    die "port $CTLD_PORT is taken by another program (another cluster's slurmctld?); set MN_SLURM_CTLD_PORT"
fi

# ---------------------------------------------------------------------------------------------
# 3. the network: a bridge with the host's address, one namespace + veth pair per node
TN=$(now)
if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
    # the subnet must be unused on this machine (a route or address in it would clash)
    clash=$( { ip -4 -o addr show | awk -v n="$NET." 'index($4, n) == 1 { print $2 " " $4 }'
               ip -4 route show match "$NET.0/24" | grep -v '^default' ; } 2>/dev/null || true)
    [ -z "$clash" ] || die "the subnet $NET.0/24 is already in use on this machine ($(echo "$clash" | tr '\n' ';')); set MN_SLURM_SUBNET to a free /24"
    created link "$BRIDGE"
    ip link add "$BRIDGE" type bridge
    ip addr add "$HOST_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
fi
[ -n "$(ip -4 -o addr show dev "$BRIDGE" | awk -v a="$HOST_ADDR/24" '$4 == a')" ] \
    || die "bridge $BRIDGE exists without the address $HOST_ADDR/24 (another cluster with the same MN_SLURM_PREFIX?)"

hosts_file() {
    echo "# written by slurm/start-multinode-slurm.sh"
    echo "127.0.0.1 localhost"
    echo "$HOST_ADDR $CTLD_NAME"
    local k
    for k in $(seq 1 "$NODES"); do echo "$(addr_of "$k") $(node_of "$k")"; done
}
hosts_file > "$DIR/etc/hosts"

for k in $(seq 1 "$NODES"); do
    ns=$(ns_of "$k"); hv=$(hveth_of "$k")
    if [ ! -e "/run/netns/$ns" ]; then
        created netns "$ns"
        ip netns add "$ns"
    fi
    # /etc/netns/NS/hosts: `ip netns exec NS` bind-mounts it over /etc/hosts
    if [ ! -d "/etc/netns/$ns" ]; then
        [ -d /etc/netns ] || { created dir /etc/netns; mkdir -p /etc/netns; }
        created dir "/etc/netns/$ns"
        mkdir -p "/etc/netns/$ns"
    fi
    cp "$DIR/etc/hosts" "/etc/netns/$ns/hosts"
    if ! ip link show "$hv" >/dev/null 2>&1; then
        created link "$hv"
        ip link add "$hv" type veth peer name "${PREFIX}p$k"
        ip link set "${PREFIX}p$k" netns "$ns"
        ip -n "$ns" link set "${PREFIX}p$k" name eth0
        ip link set "$hv" master "$BRIDGE"
        ip link set "$hv" up
        ip -n "$ns" addr add "$(addr_of "$k")/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
    fi
done
log "network: bridge $BRIDGE $HOST_ADDR/24, nodes $(for k in $(seq 1 "$NODES"); do printf '%s=%s ' "$(node_of "$k")" "$(addr_of "$k")"; done)($(since "$TN") s)"

# ---------------------------------------------------------------------------------------------
# 4. munge: private key, private socket (a file-system socket: reachable from every namespace)
start_munged

# ---------------------------------------------------------------------------------------------
# 5. configuration
hw=$(env -u SLURM_CONF slurmd -C 2>/dev/null | head -n1 | sed -e 's/^NodeName=[^ ]* *//')
real_mem=$(printf '%s\n' "$hw" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
[ -n "$real_mem" ] || die "could not read the memory from 'slurmd -C' (got: '$hw')"
# the nodes share the machine: each gets an equal part of its memory
node_mem=$(( real_mem / NODES ))
def_mem=$(( node_mem / CPUS ))

write_config() {   # $1 = cgroup | none; returns 0 if the configuration changed
    local mode=$1 k nodes
    nodes="$(node_of 1)"
    [ "$NODES" -eq 1 ] || nodes="${PREFIX}n[1-$NODES]"
    {
        echo "# written by slurm/start-multinode-slurm.sh; edits are overwritten on the next start"
        echo "# mode: $mode"
        echo "ClusterName=gpuguardmn"
        # "localhost" makes the host's slurmctld the controller whatever the machine is called;
        # the nodes reach it at the host's address on the bridge
        echo "SlurmctldHost=localhost($HOST_ADDR)"
        echo "SlurmctldPort=$CTLD_PORT"
        echo "SlurmdPort=$SLURMD_PORT"
        conf_common "$mode" "-%n"
        echo "SlurmdParameters=config_overrides"
        for k in $(seq 1 "$NODES"); do
            echo "NodeName=$(node_of "$k") NodeAddr=$(addr_of "$k") NodeHostname=$(node_of "$k") CPUs=$CPUS RealMemory=$node_mem State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP"
    } > "$CONF.new"
    if [ "$mode" = cgroup ]; then
        {
            echo "# written by slurm/start-multinode-slurm.sh"
            echo "CgroupPlugin=cgroup/v1"
            echo "CgroupMountpoint=/sys/fs/cgroup"
            echo "ConstrainCores=no"
            echo "ConstrainRAMSpace=yes"
            echo "ConstrainDevices=no"
        } > "$DIR/etc/cgroup.conf.new"
    else
        rm -f "$DIR/etc/cgroup.conf.new"
    fi
    commit_config
}

states() { timeout 20 sinfo -h -N -o '%N %T' 2>/dev/null || true; }

# pid 1 of a node's PID namespace: sets the node's host name and /etc/hosts, runs its slurmd in the
# foreground, reaps what is re-parented to it (slurmstepd), and passes SIGTERM on to slurmd. When it
# exits, the kernel ends every process left on the node, as a node's power going off would.
write_node_init() {
    cat > "$DIR/etc/node-init.sh" <<'INIT'
#!/bin/bash
# node-init.sh NODE HOSTS CONF: pid 1 of a node of start-multinode-slurm.sh's cluster
node=$1 hosts=$2 conf=$3
mount --bind "$hosts" /etc/hosts || exit 1
hostname "$node" || exit 1
sd=
trap '[ -n "$sd" ] && kill -TERM "$sd" 2>/dev/null' TERM INT
slurmd -D -f "$conf" -N "$node" < /dev/null &
sd=$!
while [ -e "/proc/$sd" ]; do wait "$sd"; done
INIT
    chmod 755 "$DIR/etc/node-init.sh"
}

start_slurmd() {   # K: node K's init (its namespaces) and slurmd
    local k=$1 node ns pid u end
    node=$(node_of "$k"); ns=$(ns_of "$k")
    pid=$(our_pid node-init "node-init-$node")
    if [ -n "$pid" ]; then log "node $node already running (init pid $pid)"; return 0; fi
    rm -f "$DIR/run/slurmd-$node.pid" "$DIR/run/node-init-$node.pid"
    mkdir -p "$DIR/spool/$node"
    # the node's network (nsenter), host name (UTS), /etc/hosts (mount; /sys stays mounted, unlike
    # under `ip netns exec`, so cgroups work) and processes (PID namespace, its own /proc)
    nsenter --net="/run/netns/$ns" -- \
        unshare --uts --mount --pid --fork --mount-proc --propagation private -- \
        /bin/bash "$DIR/etc/node-init.sh" "$node" "/etc/netns/$ns/hosts" "$CONF" \
        < /dev/null >> "$DIR/log/slurmd-$node.stderr" 2>&1 9>&- &
    u=$!
    # the init is unshare's one child
    end=$(( $(date +%s) + TIMEOUT ))
    pid=""
    while [ -z "$pid" ] && [ "$(date +%s)" -lt "$end" ]; do
        pid=$(cat "/proc/$u/task/$u/children" 2>/dev/null | awk '{ print $1 }')
        [ -n "$pid" ] || { running "$u" || break; sleep 0.05; }
    done
    [ -n "$pid" ] || { show_log_tail "$DIR/log/slurmd-$node.stderr"; die "node $node's init did not start"; }
    echo "$pid" > "$DIR/run/node-init-$node.pid"
    record_pid node-init "$pid"
    # slurmd writes its pid file (the pid inside the node) once it is up
    until [ -s "$DIR/run/slurmd-$node.pid" ]; do
        [ "$(date +%s)" -lt "$end" ] && running "$pid" \
            || { show_log_tail "$DIR/log/slurmd-$node.stderr" "$DIR/log/slurmd-$node.log"; die "slurmd of $node did not come up"; }
        sleep 0.05
    done
    log "node $node started (init pid $pid, $(addr_of "$k"))"
}

start_slurm() {
    local end st k resumed=0 bad
    start_slurmctld "; set MN_SLURM_CTLD_PORT" "$HOST_ADDR:$CTLD_PORT"
    for k in $(seq 1 "$NODES"); do start_slurmd "$k"; done

    end=$(( $(date +%s) + TIMEOUT ))
    while :; do
        st=$(states)
        bad=$(echo "$st" | awk '$2 !~ /^(idle|mixed|allocated|completing)$/ { print }')
        [ -n "$st" ] && [ -z "$bad" ] && [ "$(echo "$st" | wc -l)" -eq "$NODES" ] && break
        if echo "$bad" | grep -Eq ' (drain|down|fail)' && [ "$resumed" -lt 3 ]; then
            log "nodes not up: $(echo "$bad" | tr '\n' ';') resuming them"
            for n in $(echo "$bad" | awk '$2 ~ /^(drain|down|fail)/ { print $1 }'); do
                timeout 10 scontrol update NodeName="$n" State=RESUME >/dev/null 2>&1 || true
            done
            resumed=$((resumed + 1))
        fi
        if [ "$(date +%s)" -ge "$end" ]; then
            for k in $(seq 1 "$NODES"); do show_log_tail "$DIR/log/slurmd-$(node_of "$k").log"; done
            show_log_tail "$DIR/log/slurmctld.log"
            die "nodes not idle after $TIMEOUT s: $(echo "${bad:-$st}" | tr '\n' ';')"
        fi
        for k in $(seq 1 "$NODES"); do
            [ -n "$(our_pid node-init "node-init-$(node_of "$k")")" ] \
                || { show_log_tail "$DIR/log/slurmd-$(node_of "$k").stderr" "$DIR/log/slurmd-$(node_of "$k").log"; die "node $(node_of "$k") (its slurmd) exited"; }
        done
        sleep 0.2
    done
    log "nodes: $(echo "$st" | tr '\n' ' ')"
}

smoke_test() {   # srun on every node: each must print its own host name
    local out want k
    if [ -n "$(timeout 20 squeue -h -o %A 2>/dev/null)" ]; then log "jobs from before are in the queue; smoke test skipped"; return 0; fi
    out=$(cd "$DIR" && timeout 60 srun --quiet -N"$NODES" --ntasks-per-node=1 -t 1 --job-name=mn-slurm-smoke \
              --label hostname < /dev/null 2>&1) || { log "smoke test failed: $out"; return 1; }
    for k in $(seq 1 "$NODES"); do
        want="$((k - 1)): $(node_of "$k")"
        echo "$out" | grep -qxF "$want" || { log "smoke test: no '$want' in: $(echo "$out" | tr '\n' ';')"; return 1; }
    done
    log "smoke test passed: srun -N$NODES --label hostname: $(echo "$out" | tr '\n' ' ')"
}

# ---------------------------------------------------------------------------------------------
# 6. choose the process tracking mode, write config, start
choose_mode MN_SLURM_CGROUP

write_node_init
if write_config "$mode"; then
    if [ -n "$(our_pid slurmctld)" ]; then log "configuration changed; restarting the daemons"; stop_slurm_daemons; fi
fi
log "config $CONF (mode: $mode; $NODES nodes, each CPUs=$CPUS RealMemory=$node_mem)"
TS=$(now)
start_checked "$DIR/log/slurmd-*.log"

echo "export SLURM_CONF=$CONF" > "$DIR/env.sh"
cat >&2 <<EOF
[$PROG] $NODES-node Slurm cluster is up after $(since "$T0") s (network and daemons; daemons and smoke test $(since "$TS") s; mode: $mode)
  use it:   export SLURM_CONF=$CONF      (or: source $DIR/env.sh)
            sinfo; srun -N$NODES --label hostname; sbatch -N$NODES --wrap 'srun hostname'
  node K:   nsenter -t \$(cat $DIR/run/node-init-${PREFIX}nK.pid) -n -u -m -p COMMAND
  logs:     $DIR/log/{slurmctld,slurmd-${PREFIX}n*,munged}.log
  stop:     MN_SLURM_DIR=$DIR bash $HERE/stop-multinode-slurm.sh   (add --purge to also delete $DIR)
EOF
echo "export SLURM_CONF=$CONF"
