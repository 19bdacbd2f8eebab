package slurm_test

// Integration tests against a real one-node Slurm cluster.
//
// TestMain starts a private cluster with start-local-slurm.sh (its own
// state directory under the temp dir, free ports, node name gg<port>, so it
// shares nothing with another cluster on the machine), builds gpuguard, runs
// the tests and stops the cluster with stop-local-slurm.sh --purge. It needs
// root (slurmd starts jobs as their users); when the Slurm packages are
// missing the start script installs them with apt (about 10 s). Without root
// the tests skip, saying why. Environment:
//
//	GPUGUARD_SLURM=off        skip these tests
//	GPUGUARD_SLURM=require    fail, not skip, when they cannot run (CI; -short still skips)
//	GPUGUARD_SLURM_CONF=FILE  use the running test cluster of this slurm.conf
//	                          instead of starting one (it must run jobs as root
//	                          and have a free CPU or two; never a production
//	                          cluster: the tests submit jobs and cancel them)
//
// Jobs run in t.TempDir() directories; every job a test submits is cancelled
// when the test ends if it is still in the queue.

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
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// cl is the cluster the tests use.
var cl struct {
	skip   string   // why the tests skip ("" when they run)
	root   string   // the repository
	conf   string   // slurm.conf
	env    []string // environment for Slurm commands and jobs
	gg     string   // the gpuguard binary
	node   string   // the node's name
	cgroup bool     // proctrack/cgroup with ConstrainRAMSpace: --mem is enforced
}

func TestMain(m *testing.M) { os.Exit(mainTest(m)) }

func mainTest(m *testing.M) (code int) {
	flag.Parse()
	root, err := filepath.Abs("..")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cl.root = root
	switch {
	case testing.Short():
		cl.skip = "-short: the Slurm tests submit real jobs (about two minutes)"
	case os.Getenv("GPUGUARD_SLURM") == "off":
		cl.skip = "GPUGUARD_SLURM=off"
	default:
		stopCluster, startCode := startCluster()
		if stopCluster != nil {
			stop := sync.OnceValue(stopCluster)
			defer func() {
				// Daemons or job processes left behind fail the run.
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
		fmt.Fprintf(os.Stderr, "GPUGUARD_SLURM=require, but the Slurm tests cannot run: %s\n", cl.skip)
		return 1
	}
	if cl.skip == "" {
		dir, err := os.MkdirTemp("", "gg-slurm-bin-")
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
			fmt.Fprintf(os.Stderr, "cannot build gpuguard for the Slurm tests: %v\n%s", err, out)
			return 1
		}
	}
	return m.Run()
}

// stopBeforeDying stops the cluster when the test binary is about to die
// without running TestMain's deferred calls: interrupted (SIGINT, SIGTERM:
// the cluster is stopped, then the signal ends the binary as it would have),
// or near its -test.timeout (the panic that ends a binary that ran out of
// time runs no deferred call, and the daemons would outlive it).
func stopBeforeDying(stop func() error) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-ch
		fmt.Fprintf(os.Stderr, "%v: stopping the tests' Slurm cluster first\n", sig)
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
	// Enough for stop-local-slurm.sh: cancelling the jobs waits up to
	// KillWait, then the daemons get up to 20 s each.
	const margin = 75 * time.Second
	if d, _ := g.Get().(time.Duration); d > 2*margin {
		time.AfterFunc(d-margin, func() {
			fmt.Fprintf(os.Stderr, "-test.timeout %s is %s away: stopping the tests' Slurm cluster now, so that it does not outlive the test binary\n", d, margin)
			stop()
		})
	}
}

