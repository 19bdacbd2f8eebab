package supervisor

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// runAsGroupMember is the test binary as `gpuguard run --group WHERE
// --group-rank RANK --group-size SIZE --group-timeout TIMEOUT --run-dir
// RUNDIR --policy POLICY -- CMD` (RANK and SIZE "-": not given; RUNDIR
// "resume:DIR": --resume-run DIR).
func runAsGroupMember(args []string) int {
	if len(args) < 8 || args[6] != "--" {
		fmt.Fprintln(os.Stderr, "usage: -gpuguard-group WHERE RANK SIZE TIMEOUT RUNDIR POLICY -- CMD...")
		return ExitUsage
	}
	num := func(s string) *int {
		if s == "-" {
			return nil
		}
		n, err := strconv.Atoi(s)
		if err != nil {
			panic(err)
		}
		return &n
	}
	timeout, err := time.ParseDuration(args[3])
	if err != nil {
		panic(err)
	}
	runDir, resume := args[4], ""
	if r, ok := strings.CutPrefix(runDir, "resume:"); ok {
		runDir, resume = "", r
	}
	return Run(Config{
		Argv: args[7:], PTY: "never", Grace: 2 * time.Second, RunDir: runDir, ResumeRun: resume, Policy: args[5],
		Group: args[0], GroupRank: num(args[1]), GroupSize: num(args[2]), GroupTimeout: timeout,
		Stdin: nil, Stdout: os.Stdout, Stderr: os.Stderr,
	})
}

// groupNode is a fake node of a multi-node job, as torchrun on one node
// would be: it prints its settings with its rank's prefix, appends them to
// DIR/settings.NODE, and then, with the first settings (batch 64):
// node 0 saves the checkpoint and hangs as ranks hung in a collective do;
// the node named by OOM_NODE waits for that checkpoint and dies of a CUDA
// out-of-memory error (the modern message's template, figures of our own).
// With batch 32 every node finishes. HANG=all: every node hangs; HANG=32:
// every node hangs with batch 32 (until it is stopped).
const groupNode = `#!/bin/sh
batch= accum= resume=none
while [ $# -gt 0 ]; do
  case "$1" in
    --batch) batch=$2; shift 2;;
    --accum) accum=$2; shift 2;;
    --resume) resume=$2; shift 2;;
    *) shift;;
  esac
done
line="node $NODE attempt $GPUGUARD_ATTEMPT batch=$batch accum=$accum resume=$resume"
echo "[rank$NODE]: $line"
echo "$$ $line" >> "$DIR/settings.$NODE"
if [ "$HANG" = all ] || [ "$HANG" = "$batch" ]; then exec sleep 600; fi
if [ "$batch" = 64 ]; then
  if [ "$NODE" = 0 ]; then
    mkdir -p "$DIR/ckpt"
    echo weights > "$DIR/ckpt/.step_100.pt.tmp" && mv "$DIR/ckpt/.step_100.pt.tmp" "$DIR/ckpt/step_100.pt"
    echo "[rank0]: step 100 saved"
  fi
  if [ "$NODE" = "$OOM_NODE" ]; then
    while [ ! -e "$DIR/ckpt/step_100.pt" ]; do sleep 0.05; done
    echo "[rank$NODE]: Traceback (most recent call last):" >&2
    echo "[rank$NODE]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB. GPU 0 has a total capacity of 23.65 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 22.51 GiB memory in use. Of the allocated memory 21.90 GiB is allocated by PyTorch, and 180.00 MiB is reserved by PyTorch but unallocated." >&2
    exit 1
  fi
  exec sleep 600
fi
echo "[rank$NODE]: done"
`

// groupPolicy is the policy of the group tests: the torch test's, with
// checkpoints to resume from and a notification file per node.
const groupPolicy = distPolicy + `checkpoints:
  globs: [ckpt/step_*.pt]
  choose: highest_step
  pass: {flag: --resume}
notify:
  command: cat >> notify-$NODE.jsonl
`

// groupCase is a group of gpuguards started side by side in one
// directory (the shared file system of a cluster).
type groupCase struct {
	dir   string
	procs []*groupProc
}

type groupProc struct {
	cmd  *exec.Cmd
	out  *supervisortest.SyncBuffer
	errb *supervisortest.SyncBuffer
	done chan struct{}
	code int
}

