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
// Helpers for tests: onNode (a command inside node K's network, host name and
// /etc/hosts), cutLink (node K's link to the others down until the test ends),
// nodeProcs and jobProcs (the processes of a node, of a job, read from /proc),
// events, verdicts and attempt (a run directory's journal), submit, waitJob,
// waitEnd, waitFile, cancel.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cl is the cluster the tests use.
var cl struct {
	skip       string   // why the tests skip ("" when they run)
	root       string   // the repository
	dir        string   // the cluster's state dir
	conf       string   // slurm.conf
	env        []string // environment for Slurm commands
	gg         string   // the gpuguard binary
	cgroup     bool     // proctrack/cgroup
	slurmdPort string   // SlurmdPort: every node's slurmd listens on it at its address
	nodes      []node   // in Slurm's order: nodes[K] runs SLURM_NODEID=K of a job on all nodes
}

// node is one node of the cluster.
type node struct {
	name     string // Slurm's node name, also its host name
	addr     string // its address on the cluster's network
	netns    string // its network namespace (ip netns exec NETNS ...)
	hostVeth string // the host's end of its link
	init     int    // pid 1 of its PID namespace (host pid): nsenter -t PID enters the node
}

func TestMain(m *testing.M) { os.Exit(mainTest(m)) }

func mainTest(m *testing.M) (code int) {
	flag.Parse()
	root, err := filepath.Abs("../..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cl.root = root
	switch {
	case testing.Short():
		cl.skip = "-short: the multi-node Slurm tests submit real jobs (about a minute)"
	case os.Getenv("GPUGUARD_SLURM") == "off":
		cl.skip = "GPUGUARD_SLURM=off"
	default:
		stopCluster, startCode := startCluster()
		if stopCluster != nil {
			stop := sync.OnceValue(stopCluster)
			defer func() {
				// Processes left on a node, or daemons the stop script
				// could not stop, fail the run.
				if err := stop(); err != nil && code == 0 {
					code = 1
				}
			}()
			stopBeforeDying(stop)
		}
		if startCode != 0 {
			return startCode
		}
	}
	if cl.skip != "" && os.Getenv("GPUGUARD_SLURM") == "require" && !testing.Short() {
		fmt.Fprintf(os.Stderr, "GPUGUARD_SLURM=require, but the multi-node Slurm tests cannot run: %s\n", cl.skip)
		return 1
	}
	if cl.skip == "" {
		dir, err := os.MkdirTemp("", "gg-mn-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if err := os.Chmod(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		cl.gg = filepath.Join(dir, "gpuguard")
		goCmd := filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(goCmd); err != nil {
			goCmd = "go"
		}
		build := exec.Command(goCmd, "build", "-o", cl.gg, ".")
		build.Dir = cl.root
		build.Env = append(os.Environ(), "CGO_CFLAGS=-Wno-deprecated-declarations")
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "cannot build gpuguard for the multi-node tests: %v\n%s", err, out)
			return 1
		}
	}
	code = m.Run()
	if cl.skip == "" {
		if left := leftovers(); left != "" {
			fmt.Fprintf(os.Stderr, "processes left on the cluster's nodes after the tests (the stop script ends them):\n%s", left)
			if code == 0 {
				code = 1
			}
		}
	}
	return code
}

// leftovers names the processes other than slurmd still on any node, once
// the jobs' step daemons have had time to end (they end a moment after
// their job; every test cancels its jobs).
func leftovers() string {
	if out, err := slurmCommand("", "squeue", "-h", "-o", "%A %T").CombinedOutput(); err == nil && len(bytes.TrimSpace(out)) > 0 {
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

// stopBeforeDying stops the cluster when the test binary is about to die
// without running TestMain's deferred calls: interrupted (SIGINT, SIGTERM),
// or near its -test.timeout, whose panic runs no deferred call.
func stopBeforeDying(stop func() error) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "%v: stopping the tests' multi-node Slurm cluster first\n", sig)
		stop()
		signal.Reset(sig)
		syscall.Kill(os.Getpid(), sig.(syscall.Signal))
	}()
	f := flag.Lookup("test.timeout")
	if f == nil {
		return
	}
	g, ok := f.Value.(flag.Getter)
	if !ok {
		return
	}
	const margin = 75 * time.Second
	if d, _ := g.Get().(time.Duration); d > 2*margin {
		time.AfterFunc(d-margin, func() {
			fmt.Fprintf(os.Stderr, "-test.timeout %s is %s away: stopping the tests' multi-node Slurm cluster now, so that it does not outlive the test binary\n", d, margin)
			stop()
		})
	}
}