// startCluster starts the private cluster (or checks GPUGUARD_SLURM_CONF's)
// and returns what stops it; code is non-zero when the tests cannot run
// although they should.
func startCluster() (stop func() error, code int) {
	if c := os.Getenv("GPUGUARD_SLURM_CONF"); c != "" {
		setConf(c)
		if out, err := slurmCommand("", "scontrol", "ping").CombinedOutput(); err != nil || !bytes.Contains(out, []byte("is UP")) {
			fmt.Fprintf(os.Stderr, "GPUGUARD_SLURM_CONF=%s: slurmctld does not answer scontrol ping: %v %s\n", c, err, out)
			return nil, 1
		}
		return nil, 0
	}
	if os.Geteuid() != 0 {
		cl.skip = "not root: the tests start a private Slurm cluster, and slurmd must run as root; run them as root, or set GPUGUARD_SLURM_CONF to a test cluster's slurm.conf"
		return nil, 0
	}
	if _, err := exec.LookPath("bash"); err != nil {
		cl.skip = "no bash to run slurm/start-local-slurm.sh"
		return nil, 0
	}
	dir, err := os.MkdirTemp("", "gg-slurm-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return nil, 1
	}
	ctld, slurmd, err := freePorts()
	if err != nil {
		fmt.Fprintln(os.Stderr, "no free ports for slurmctld and slurmd:", err)
		return nil, 1
	}
	env := append(os.Environ(),
		"LOCAL_SLURM_DIR="+dir,
		fmt.Sprintf("LOCAL_SLURM_NODE=gg%d", ctld),
		fmt.Sprintf("LOCAL_SLURM_CTLD_PORT=%d", ctld),
		fmt.Sprintf("LOCAL_SLURM_SLURMD_PORT=%d", slurmd),
		// More CPUs than the machine has, so that the tests' jobs run side
		// by side (they mostly wait).
		"LOCAL_SLURM_CPUS=8",
	)
	stop = func() error {
		cmd := exec.Command("bash", filepath.Join(cl.root, "slurm", "stop-local-slurm.sh"), "--purge")
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "slurm/stop-local-slurm.sh could not stop the tests' cluster cleanly (%v); it names what it left running:\n%s", err, out)
		}
		os.RemoveAll(dir)
		os.Remove(dir + ".lock")
		return err
	}
	start := exec.Command("bash", filepath.Join(cl.root, "slurm", "start-local-slurm.sh"))
	start.Env = env
	var stderr bytes.Buffer
	start.Stderr = &stderr
	if _, err := start.Output(); err != nil {
		if _, lerr := exec.LookPath("slurmctld"); lerr != nil {
			cl.skip = "Slurm is not installed and slurm/start-local-slurm.sh could not install it: " + lastLines(stderr.String(), 3)
			return stop, 0
		}
		fmt.Fprintf(os.Stderr, "slurm/start-local-slurm.sh failed: %v\n%s", err, stderr.String())
		return stop, 1
	}
	setConf(filepath.Join(dir, "etc", "slurm.conf"))
	return stop, 0
}

func setConf(conf string) {
	cl.conf = conf
	cl.env = nil
	for _, kv := range os.Environ() {
		// Slurm's input variables would change what sbatch and srun do.
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "SBATCH_") && !strings.HasPrefix(kv, "SRUN_") && !strings.HasPrefix(kv, "GPUGUARD_") {
			cl.env = append(cl.env, kv)
		}
	}
	cl.env = append(cl.env, "SLURM_CONF="+conf)
	data, _ := os.ReadFile(conf)
	text := string(data)
	cl.cgroup = strings.Contains(text, "ProctrackType=proctrack/cgroup")
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "NodeName="); ok {
			cl.node, _, _ = strings.Cut(rest, " ")
		}
	}
}

