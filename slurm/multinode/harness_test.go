package multinode_test

// The harness of the multi-node tests: a real Slurm of several nodes on this
// machine, started by slurm/start-multinode-slurm.sh (every node a network
// namespace with its own address, host name and slurmd; one slurmctld on the
// host), and what the tests need to use it.
//
// TestMain starts a private cluster (its own state directory under the temp
// dir, a free slurmctld port P, names gmP..., a /24 of its own under 10.213/16,
// so it shares nothing with another cluster on the machine, the one-node
// cluster of slurm/ included), builds gpuguard once, runs the tests, checks
// that no process is left on any node, and stops the cluster with
// stop-multinode-slurm.sh --purge (which removes its namespaces, links and
// state). It needs root; when the Slurm packages are missing the start script
// installs them with apt. Without root the tests skip, saying why.
// Environment:
//
//	GPUGUARD_SLURM=off        skip these tests
//	GPUGUARD_SLURM=require    fail, not skip, when they cannot run (CI; -short still skips)
//	GPUGUARD_MN_NODES=N       nodes of the cluster [2]
//
// Jobs run in t.TempDir() directories, which every node sees (the file system
// is shared, as a cluster file system is); every job a test submits is
// cancelled when the test ends if it is still in the queue.
//
// The harness the Slurm test packages share (TestMain's rules, submitting and
// waiting for jobs, a run directory's journal) is slurm/internal/slurmtest;
// this file adds what is specific to the nodes: onNode (a command inside node
// K's network, host name and /etc/hosts), cutLink (node K's link to the
// others down until the test ends), nodeProcs and jobProcs (the processes of
// a node, of a job, read from /proc).

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/slurm/internal/slurmtest"
)

// cl is the cluster the tests use.
var cl = struct {
	slurmtest.Cluster
	dir        string // the cluster's state dir
	slurmdPort string // SlurmdPort: every node's slurmd listens on it at its address
	nodes      []node // in Slurm's order: nodes[K] runs SLURM_NODEID=K of a job on all nodes
}{Cluster: slurmtest.Cluster{Name: "multi-node Slurm"}}

// node is one node of the cluster.
type node struct {
	name     string // Slurm's node name, also its host name
	addr     string // its address on the cluster's network
	netns    string // its network namespace (ip netns exec NETNS ...)
	hostVeth string // the host's end of its link
	init     int    // pid 1 of its PID namespace (host pid): nsenter -t PID enters the node
}

func TestMain(m *testing.M) {
	os.Exit(cl.Main(m, slurmtest.Setup{
		Root:      "../..",
		Short:     "-short: the multi-node Slurm tests submit real jobs (about a minute)",
		Start:     startCluster,
		Leftovers: leftovers,
	}))
}