// startCluster starts the private cluster and returns what stops it; code is
// non-zero when the tests cannot run although they should.
func startCluster() (stop func() error, code int) {
	if os.Geteuid() != 0 {
		cl.skip = "not root: the tests start a private multi-node Slurm cluster (network namespaces, slurmd); run them as root"
		return nil, 0
	}
	for _, c := range []string{"bash", "ip", "nsenter", "unshare"} {
		if _, err := exec.LookPath(c); err != nil {
			cl.skip = "no " + c + " to run slurm/start-multinode-slurm.sh"
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
	port, err := freePort()
	if err != nil {
		fmt.Fprintln(os.Stderr, "no free port for slurmctld:", err)
		return nil, 1
	}
	base := append(os.Environ(),
		"MN_SLURM_DIR="+dir,
		fmt.Sprintf("MN_SLURM_PREFIX=gm%d", port),
		fmt.Sprintf("MN_SLURM_CTLD_PORT=%d", port),
		fmt.Sprintf("MN_SLURM_NODES=%d", nodes),
	)
	env := base
	stop = func() error {
		cmd := exec.Command("bash", filepath.Join(cl.root, "slurm", "stop-multinode-slurm.sh"), "--purge")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "slurm/stop-multinode-slurm.sh did not stop the tests' cluster cleanly (%v); it names what it found:\n%s", err, out)
		}
		os.RemoveAll(dir)
		os.Remove(dir + ".lock")
		return err
	}
	// A /24 of 10.213/16 that no address or route of this machine is in.
	// Another cluster starting at the same moment may take the same one:
	// the start script then refuses it ("already in use"), and the next is
	// tried.
	third := port % 250
	var stderr bytes.Buffer
	for try := 0; ; try++ {
		subnet := fmt.Sprintf("10.213.%d.0/24", (third+try*37)%250+1)
		env = append(base[:len(base):len(base)], "MN_SLURM_SUBNET="+subnet)
		start := exec.Command("bash", filepath.Join(cl.root, "slurm", "start-multinode-slurm.sh"))
		start.Env = env
		stderr.Reset()
		start.Stderr = &stderr
		_, err := start.Output()
		if err == nil {
			break
		}
		if strings.Contains(stderr.String(), "already in use on this machine") && try < 5 {
			continue
		}
		if _, lerr := exec.LookPath("slurmctld"); lerr != nil {
			cl.skip = "Slurm is not installed and slurm/start-multinode-slurm.sh could not install it: " + lastLines(stderr.String(), 3)
			return stop, 0
		}
		fmt.Fprintf(os.Stderr, "slurm/start-multinode-slurm.sh failed: %v\n%s", err, stderr.String())
		return stop, 1
	}
	fmt.Fprintf(os.Stderr, "multi-node cluster: %s\n", lastLines(grepLines(stderr.String(), "is up after"), 1))
	cl.dir = dir
	if err := setConf(filepath.Join(dir, "etc", "slurm.conf"), fmt.Sprintf("gm%d", port)); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return stop, 1
	}
	return stop, 0
}

func setConf(conf, prefix string) error {
	cl.conf = conf
	cl.env = nil
	for _, kv := range os.Environ() {
		// Slurm's input variables would change what sbatch and srun do.
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "SBATCH_") && !strings.HasPrefix(kv, "SRUN_") && !strings.HasPrefix(kv, "GPUGUARD_") {
			cl.env = append(cl.env, kv)
		}
	}
	cl.env = append(cl.env, "SLURM_CONF="+conf)
	data, err := os.ReadFile(conf)
	if err != nil {
		return err
	}
	text := string(data)
	cl.cgroup = strings.Contains(text, "ProctrackType=proctrack/cgroup")
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

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
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

func need(t testing.TB) {
	t.Helper()
	if cl.skip != "" {
		t.Skip(cl.skip)
	}
}

// ---------------------------------------------------------------------------
// Slurm

func slurmCommand(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, cl.env
	return cmd
}