func freePorts() (int, int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for len(ports) < 2 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, 0, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports[0], ports[1], nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func need(t *testing.T) {
	t.Helper()
	if cl.skip != "" {
		t.Skip(cl.skip)
	}
}

func slurmCommand(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, cl.env
	return cmd
}

func run(t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	out, err := slurmCommand(dir, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// workDir is a new job directory holding a copy of examples/ and of the
// test programs in testdata/.
func workDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "examples"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"train.py", "config.yaml", "gpuguard.yaml"} {
		copyFile(t, filepath.Join(cl.root, "examples", f), filepath.Join(dir, "examples", f))
	}
	entries, err := os.ReadDir(filepath.Join(cl.root, "slurm", "testdata"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		copyFile(t, filepath.Join(cl.root, "slurm", "testdata", e.Name()), filepath.Join(dir, e.Name()))
	}
	return dir
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// submit writes script to dir/name and submits it; the job is cancelled at
// the end of the test if it is still in the queue. It returns the job id.
func submit(t *testing.T, dir, name, script string, args ...string) string {
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
func cancel(t *testing.T, id string) {
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
			// Requeued by gpuguard on the SIGTERM (slurm.requeue_on):
			// cancelling a pending job removes it.
			slurmCommand("", "scancel", id).Run()
		}
		time.Sleep(200 * time.Millisecond) // polling Slurm: it has no notification to wait on
	}
	t.Errorf("job %s still in the queue a minute after scancel", id)
}

// showJob returns `scontrol show job -o ID` as fields (for an array job
// given as ARRAY_TASK, that task's).
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

// waitJob polls the job until cond holds (Slurm offers nothing to wait on
// but sbatch --wait, which polls too) and returns its fields then.
func waitJob(t *testing.T, id string, within time.Duration, what string, cond func(map[string]string) bool) map[string]string {
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

// waitEnd waits until the job has ended for good and returns its fields. A
// requeued job is left to wait its cred_expire+1 s (11 s on the tests'
// cluster): `scontrol update StartTime=now` would start it sooner, but a run
// started while the previous run's step daemon is still ending failed at
// once (JobState=FAILED ExitCode=1:0, RunTime 0) in one of our runs.
func waitEnd(t *testing.T, id string, within time.Duration) map[string]string {
	t.Helper()
	return waitJob(t, id, within, "end", func(info map[string]string) bool {
		return ended(info["JobState"])
	})
}

// waitFile waits until file contains want and returns its content.
func waitFile(t *testing.T, file, want string, within time.Duration) string {
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
		time.Sleep(100 * time.Millisecond)
	}
}

func wantState(t *testing.T, info map[string]string, state, exit string) {
	t.Helper()
	if info["JobState"] != state || info["ExitCode"] != exit {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want %s %s (%v)", info["JobId"], info["JobState"], info["ExitCode"], state, exit, info)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

type event map[string]any

// events reads a run directory's events of the given types (all when none).
func events(t *testing.T, runDir string, types ...string) []event {
	t.Helper()
	f, err := os.Open(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ev event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("%s: %v", runDir, err)
		}
		if len(types) == 0 || contains(types, ev["type"].(string)) {
			out = append(out, ev)
		}
	}
	return out
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
func verdicts(t *testing.T, runDir string) []map[string]any {
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

// digest is the weights digest the example job prints at its end.
func digest(t *testing.T, output string) string {
	t.Helper()
	i := strings.LastIndex(output, "weights sha256 ")
	if i < 0 {
		t.Fatalf("the example job did not finish: no weights digest in its output:\n%s", lastLines(output, 30))
	}
	return strings.Fields(output[i+len("weights sha256 "):])[0]
}

var reference struct {
	once   sync.Once
	digest string
	err    error
}

// referenceDigest is the digest of the example job run straight through with
// settings that fit: what every recovered run must end with.
func referenceDigest(t *testing.T) string {
	t.Helper()
	reference.once.Do(func() {
		dir := workDir(t)
		cmd := exec.Command("python3", "examples/train.py", "--config", "examples/config.yaml", "--batch-size", "16", "--grad-accum", "2")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "VAL_CROP_SIZE=512")
		out, err := cmd.CombinedOutput()
		if err != nil {
			reference.err = fmt.Errorf("the example job with fitting settings failed: %v\n%s", err, out)
			return
		}
		i := strings.LastIndex(string(out), "weights sha256 ")
		if i < 0 {
			reference.err = fmt.Errorf("no digest in:\n%s", out)
			return
		}
		reference.digest = strings.Fields(string(out)[i+len("weights sha256 "):])[0]
	})
	if reference.err != nil {
		t.Fatal(reference.err)
	}
	return reference.digest
}

const exampleCmd = "python3 examples/train.py --config examples/config.yaml"

// The example job as shipped runs out of memory in validation, then in
// training. Under `gpuguard run -- srun ...` in the batch script, each
// attempt is a new job step of the same allocation: the job recovers without
// going back to the queue, and Slurm sees it complete.
func TestStepOOMRecoveredByRelaunchingTheStep(t *testing.T) {
	need(t)
	t.Parallel()
	dir := workDir(t)
	id := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
exec %s run --policy examples/gpuguard.yaml -- srun %s
`, cl.gg, exampleCmd))
	info := waitEnd(t, id, 3*time.Minute)
	out := readFile(t, filepath.Join(dir, "job.out"))
	wantState(t, info, "COMPLETED", "0:0")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	starts := events(t, runDir, "attempt_start")
	if len(starts) != 3 {
		t.Fatalf("%d attempts, want 3:\n%s", len(starts), out)
	}
	for _, s := range starts {
		if argv, _ := s["argv"].([]any); len(argv) == 0 || argv[0] != "srun" {
			t.Errorf("attempt %v did not run srun: %v", s["attempt"], s["argv"])
		}
	}
	vs := verdicts(t, runDir)
	if got := strings.Join(kinds(vs), ","); got != "gpu_oom,gpu_oom,none" {
		t.Errorf("verdicts %s, want gpu_oom,gpu_oom,none:\n%s", got, out)
	}
	if vs[0]["phase"] != "val" || vs[1]["phase"] != "train" {
		t.Errorf("phases %v and %v, want val and train", vs[0]["phase"], vs[1]["phase"])
	}
	wantContains(t, "the job's output", out,
		"gpuguard: Slurm job "+id,
		"attempt 1 died of GPU OOM in validation",
		"attempt 2 died of GPU OOM in training",
		"attempt 3: srun python3 examples/train.py --config "+runDir+"/derived/attempt-3/config.yaml --resume ")
	if got, want := digest(t, out), referenceDigest(t); got != want {
		t.Errorf("weights digest %s, want %s (the run straight through with settings that fit)", got, want)
	}
}

// `srun gpuguard run -- python ...`: gpuguard is the step's task and
// relaunches the training process inside its step; its run directory is
// keyed by the job id.
func TestGpuguardAsTheStepTask(t *testing.T) {
	need(t)
	t.Parallel()
	dir := workDir(t)
	id := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
srun %s run --policy examples/gpuguard.yaml -- %s
`, cl.gg, exampleCmd))
	info := waitEnd(t, id, 3*time.Minute)
	out := readFile(t, filepath.Join(dir, "job.out"))
	wantState(t, info, "COMPLETED", "0:0")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	sl := events(t, runDir, "slurm")
	if len(sl) != 1 || sl[0]["step_id"] != "0" || sl[0]["job_id"] != id || sl[0]["node"] != cl.node {
		t.Errorf("slurm event %v, want job %s step 0 on node %s", sl, id, cl.node)
	}
	if got := strings.Join(kinds(verdicts(t, runDir)), ","); got != "gpu_oom,gpu_oom,none" {
		t.Errorf("verdicts %s, want gpu_oom,gpu_oom,none:\n%s", got, out)
	}
	if got, want := digest(t, out), referenceDigest(t); got != want {
		t.Errorf("weights digest %s, want %s", got, want)
	}
}

// Two ranks under srun --label: rank 1 runs out of memory, rank 0 hangs (a
// collective its peer never joins). gpuguard names rank 1, stops the whole
// step oom_grace after the OOM line, and relaunches it with a smaller batch.
func TestRankOOMStopsTheStepAndRelaunches(t *testing.T) {
	need(t)
	t.Parallel()
	dir := workDir(t)
	id := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -n 2
#SBATCH -o job.out
exec %s run --policy ranks.yaml -- srun -n2 --label python3 ranks.py --batch 64
`, cl.gg))
	info := waitEnd(t, id, 2*time.Minute)
	out := readFile(t, filepath.Join(dir, "job.out"))
	wantState(t, info, "COMPLETED", "0:0")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	vs := verdicts(t, runDir)
	if len(vs) != 2 || vs[0]["kind"] != "gpu_oom" || vs[0]["rank"] != float64(1) {
		t.Fatalf("verdicts %v, want a gpu_oom on rank 1 then success:\n%s", vs, out)
	}
	ends := events(t, runDir, "attempt_end")
	if ends[0]["stopped_by_us"] != true || ends[0]["stop_reason"] != "no exit within oom_grace (1s) after an out-of-memory error" {
		t.Errorf("attempt 1 was not stopped after oom_grace: %v", ends[0])
	}
	wantContains(t, "the job's output", out,
		"attempt 1 died of GPU OOM in training on rank 1",
		"the job did not exit within 1s of its out-of-memory error: stopping it",
		"attempt 2: srun -n2 --label python3 ranks.py --batch 32",
		"0: rank 0 done", "1: rank 1 done")
	// The host of the failing rank: srun names it in "srun: error: HOST:
	// task 1: Exited with exit code 1".
	if vs[0]["host"] != cl.node {
		t.Errorf("verdict host of rank 1: %q, want the node %q named by srun", vs[0]["host"], cl.node)
	}
	if oom, launch := stamp(out, "1: rank 1 oom at "), stamp(out[strings.Index(out, "attempt 2:"):], "1: rank 1 launched at "); oom > 0 && launch > 0 {
		t.Logf("from rank 1's OOM line to its relaunch in the next step: %.2f s (oom_grace 1 s, srun's teardown, a new step)", launch-oom)
	}
}

// stamp reads the time printed after prefix, 0 when there is none.
func stamp(out, prefix string) float64 {
	i := strings.Index(out, prefix)
	if i < 0 {
		return 0
	}
	f := strings.Fields(out[i+len(prefix):])
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// Host memory under the job's --mem (cgroup mode): in a job step, Slurm's
// cgroup OOM killer and its "Out Of Memory" / "oom-kill event" messages make
// a host OOM; gpuguard halves the allocation and the job completes. In the
// batch step itself, gpuguard sees the SIGKILL and the cgroup's OOM counter
// and recovers too, but Slurm then reports the whole job OUT_OF_MEMORY.
func TestHostOOMUnderTheCgroupLimit(t *testing.T) {
	need(t)
	if !cl.cgroup {
		t.Skip("the cluster runs without cgroups (proctrack/linuxproc): --mem is not enforced")
	}
	t.Parallel()
	for _, tc := range []struct {
		name, launch, state, exit string
	}{
		{"job step", "srun ", "COMPLETED", "0:0"},
		{"batch step", "", "OUT_OF_MEMORY", "0:125"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			id := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH --mem=300M
#SBATCH -o job.out
%s run --policy mem.yaml -- %spython3 alloc.py --mb 800
echo "gpuguard exit status $?"
`, cl.gg, tc.launch))
			info := waitEnd(t, id, 2*time.Minute)
			out := readFile(t, filepath.Join(dir, "job.out"))
			wantState(t, info, tc.state, tc.exit)
			runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
			vs := verdicts(t, runDir)
			if got := strings.Join(kinds(vs), ","); got != "host_oom,host_oom,none" {
				t.Fatalf("verdicts %s, want host_oom,host_oom,none (800 → 400 → 200 MiB under 300M):\n%s", got, out)
			}
			wantContains(t, "the job's output", out, "gpuguard exit status 0", "holding 200 MiB", "attempt 3: "+tc.launch+"python3 alloc.py --mb 200")
			if tc.launch != "" {
				wantContains(t, "the job's output", out, "task 0: Out Of Memory", "oom-kill event")
				if vs[0]["host"] != cl.node {
					t.Errorf("verdict host %q, want the node %q named by srun", vs[0]["host"], cl.node)
				}
			}
		})
	}
}