// startGroup starts size gpuguards, member i with NODE=i and the
// environment env, each around node.sh with the first settings; where is
// --group (ADDR, or "dir" for a rendezvous directory in the case's
// directory); rankFlags: give --group-rank/--group-size (else torchrun-like
// arguments name them).
func startGroupCase(t *testing.T, size int, where string, timeout string, env []string) *groupCase {
	t.Helper()
	c := &groupCase{dir: t.TempDir()}
	c.start(t, size, where, timeout, env, nil)
	return c
}

// start starts the case's members; runDirs[i], when given, is member i's
// RUNDIR argument.
func (c *groupCase) start(t *testing.T, size int, where string, timeout string, env []string, runDirs []string) {
	t.Helper()
	c.procs = nil
	write := func(name, text string, mode os.FileMode) {
		if err := os.WriteFile(filepath.Join(c.dir, name), []byte(text), mode); err != nil {
			t.Fatal(err)
		}
	}
	write("node.sh", groupNode, 0o755)
	write("gpuguard.yaml", groupPolicy, 0o644)
	// The checkpoint directory exists before the job renames its checkpoint
	// into it, so that the leader's watcher sees the rename (complete at
	// once). Into a directory created just before, a rename can precede
	// the watch; the file then counts as complete only once unchanged for
	// checkpoint.ClockSlack before the job's processes were gone, which a
	// busy machine may not give this job.
	if err := os.MkdirAll(filepath.Join(c.dir, "ckpt"), 0o755); err != nil {
		t.Fatal(err)
	}
	if where == "dir" {
		where = filepath.Join(c.dir, "rendezvous")
	}
	for i := 0; i < size; i++ {
		runDir := filepath.Join(c.dir, fmt.Sprintf("run%d", i))
		if i < len(runDirs) {
			runDir = runDirs[i]
		}
		args := []string{"-gpuguard-group", where, strconv.Itoa(i), strconv.Itoa(size), timeout,
			runDir, "gpuguard.yaml", "--",
			"./node.sh", "--batch", "64", "--accum", "1"}
		cmd := exec.Command(testBinary(), args...)
		cmd.Dir = c.dir
		cmd.Env = append(os.Environ(), append([]string{"NODE=" + strconv.Itoa(i), "DIR=" + c.dir}, env...)...)
		p := &groupProc{cmd: cmd, out: &supervisortest.SyncBuffer{}, errb: &supervisortest.SyncBuffer{}, done: make(chan struct{})}
		cmd.Stdout, cmd.Stderr = p.out, p.errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() {
			err := cmd.Wait()
			p.code = cmd.ProcessState.ExitCode()
			_ = err
			close(p.done)
		}()
		c.procs = append(c.procs, p)
		t.Cleanup(func() {
			select {
			case <-p.done:
			default:
				cmd.Process.Kill()
				<-p.done
			}
		})
	}
}

func (p *groupProc) exit(t *testing.T) int {
	t.Helper()
	// Only a guard against a gpuguard that never ends: it waits as long as
	// the test may run (go test -timeout), less a margin to say so, because a
	// real PyTorch group on a busy machine takes what it takes.
	wait := 10 * time.Minute
	if d, ok := t.Deadline(); ok {
		wait = time.Until(d) - 30*time.Second
	}
	select {
	case <-p.done:
	case <-time.After(wait):
		t.Fatalf("gpuguard did not end within %s; stderr:\n%s", wait.Round(time.Second), p.errb)
	}
	return p.code
}

// events reads member i's journal: the events of type typ.
func (c *groupCase) events(t *testing.T, i int, typ string) []map[string]any {
	t.Helper()
	return c.eventsIn(t, fmt.Sprintf("run%d", i), typ)
}

// eventsIn reads the journal of the run directory name: the events of type
// typ.
func (c *groupCase) eventsIn(t *testing.T, name, typ string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.dir, name, "events.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events.jsonl: %v", err)
		}
		if ev["type"] == typ {
			out = append(out, ev)
		}
	}
	return out
}