func run(t testing.TB, dir, name string, args ...string) string {
	t.Helper()
	out, err := slurmCommand(dir, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// onNode is a command run on node k (0-based: SLURM_NODEID): inside its
// network, host name, mount (its /etc/hosts and /proc) and PID namespaces,
// so it sees what a job's process there sees, in dir.
func onNode(k int, dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command("nsenter", append([]string{"-t", strconv.Itoa(cl.nodes[k].init), "-n", "-u", "-m", "-p", "--", name}, args...)...)
	cmd.Dir, cmd.Env = dir, cl.env
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
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir("testdata")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join("testdata", e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// submit writes script to dir/name and submits it; the job is cancelled at
// the end of the test if it is still in the queue. It returns the job id.
func submit(t testing.TB, dir, name, script string, args ...string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out := run(t, dir, "sbatch", append(append([]string{"--parsable"}, args...), name)...)
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", out)
	}
	t.Cleanup(func() { cancel(t, id) })
	return id
}

// cancel cancels a job still in the queue and waits until it has left it.
func cancel(t testing.TB, id string) {
	info, err := showJob(id)
	if err != nil || ended(info["JobState"]) {
		return
	}
	t.Logf("cancelling job %s (%s)", id, info["JobState"])
	slurmCommand("", "scancel", id).Run()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		info, err := showJob(id)
		if err != nil || ended(info["JobState"]) {
			return
		}
		if info["JobState"] == "PENDING" {
			slurmCommand("", "scancel", id).Run()
		}
		time.Sleep(200 * time.Millisecond) // polling Slurm: it has no notification to wait on
	}
	t.Errorf("job %s still in the queue a minute after scancel", id)
}

// showJob returns `scontrol show job -o ID` as fields.
func showJob(id string) (map[string]string, error) {
	out, err := slurmCommand("", "scontrol", "show", "job", "-o", id).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("scontrol show job %s: %v: %s", id, err, out)
	}
	info := map[string]string{}
	for _, f := range strings.Fields(string(out)) {
		if k, v, ok := strings.Cut(f, "="); ok {
			if _, seen := info[k]; !seen {
				info[k] = v
			}
		}
	}
	return info, nil
}

func ended(state string) bool {
	switch state {
	case "PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT":
		return false
	}
	return true
}

// waitJob polls the job until cond holds (Slurm offers nothing to wait on)
// and returns its fields then.
func waitJob(t testing.TB, id string, within time.Duration, what string, cond func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(within)
	var info map[string]string
	var err error
	last := ""
	for {
		info, err = showJob(id)
		if err == nil {
			if now := info["JobState"] + " " + info["Reason"] + " Restarts=" + info["Restarts"]; now != last {
				t.Logf("job %s: %s", id, now)
				last = now
			}
		}
		if err == nil && cond(info) {
			return info
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("job %s: %s: not within %s (last: %v %v)", id, what, within, info, err)
	return nil
}

// waitEnd waits until the job has ended for good and returns its fields.
func waitEnd(t testing.TB, id string, within time.Duration) map[string]string {
	t.Helper()
	return waitJob(t, id, within, "end", func(info map[string]string) bool { return ended(info["JobState"]) })
}

// waitFile waits until file contains want and returns its content.
func waitFile(t testing.TB, file, want string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		data, _ := os.ReadFile(file)
		if strings.Contains(string(data), want) {
			return string(data)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q did not appear in %s within %s; it has:\n%s", want, file, within, data)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func wantState(t testing.TB, info map[string]string, state, exit string) {
	t.Helper()
	if info["JobState"] != state || info["ExitCode"] != exit {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want %s %s", info["JobId"], info["JobState"], info["ExitCode"], state, exit)
	}
}

func readFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func tryRead(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

func wantContains(t testing.TB, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
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

// ---------------------------------------------------------------------------
// Run directories

type event map[string]any

// runDirOf is the run directory gpuguard keeps for job id run in dir.
func runDirOf(dir, id string) string { return filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id) }

// events reads a run directory's events of the given types (all when none).
func events(t testing.TB, runDir string, types ...string) []event {
	t.Helper()
	evs, err := readEvents(runDir, types...)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func readEvents(runDir string, types ...string) ([]event, error) {
	f, err := os.Open(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %v", runDir, err)
		}
		typ, _ := ev["type"].(string)
		if len(types) == 0 || contains(types, typ) {
			out = append(out, ev)
		}
	}
	return out, sc.Err()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// verdicts are the verdicts of the attempts in a run directory, in order.
func verdicts(t testing.TB, runDir string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range events(t, runDir, "attempt_end") {
		v, _ := ev["verdict"].(map[string]any)
		out = append(out, v)
	}
	return out
}

func kinds(vs []map[string]any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i], _ = v["kind"].(string)
	}
	return out
}