// leftovers names the jobs still in the queue, or else the processes other
// than slurmd still on any node once the jobs' step daemons have had time to
// end (they end a moment after their job; every test cancels its jobs).
func leftovers() string {
	if out, err := cl.Command("", "squeue", "-h", "-o", "%A %T").CombinedOutput(); err == nil && len(bytes.TrimSpace(out)) > 0 {
		return "jobs still in the queue: " + string(out)
	}
	var left []proc
	for range 300 {
		left = nil
		for k := range cl.nodes {
			left = append(left, nodeProcs(k)...)
		}
		if len(left) == 0 {
			return ""
		}
		time.Sleep(100 * time.Millisecond) // nothing to wait on: the processes are not ours
	}
	var b strings.Builder
	for _, p := range left {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	return b.String()
}

// startCluster starts the private cluster and returns what stops it; code is
// non-zero when the tests cannot run although they should.
func startCluster() (stop func() error, code int) {
	if os.Geteuid() != 0 {
		cl.Skip = "not root: the tests start a private multi-node Slurm cluster (network namespaces, slurmd); run them as root"
		return nil, 0
	}
	for _, c := range []string{"bash", "ip", "nsenter", "unshare"} {
		if _, err := exec.LookPath(c); err != nil {
			cl.Skip = "no " + c + " to run slurm/start-multinode-slurm.sh"
			return nil, 0
		}
	}
	nodes := 2
	if s := os.Getenv("GPUGUARD_MN_NODES"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			fmt.Fprintf(os.Stderr, "GPUGUARD_MN_NODES=%q: want a number of nodes, 2 or more\n", s)
			return nil, 1
		}
		nodes = n
	}
	dir, err := os.MkdirTemp("", "gg-mn-slurm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, 1
	}
	ports, err := slurmtest.FreePorts(1)
	if err != nil {
		fmt.Fprintln(os.Stderr, "no free port for slurmctld:", err)
		return nil, 1
	}
	port := ports[0]
	base := append(os.Environ(),
		"MN_SLURM_DIR="+dir,
		fmt.Sprintf("MN_SLURM_PREFIX=gm%d", port),
		fmt.Sprintf("MN_SLURM_CTLD_PORT=%d", port),
		fmt.Sprintf("MN_SLURM_NODES=%d", nodes),
	)
	p := cl.Private("start-multinode-slurm.sh", "stop-multinode-slurm.sh", dir, base)
	// A /24 of 10.213/16 that no address or route of this machine is in.
	// Another cluster starting at the same moment may take the same one:
	// the start script then refuses it ("already in use"), and the next is
	// tried.
	third := port % 250
	var stderr string
	for try := 0; ; try++ {
		subnet := fmt.Sprintf("10.213.%d.0/24", (third+try*37)%250+1)
		p.Env = append(base[:len(base):len(base)], "MN_SLURM_SUBNET="+subnet)
		stderr, err = p.Start()
		if err == nil {
			break
		}
		if strings.Contains(stderr, "already in use on this machine") && try < 5 {
			continue
		}
		return p.Stop, p.Failed(stderr, err)
	}
	fmt.Fprintf(os.Stderr, "multi-node cluster: %s\n", slurmtest.LastLines(grepLines(stderr, "is up after"), 1))
	cl.dir = dir
	if err := setConf(filepath.Join(dir, "etc", "slurm.conf"), fmt.Sprintf("gm%d", port)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return p.Stop, 1
	}
	return p.Stop, 0
}

// setConf makes conf the tests' slurm.conf and reads the nodes from it
// (prefix: the names start-multinode-slurm.sh gives, MN_SLURM_PREFIX).
func setConf(conf, prefix string) error {
	text, err := cl.SetConf(conf)
	if err != nil {
		return err
	}
	cl.nodes = nil
	for _, line := range strings.Split(text, "\n") {
		if p, ok := strings.CutPrefix(line, "SlurmdPort="); ok {
			cl.slurmdPort = strings.TrimSpace(p)
		}
		rest, ok := strings.CutPrefix(line, "NodeName=")
		if !ok {
			continue
		}
		var n node
		n.name, _, _ = strings.Cut(rest, " ")
		for _, f := range strings.Fields(rest) {
			if a, ok := strings.CutPrefix(f, "NodeAddr="); ok {
				n.addr = a
			}
		}
		k := len(cl.nodes) + 1
		n.netns = fmt.Sprintf("%s-%d", prefix, k)
		n.hostVeth = fmt.Sprintf("%sh%d", prefix, k)
		if n.name != fmt.Sprintf("%sn%d", prefix, k) {
			return fmt.Errorf("%s: node %d is %q, want %sn%d (the names start-multinode-slurm.sh gives)", conf, k, n.name, prefix, k)
		}
		pidData, err := os.ReadFile(filepath.Join(cl.dir, "run", "node-init-"+n.name+".pid"))
		if err != nil {
			return fmt.Errorf("the init of node %s: %v", n.name, err)
		}
		if n.init, err = strconv.Atoi(strings.TrimSpace(string(pidData))); err != nil {
			return fmt.Errorf("the init pid file of node %s: %v", n.name, err)
		}
		cl.nodes = append(cl.nodes, n)
	}
	if len(cl.nodes) < 2 {
		return fmt.Errorf("%s names %d nodes, want 2 or more", conf, len(cl.nodes))
	}
	return nil
}

func grepLines(s, want string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, want) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// onNode is a command run on node k (0-based: SLURM_NODEID): inside its
// network, host name, mount (its /etc/hosts and /proc) and PID namespaces,
// so it sees what a job's process there sees, in dir.
func onNode(k int, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(cl.nodes[k].init), "-n", "-u", "-m", "-p", "--", name}, args...)...)
	cmd.Dir, cmd.Env = dir, cl.Env
	return cmd
}