// settings is what node i printed at each attempt, its pid removed.
func (c *groupCase) settings(t *testing.T, i int) []string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("settings.%d", i)))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		_, rest, _ := strings.Cut(l, " ")
		out = append(out, rest)
	}
	return out
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// An out-of-memory error on one node of three: the node whose ranks hang
// (node 0) is stopped after oom_grace, not after NCCL's timeout; the
// leader decides once, from the OOM; every node relaunches with the same
// halved batch and the same checkpoint, as each node's printed settings
// and journal show.
func TestGroupOOMOnOneNodeRelaunchesEveryNodeAlike(t *testing.T) {
	for _, where := range []string{"addr", "dir"} {
		t.Run(where, func(t *testing.T) {
			w := where
			if w == "addr" {
				w = freeAddr(t)
			}
			c := startGroupCase(t, 3, w, "20s", []string{"OOM_NODE=1"})
			for i, p := range c.procs {
				if code := p.exit(t); code != 0 {
					t.Fatalf("member %d: exit status %d, want 0; stderr:\n%s", i, code, p.errb)
				}
			}
			// One notification stream for the job: the leader's. The
			// members' own journals have the same decisions.
			if data, err := os.ReadFile(filepath.Join(c.dir, "notify-0.jsonl")); err != nil || !strings.Contains(string(data), `"relaunch"`) {
				t.Errorf("the leader's notifications: %q, %v; want its relaunch decision", data, err)
			}
			for _, i := range []int{1, 2} {
				if data, err := os.ReadFile(filepath.Join(c.dir, fmt.Sprintf("notify-%d.jsonl", i))); err == nil {
					t.Errorf("member %d notified for the job too:\n%s", i, data)
				}
			}
			ckpt := filepath.Join(c.dir, "ckpt", "step_100.pt")
			for i := range c.procs {
				want := []string{
					fmt.Sprintf("node %d attempt 1 batch=64 accum=1 resume=none", i),
					fmt.Sprintf("node %d attempt 2 batch=32 accum=2 resume=%s", i, ckpt),
				}
				if got := c.settings(t, i); strings.Join(got, "\n") != strings.Join(want, "\n") {
					t.Errorf("node %d ran with\n%s\nwant\n%s\nthe leader's status:\n%s", i, strings.Join(got, "\n"), strings.Join(want, "\n"), c.procs[0].errb)
				}
				gd := c.events(t, i, "group_decision")
				if len(gd) < 1 || gd[0]["attempt"] != 1.0 || gd[0]["verb"] != "relaunch" || gd[0]["from_rank"] != 1.0 || gd[0]["kind"] != "gpu_oom" {
					t.Errorf("node %d: group decisions %v, want attempt 1 relaunched from rank 1's gpu_oom", i, gd)
				}
				dec := c.events(t, i, "decision")
				if len(dec) < 1 {
					t.Fatalf("node %d: no decision event", i)
				}
				knobs, _ := dec[0]["knobs"].(map[string]any)
				if knobs["batch_size"] != "32" || knobs["grad_accum"] != "2" {
					t.Errorf("node %d: decision knobs %v, want batch_size 32, grad_accum 2", i, knobs)
				}
			}
			// Node 0's ranks hung: the leader's stop ended them after
			// oom_grace; node 2's too.
			for _, i := range []int{0, 2} {
				stops := c.events(t, i, "group_stop")
				if len(stops) != 1 || stops[0]["rank"] != 1.0 || stops[0]["stopped"] != true {
					t.Errorf("node %d: group stops %v, want one from rank 1 that stopped the job", i, stops)
				}
				ends := c.events(t, i, "attempt_end")
				if len(ends) < 1 || !strings.Contains(fmt.Sprint(ends[0]["stop_reason"]), "rank 1") {
					t.Errorf("node %d: attempt 1 ended %v, want stopped for rank 1's failure", i, ends)
				}
			}
			if !strings.Contains(c.procs[2].errb.String(), "rank 1 on ") || !strings.Contains(c.procs[2].errb.String(), "failed first; the group's leader decided") {
				t.Errorf("member 2's status does not say the leader decided from rank 1:\n%s", c.procs[2].errb)
			}
		})
	}
}