// Signals from scancel reach the training process through gpuguard: with
// `exec gpuguard run` the batch shell is gpuguard (scancel --batch); with
// `srun gpuguard run` gpuguard is the step's task (scancel without options).
// A plain scancel (SIGTERM) ends the job: gpuguard passes it on, relaunches
// nothing, and exits with the job's status. (The run directory is checked
// rather than the job's output: under srun, Slurm may end the batch shell
// and srun before the step's last lines reach the output file.)
func TestScancelSignalsReachTheJob(t *testing.T) {
	need(t)
	t.Parallel()
	for _, tc := range []struct {
		name, launch string
		opts         []string
	}{
		{"exec gpuguard in the batch script", "exec " + cl.gg, []string{"--batch"}},
		{"srun gpuguard", "srun " + cl.gg, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dir := workDir(t)
			id := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
%s run -- python3 signals.py signals.txt
`, tc.launch))
			sigs := filepath.Join(dir, "signals.txt")
			waitFile(t, sigs, "ready", time.Minute)
			for _, sig := range []string{"USR1", "USR2"} {
				run(t, dir, "scancel", append(append([]string{"--signal=" + sig}, tc.opts...), id)...)
				waitFile(t, sigs, sig, 30*time.Second)
			}
			run(t, dir, "scancel", id)
			info := waitEnd(t, id, time.Minute)
			if info["JobState"] != "CANCELLED" {
				t.Errorf("JobState=%s, want CANCELLED", info["JobState"])
			}
			got := readFile(t, sigs)
			if !recordedOnce(got, cl.cgroup, "ready", "USR1", "USR2", "TERM") {
				t.Errorf("the job recorded %q, want ready, USR1, USR2, TERM once each (twice at most without cgroups)", got)
			}
			runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
			ends := events(t, runDir, "attempt_end")
			if len(ends) != 1 || ends[0]["exit_code"] != float64(143) {
				t.Errorf("attempts %v, want one that exited 143", ends)
			}
			if re := events(t, runDir, "run_end"); len(re) != 1 || re[0]["exit_code"] != float64(143) {
				t.Errorf("run_end %v, want gpuguard's exit status 143", re)
			}
			var forwarded []string
			for _, ev := range events(t, runDir, "signal") {
				forwarded = append(forwarded, fmt.Sprint(ev["signal"], " ", ev["action"]))
			}
			if got := strings.Join(forwarded, ", "); got != "SIGUSR1 forwarded, SIGUSR2 forwarded, SIGTERM forwarded" {
				t.Errorf("signal events: %s", got)
			}
			if tc.opts != nil {
				// Without cgroups Slurm's own SIGTERM can reach the job
				// while it exits after gpuguard's, and end it.
				exited := "the job exited with status 143"
				if !cl.cgroup {
					exited = "status 143"
				}
				wantContains(t, "the job's output", readFile(t, filepath.Join(dir, "job.out")),
					"SIGTERM passed to the job", exited)
			}
		})
	}
}

// recordedOnce reports whether the lines of got are want, in this order,
// each once; with exact false (proctrack/linuxproc, where Slurm signals
// every process of the job and gpuguard passes the signal on too) each may
// come twice.
func recordedOnce(got string, exact bool, want ...string) bool {
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if exact {
		return slices.Equal(lines, want)
	}
	count := map[string]int{}
	var order []string
	for _, l := range lines {
		if count[l] == 0 {
			order = append(order, l)
		}
		count[l]++
		if count[l] > 2 {
			return false
		}
	}
	return slices.Equal(order, want)
}

// A job that Slurm ends (a plain scancel here: the same SIGTERM a time limit
// or a preemption sends) while it recovers from an OOM: gpuguard passes the
// signal on, the example job saves a checkpoint of its last step and exits,
// and gpuguard requeues the job (the policy lists SIGTERM). The requeued job
// finds its run directory, continues at the next attempt with the
// validation crop the first OOM taught and from the checkpoint written at
// the signal, recovers from the training OOM, and completes; its weights are
// those of a run that never stopped.
func TestRequeueContinuesWithTheSettingsThatFit(t *testing.T) {
	need(t)
	t.Parallel()
	dir := workDir(t)
	pol := readFile(t, filepath.Join(dir, "examples", "gpuguard.yaml")) + "\nslurm:\n  requeue_on: [SIGUSR2, SIGTERM]\n  stop_after: 30s\n"
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	id := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job.out
#SBATCH --open-mode=append
#SBATCH --requeue
export EXAMPLE_STEP_MS=40
exec %s run --policy policy.yaml -- %s
`, cl.gg, exampleCmd))
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	// Attempt 2 (after the validation OOM at step 50) is training: end the
	// job there.
	waitFile(t, filepath.Join(runDir, "output.log"), "step 60 ", 2*time.Minute)
	run(t, dir, "scancel", id)
	waitJob(t, id, time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info := waitEnd(t, id, 3*time.Minute)
	out := readFile(t, filepath.Join(dir, "job.out"))
	wantState(t, info, "COMPLETED", "0:0")
	// The checkpoint the job saved on SIGTERM is where the requeued job
	// resumed.
	saved := stampStep(out, "SIGTERM received: checkpoint of step ")
	if saved <= 50 || saved >= 100 {
		t.Fatalf("the job saved no checkpoint between steps 50 and 100 on SIGTERM:\n%s", out)
	}
	ckpt := fmt.Sprintf("checkpoints/example/step_%d.ckpt", saved)
	wantContains(t, "the job's output", out,
		"SIGTERM: no more relaunches here",
		"attempt 2 ended (exit status 143) after SIGTERM: not relaunching here, the job is requeued",
		"requeued Slurm job "+id+" after SIGTERM (scontrol requeue "+id+")",
		"restart 1",
		"resuming run "+runDir+" at attempt 3 with batch_size=32 env:PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True grad_accum=1 val_crop_size=512 workers=4 (budgets carried over (Slurm requeue))",
		"attempt 3: "+exampleCmd+" --resume "+filepath.Join(dir, ckpt),
		"resumed from "+filepath.Join(dir, ckpt),
		"val_crop_size=512",
		"attempt 3 died of GPU OOM in training",
		"training complete")
	starts := events(t, runDir, "attempt_start")
	if len(starts) != 4 {
		t.Errorf("%d attempts over both runs, want 4", len(starts))
	}
	req := events(t, runDir, "requeue")
	if len(req) != 1 || req[0]["result"] != "requeued" {
		t.Errorf("requeue events %v", req)
	}
	if got, want := digest(t, out), referenceDigest(t); got != want {
		t.Errorf("weights digest %s, want %s", got, want)
	}
}

func stampStep(out, prefix string) int {
	i := strings.Index(out, prefix)
	if i < 0 {
		return 0
	}
	f := strings.Fields(out[i+len(prefix):])
	if len(f) == 0 {
		return 0
	}
	n, _ := strconv.Atoi(f[0])
	return n
}

// Slurm's own warning before the time limit (#SBATCH --signal=B:USR2@59 on
// a one-minute job) reaches gpuguard, which passes it on and requeues the
// array task in its ARRAY_TASK form; the second run, with
// SLURM_RESTART_COUNT=1, finds its run directory and completes. Slurm checks
// time limits about every 30 s, so this test takes up to a minute.
func TestTimeLimitSignalRequeuesAnArrayTask(t *testing.T) {
	need(t)
	t.Parallel()
	dir := workDir(t)
	if err := os.WriteFile(filepath.Join(dir, "policy.yaml"), []byte("version: 1\nslurm: {requeue_on: [SIGUSR2], max_requeues: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	arrayID := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH -o job-%%a.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --time=1
#SBATCH --signal=B:USR2@59
exec %s run --policy policy.yaml -- python3 signals.py signals.txt --exit-on USR2
`, cl.gg), "--array=3")
	id := arrayID + "_3"
	t.Cleanup(func() { cancel(t, id) })
	waitJob(t, id, 2*time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info := waitEnd(t, id, 2*time.Minute)
	out := tryRead(filepath.Join(dir, "job-3.out"))
	defer func() {
		if t.Failed() {
			t.Logf("the job's output:\n%s", out)
		}
	}()
	wantState(t, info, "COMPLETED", "0:0")
	if info["Restarts"] != "1" {
		t.Errorf("Restarts=%s, want 1", info["Restarts"])
	}
	// Slurm may send the warning before Python has installed its handler
	// (its time-limit check runs when it will): then SIGUSR2's default
	// action ends the first run's process, which is what a job without a
	// handler gets, and only the restart is recorded.
	switch got := tryRead(filepath.Join(dir, "signals.txt")); got {
	case "ready\nUSR2\nrestarted 1\n":
	case "restarted 1\n":
		t.Logf("Slurm's SIGUSR2 came before the job had its handler")
	default:
		t.Errorf("the job recorded %q, want ready, USR2, then its restart", got)
	}
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	// (Slurm's SIGTERM that ends the first run after `scontrol requeue`
	// finds no job running: event action "no job".)
	var forwarded []string
	for _, ev := range events(t, runDir, "signal") {
		if ev["action"] == "forwarded" {
			forwarded = append(forwarded, fmt.Sprint(ev["signal"]))
		}
	}
	if got := strings.Join(forwarded, ", "); got != "SIGUSR2" {
		t.Errorf("signals forwarded over both runs: %q, want SIGUSR2", got)
	}
	wantContains(t, "the job's output", out,
		"SIGUSR2: no more relaunches here",
		"requeued Slurm job "+id+" after SIGUSR2 (scontrol requeue "+id+")",
		"restarted 1 times already (slurm.max_requeues: 1): it will not be requeued again",
		"run directory .gpuguard/runs/slurm-"+id)
	if n := len(events(t, runDir, "attempt_start")); n != 2 {
		t.Errorf("%d attempts over both runs, want 2", n)
	}
}

// A host OOM whose knob is at its floor: raise_slurm_mem requeues the job
// with a larger --mem (scontrol requeue, then scontrol update
// MinMemoryNode=), and the requeued run, with the memory it needs, reads the
// larger request back and completes. gpuguard is the batch shell (exec):
// Slurm's SIGTERM after the requeue would end a batch shell waiting for it,
// and slurmstepd then kills the rest of the batch step at once.
func TestHostOOMRequeuesWithMoreMemory(t *testing.T) {
	need(t)
	if !cl.cgroup {
		t.Skip("the cluster runs without cgroups (proctrack/linuxproc): --mem is not enforced")
	}
	t.Parallel()
	dir := workDir(t)
	pol := `version: 1
knobs:
  mb: {flag: --mb}
rules:
  - name: host-oom
    when: {kind: host_oom}
    steps:
      - {halve: mb, min: 400}
      - raise_slurm_mem: {by: 2, max: 1G}
backoff: {initial: 0s, max: 0s, jitter: 0}
`
	if err := os.WriteFile(filepath.Join(dir, "more.yaml"), []byte(pol), 0o644); err != nil {
		t.Fatal(err)
	}
	id := submit(t, dir, "job.sh", fmt.Sprintf(`#!/bin/bash
#SBATCH --mem=300M
#SBATCH -o job.out
#SBATCH --open-mode=append
#SBATCH --requeue
echo "run with SLURM_MEM_PER_NODE=$SLURM_MEM_PER_NODE: $(scontrol show job $SLURM_JOB_ID | grep -o 'MinMemoryNode=[^ ]*')"
exec %s run --policy more.yaml -- srun python3 alloc.py --mb 400
`, cl.gg))
	waitJob(t, id, 2*time.Minute, "requeued", func(info map[string]string) bool { return info["Restarts"] == "1" })
	info := waitEnd(t, id, 3*time.Minute)
	out := readFile(t, filepath.Join(dir, "job.out"))
	wantState(t, info, "COMPLETED", "0:0")
	if info["MinMemoryNode"] != "600M" {
		t.Errorf("MinMemoryNode=%s after the requeue, want 600M", info["MinMemoryNode"])
	}
	wantContains(t, "the job's output", out,
		"run with SLURM_MEM_PER_NODE=300: MinMemoryNode=300M",
		"rule host-oom step 2: mem 300M→600M; requeueing the Slurm job with it",
		"requeued Slurm job "+id+" with mem 300M→600M (scontrol update JobId="+id+" MinMemoryNode=600)",
		"run with SLURM_MEM_PER_NODE=600: MinMemoryNode=600M",
		"host-oom step 2: mem 300M→600M, requeued",
		"restart 1",
		"holding 400 MiB")
	runDir := filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id)
	if got := strings.Join(kinds(verdicts(t, runDir)), ","); got != "host_oom,none" {
		t.Errorf("verdicts %s, want host_oom,none", got)
	}
	req := events(t, runDir, "requeue")
	if len(req) != 1 || req[0]["result"] != "requeued with more memory" {
		t.Errorf("requeue events %v", req)
	}
	var changes []string
	for _, d := range events(t, runDir, "decision") {
		cs, _ := d["changes"].([]any)
		for _, c := range cs {
			c := c.(map[string]any)
			changes = append(changes, fmt.Sprint(c["name"], " ", c["old"], "→", c["new"]))
		}
	}
	if strings.Join(changes, ",") != "mem 300M→600M" {
		t.Errorf("decisions' changes %v, want mem 300M→600M", changes)
	}
}