// cutLink takes node k's link to the host and the other nodes down (its
// host-side veth), as a broken cable or switch port would; the link comes
// back when the test ends, or when the returned function is called.
func cutLink(t testing.TB, k int) (restore func()) {
	t.Helper()
	dev := cl.nodes[k].hostVeth
	if out, err := exec.Command("ip", "link", "set", dev, "down").CombinedOutput(); err != nil {
		t.Fatalf("ip link set %s down: %v %s", dev, err, out)
	}
	restore = sync.OnceFunc(func() {
		if out, err := exec.Command("ip", "link", "set", dev, "up").CombinedOutput(); err != nil {
			t.Errorf("ip link set %s up: %v %s", dev, err, out)
		}
	})
	t.Cleanup(restore)
	return restore
}

// workDir is a new job directory holding a copy of testdata/.
func workDir(t testing.TB) string {
	t.Helper()
	dir := slurmtest.JobDir(t)
	slurmtest.CopyDir(t, "testdata", dir)
	return dir
}

// ---------------------------------------------------------------------------
// Processes on the nodes

// proc is a process seen in /proc.
type proc struct {
	pid   int
	node  string // the node whose network namespace it is in ("" for the host)
	comm  string
	cmd   string
	jobID string // its SLURM_JOB_ID, "" when it has none
}

func (p proc) String() string {
	s := fmt.Sprintf("pid %d on %s: %s", p.pid, p.node, p.cmd)
	if p.jobID != "" {
		s += " (job " + p.jobID + ")"
	}
	return s
}

// nsInode is the inode of a namespace file: two processes share a network
// namespace when their /proc/PID/ns/net have the same one.
func nsInode(path string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// allProcs lists the live processes (zombies left out: they hold nothing)
// of the cluster's nodes, with their host pids, the nodes' own (each node's
// init, the unshare above it, its slurmd) left out.
func allProcs() []proc {
	byNS := map[uint64]string{}
	daemons := map[int]bool{}
	for _, n := range cl.nodes {
		if ino := nsInode("/run/netns/" + n.netns); ino != 0 {
			byNS[ino] = n.name
		}
		daemons[n.init] = true
		daemons[ppid(n.init)] = true
	}
	entries, _ := os.ReadDir("/proc")
	var out []proc
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || daemons[pid] {
			continue
		}
		nodeName, ok := byNS[nsInode(fmt.Sprintf("/proc/%d/ns/net", pid))]
		if !ok {
			continue
		}
		if st := procState(pid); st == "" || st == "Z" {
			continue
		}
		p := proc{pid: pid, node: nodeName}
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		p.comm = strings.TrimSpace(string(comm))
		if p.comm == "slurmd" && daemons[ppid(pid)] {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		p.cmd = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
		envData, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(envData), "\x00") {
			if v, ok := strings.CutPrefix(kv, "SLURM_JOB_ID="); ok {
				p.jobID = v
			}
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].pid < out[j].pid })
	return out
}

// ppid is the parent of pid (0 when it is gone).
func ppid(pid int) int {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// procState is the state letter of /proc/PID/stat ("" when it is gone).
func procState(pid int) string {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ""
	}
	i := bytes.LastIndexByte(data, ')')
	if i < 0 || i+2 >= len(data) {
		return ""
	}
	return string(data[i+2 : i+3])
}

// nodeProcs lists the live processes on node k other than its slurmd.
func nodeProcs(k int) []proc {
	var out []proc
	for _, p := range allProcs() {
		if p.node == cl.nodes[k].name {
			out = append(out, p)
		}
	}
	return out
}

// jobProcs lists the live processes of a job on every node (its step
// daemons, which carry no SLURM_JOB_ID, left out).
func jobProcs(jobID string) []proc {
	var out []proc
	for _, p := range allProcs() {
		if p.jobID == jobID {
			out = append(out, p)
		}
	}
	return out
}

// jobEnd waits, within the bound, for job id to end, and reads its output
// file, which is logged if the test fails (the wait included).
func jobEnd(t *testing.T, id, outFile string, within time.Duration) (info map[string]string, out string) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the job's output:\n%s", slurmtest.TryRead(outFile))
		}
	})
	info = cl.WaitEnd(t, id, within)
	return info, slurmtest.ReadFile(t, outFile)
}