// The leader killed while every node's ranks run: the members cannot
// rejoin within --group-timeout, stop their jobs, and give up with exit
// status 76, relaunching nothing.
func TestGroupMemberCutOffFromItsLeaderGivesUp(t *testing.T) {
	c := startGroupCase(t, 2, freeAddr(t), "2s", []string{"HANG=all"})
	for i := range c.procs {
		supervisortest.WaitFile(t, filepath.Join(c.dir, fmt.Sprintf("settings.%d", i)), "attempt 1")
	}
	line := strings.TrimSpace(supervisortest.WaitFile(t, filepath.Join(c.dir, "settings.1"), "\n"))
	pid, err := strconv.Atoi(strings.Fields(line)[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := c.procs[0].cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if code := c.procs[1].exit(t); code != ExitGroupLost {
		t.Fatalf("member: exit status %d, want %d; stderr:\n%s", code, ExitGroupLost, c.procs[1].errb)
	}
	supervisortest.Gone(t, pid)
	errs := c.procs[1].errb.String()
	if !strings.Contains(errs, "giving up without relaunching") || !strings.Contains(errs, "could not rejoin within 2s") {
		t.Errorf("member's status does not say it lost its leader:\n%s", errs)
	}
	if got := c.settings(t, 1); len(got) != 1 {
		t.Errorf("member ran %d attempts, want 1: %q", len(got), got)
	}
	if lost := c.events(t, 1, "group_lost"); len(lost) != 1 {
		t.Errorf("member's group_lost events: %v, want one", lost)
	}
	// With no leader to speak for the job, the member notifies how its
	// run ended (the notifications go out before gpuguard exits).
	if data, err := os.ReadFile(filepath.Join(c.dir, "notify-1.jsonl")); err != nil || !strings.Contains(string(data), `"run_end"`) {
		t.Errorf("the member's notifications: %q, %v; want its run_end", data, err)
	}
}

// A member whose leader never comes, and a leader whose member never
// comes, give up after --group-timeout with exit status 76, starting no
// job.
func TestGroupThatCannotFormGivesUp(t *testing.T) {
	for _, tc := range []struct {
		name string
		rank string
		want string
	}{
		{"member without a leader", "1", "cannot reach the group's leader at "},
		{"leader without its member", "0", "rank(s) [1] of 2 did not join the group at "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "gpuguard.yaml"), []byte(groupPolicy), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(testBinary(), "-gpuguard-group", freeAddr(t), tc.rank, "2", "1s", filepath.Join(dir, "run"), "gpuguard.yaml", "--",
				"sh", "-c", "echo started > started", "sh", "--batch", "8", "--accum", "1")
			cmd.Dir = dir
			out, err := cmd.CombinedOutput()
			if code := cmd.ProcessState.ExitCode(); code != ExitGroupLost {
				t.Fatalf("exit status %d (%v), want %d:\n%s", code, err, ExitGroupLost, out)
			}
			if !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "giving up without relaunching") {
				t.Errorf("output does not say %q:\n%s", tc.want, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "started")); err == nil {
				t.Error("the job was started")
			}
		})
	}
}

// The leader's decisions outlive the run: after an OOM relaunch both nodes
// hold at batch 32; the leader is stopped (SIGTERM), and the member stops
// its job with it. The leader continues its run with --resume-run and the
// member starts afresh, with its command's batch 64. The member gets batch 32 and the checkpoint from
// the leader's go, and both run attempt 3 alike.
func TestGroupResumedLeaderGivesItsSettingsToAFreshMember(t *testing.T) {
	c := startGroupCase(t, 2, "dir", "20s", []string{"OOM_NODE=1", "HANG=32"})
	for i := range c.procs {
		supervisortest.WaitFile(t, filepath.Join(c.dir, fmt.Sprintf("settings.%d", i)), "attempt 2")
	}
	// The leader is stopped (SIGTERM, as a preemption); the member stops
	// its job when the leader ends.
	if err := c.procs[0].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	for i, p := range c.procs {
		if code := p.exit(t); code != 128+int(syscall.SIGTERM) {
			t.Fatalf("member %d: exit status %d after the leader's SIGTERM, want %d; stderr:\n%s", i, code, 128+int(syscall.SIGTERM), p.errb)
		}
	}
	if !strings.Contains(c.procs[1].errb.String(), "group: the leader ended its run (the group's leader ended its run (exit status 143)): stopping the job") {
		t.Errorf("the member does not say it stopped because the leader ended:\n%s", c.procs[1].errb)
	}
	c.start(t, 2, "dir", "20s", []string{"OOM_NODE=1"}, []string{"resume:" + filepath.Join(c.dir, "run0"), filepath.Join(c.dir, "run1b")})
	for i, p := range c.procs {
		if code := p.exit(t); code != 0 {
			t.Fatalf("member %d: exit status %d, want 0; stderr:\n%s", i, code, p.errb)
		}
	}
	ckpt := filepath.Join(c.dir, "ckpt", "step_100.pt")
	for i := range 2 {
		got := c.settings(t, i)
		want := fmt.Sprintf("node %d attempt 3 batch=32 accum=2 resume=%s", i, ckpt)
		if len(got) != 3 || got[2] != want {
			t.Errorf("node %d ran with %q, want its third attempt %q", i, got, want)
		}
	}
	if !strings.Contains(c.procs[0].errb.String(), "resuming run ") {
		t.Errorf("the leader did not resume its run:\n%s", c.procs[0].errb)
	}
	if starts := c.eventsIn(t, "run1b", "attempt_start"); len(starts) != 1 || starts[0]["attempt"] != 3.0 {
		t.Errorf("the fresh member's attempts %v, want one: attempt 3", starts)
	}
}
