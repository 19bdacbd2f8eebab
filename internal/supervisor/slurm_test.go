package supervisor

// Tests of the requeue logic (slurm.go) without a Slurm cluster: gpuguard
// (the test binary in its -gpuguard role) runs in a temporary directory with
// a policy file there, a Slurm job's environment, and a stand-in scontrol
// first in PATH that records its arguments and answers as told. Signals are
// real, sent to the gpuguard process as Slurm would. The tests against a
// real Slurm are in slurm/slurm_test.go.

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// fakeScontrol is the stand-in: it appends its arguments to
// $FAKE_SCONTROL_LOG and answers as $FAKE_SCONTROL says (the messages are
// Slurm 22.05's).
const fakeScontrol = `#!/bin/sh
echo "$*" >> "$FAKE_SCONTROL_LOG"
case "$FAKE_SCONTROL" in
pending) echo "Job is pending execution for job $2" >&2; exit 1 ;;
disabled) echo "Requested operation is presently disabled for job $2" >&2; exit 1 ;;
broken) echo "slurm_load_jobs error: Unable to contact slurm controller (connect failure)" >&2; exit 1 ;;
esac
exit 0
`

type slurmCase struct {
	dir, log string
	g        *gpuguardProc
}

// startInSlurm runs gpuguard with policy (the text of gpuguard.yaml in a new
// working directory), the Slurm variables in slurmEnv, and argv as the job.
// scontrolMode "" answers success, "none" leaves scontrol out of PATH.
func startInSlurm(t *testing.T, policyText, scontrolMode string, slurmEnv []string, argv ...string) *slurmCase {
	t.Helper()
	return startInSlurmDir(t, t.TempDir(), policyText, scontrolMode, slurmEnv, argv...)
}

// startInSlurmDir is startInSlurm in the working directory dir, which an
// earlier run (of the same job, before a requeue) may have used.
func startInSlurmDir(t *testing.T, dir, policyText, scontrolMode string, slurmEnv []string, argv ...string) *slurmCase {
	t.Helper()
	c := &slurmCase{dir: dir}
	bin := filepath.Join(c.dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	c.log = filepath.Join(c.dir, "scontrol.log")
	// Without scontrol, PATH is only the empty bin: Slurm's real scontrol
	// may be installed in /usr/bin (and /bin is often the same directory).
	path := bin
	if scontrolMode != "none" {
		if err := os.WriteFile(filepath.Join(bin, "scontrol"), []byte(fakeScontrol), 0o755); err != nil {
			t.Fatal(err)
		}
		path = bin + ":/usr/bin:/bin"
	}
	if err := os.WriteFile(filepath.Join(c.dir, "gpuguard.yaml"), []byte(policyText), 0o644); err != nil {
		t.Fatal(err)
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "PATH=") && !strings.HasPrefix(kv, "GPUGUARD_") {
			env = append(env, kv)
		}
	}
	env = append(env, "PATH="+path, "FAKE_SCONTROL_LOG="+c.log, "FAKE_SCONTROL="+scontrolMode)
	env = append(env, slurmEnv...)

	g := &gpuguardProc{out: &supervisortest.SyncBuffer{}, errb: &supervisortest.SyncBuffer{}}
	cmd := exec.Command(testBinary(), append([]string{"-gpuguard", "never", "1s", "-", "--"}, argv...)...)
	cmd.Dir, cmd.Env = c.dir, env
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdin, g.stdin = r, w
	cmd.Stdout, cmd.Stderr = g.out, g.errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r.Close()
	t.Cleanup(func() { g.stdin.Close() }) // after gpuguard is gone (cleanups run last first)
	g.cmd, g.done = cmd, supervisortest.WaitInBackground(t, cmd)
	c.g = g
	return c
}

// scontrolCalls returns the argument lines the stand-in scontrol got.
func (c *slurmCase) scontrolCalls() []string {
	data, err := os.ReadFile(c.log)
	if err != nil {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

// wantJobEnd checks how a Slurm case ended: the job's own status 1, the
// scontrol calls made (joined by "|"), and lines its stderr holds.
func (c *slurmCase) wantJobEnd(t *testing.T, calls string, stderr ...string) {
	t.Helper()
	if code := c.g.exitCode(t); code != 1 {
		t.Errorf("exit status %d, want the job's 1; stderr:\n%s", code, c.g.errb)
	}
	if got := strings.Join(c.scontrolCalls(), "|"); got != calls {
		t.Errorf("scontrol calls %q, want %q", got, calls)
	}
	wantContains(t, "stderr", c.g.errb.String(), stderr...)
}

// events returns the run directory's events of type typ.
func (c *slurmCase) events(t *testing.T, runDir, typ string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(c.dir, ".gpuguard", "runs", runDir, eventsName))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev map[string]any
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatalf("events.jsonl: %v: %q", err, line)
		}
		if ev["type"] == typ {
			out = append(out, ev)
		}
	}
	return out
}

func (c *slurmCase) state(t *testing.T, runDir string) runState {
	t.Helper()
	return readState(t, filepath.Join(c.dir, ".gpuguard", "runs", runDir))
}

// requeuePolicy gives the job a minute to exit after the signal: the tests
// end it themselves (by closing its input), except stopPolicy's.
const requeuePolicy = `version: 1
slurm:
  requeue_on: [SIGUSR2, SIGTERM]
  stop_after: 1m
  max_requeues: 3
`

const stopPolicy = `version: 1
slurm:
  requeue_on: [SIGUSR2, SIGTERM]
  stop_after: 1s
`

func wantContains(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// A job that ignores the requeue signal is stopped stop_after later, not
// relaunched, and the Slurm job is requeued; gpuguard exits with the job's
// status.
func TestRequeueAfterSignalStopsTheJob(t *testing.T) {
	c := startInSlurm(t, stopPolicy, "", []string{"SLURM_JOB_ID=42", "SLURMD_NODENAME=n1", "SLURM_NODELIST=n1"},
		fake("trap", "signals")...)
	supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "ready")
	c.g.signal(t, syscall.SIGUSR2)
	code := c.g.exitCode(t)
	// The fake records SIGTERM and goes on: Stop's SIGKILL ends it.
	if code != 128+int(syscall.SIGKILL) {
		t.Errorf("exit status %d, want %d (the job's own: SIGKILL after stop_after and --grace); stderr:\n%s", code, 128+int(syscall.SIGKILL), c.g.errb)
	}
	if got := supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "TERM"); !strings.Contains(got, "USR2\n") {
		t.Errorf("the job did not get SIGUSR2 before being stopped: %q", got)
	}
	if calls := c.scontrolCalls(); len(calls) != 1 || calls[0] != "requeue 42" {
		t.Errorf("scontrol calls %q, want [requeue 42]", calls)
	}
	wantContains(t, "stderr", c.g.errb.String(),
		"Slurm job 42, restart 0, nodes n1; on SIGUSR2 or SIGTERM the job stops and is requeued (scontrol requeue 42)",
		"SIGUSR2: no more relaunches here; the job has 1s to save a checkpoint and exit, then gpuguard requeues job 42",
		"the job did not exit within 1s of SIGUSR2: stopping it",
		"attempt 1 ended (exit status 137) after SIGUSR2: not relaunching here, the job is requeued",
		"requeued Slurm job 42 after SIGUSR2 (scontrol requeue 42): it continues from .gpuguard/runs/slurm-42")
	if n := len(c.events(t, "slurm-42", "attempt_start")); n != 1 {
		t.Errorf("%d attempts started, want 1", n)
	}
	req := c.events(t, "slurm-42", "requeue")
	if len(req) != 1 || req[0]["result"] != "requeued" || req[0]["signal"] != "SIGUSR2" || req[0]["job"] != "42" {
		t.Errorf("requeue events %v", req)
	}
	if st := c.state(t, "slurm-42"); st.Attempt != 1 || !st.Done || st.ExitCode != 137 {
		t.Errorf("state.json %+v", st)
	}
}

// A job that exits by itself after the signal is requeued too, even with
// status 0, and an array task is requeued in the ARRAYJOB_TASK form.
func TestRequeueArrayTaskAfterCleanExit(t *testing.T) {
	c := startInSlurm(t, requeuePolicy, "", []string{"SLURM_JOB_ID=57", "SLURM_ARRAY_JOB_ID=40", "SLURM_ARRAY_TASK_ID=2"},
		fake("record", "signals")...)
	supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "ready")
	c.g.signal(t, syscall.SIGUSR2)
	supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "USR2")
	c.g.stdin.Close() // the fake exits 0 at the end of its input
	if code := c.g.exitCode(t); code != 0 {
		t.Errorf("exit status %d, want 0; stderr:\n%s", code, c.g.errb)
	}
	if calls := c.scontrolCalls(); len(calls) != 1 || calls[0] != "requeue 40_2" {
		t.Errorf("scontrol calls %q, want [requeue 40_2]", calls)
	}
	wantContains(t, "stderr", c.g.errb.String(),
		"the job exited 0 after SIGUSR2; requeueing it anyway",
		"requeued Slurm job 40_2 after SIGUSR2")
	if st := c.state(t, "slurm-40_2"); st.Attempt != 1 {
		t.Errorf("state.json %+v", st)
	}
}

// SIGTERM listed in requeue_on: forwarded (a terminating signal), never
// relaunched, requeued.
func TestRequeueOnSIGTERM(t *testing.T) {
	c := startInSlurm(t, requeuePolicy, "", []string{"SLURM_JOB_ID=43"}, fake("record", "signals")...)
	supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "ready")
	c.g.signal(t, syscall.SIGTERM)
	supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "TERM")
	c.g.stdin.Close()
	c.g.exitCode(t)
	if calls := c.scontrolCalls(); len(calls) != 1 || calls[0] != "requeue 43" {
		t.Errorf("scontrol calls %q, want [requeue 43]; stderr:\n%s", calls, c.g.errb)
	}
}

// A signal not in requeue_on, and any signal outside Slurm or without a
// slurm: section, requeues nothing: the job just gets the signal.
func TestNoRequeue(t *testing.T) {
	for _, tc := range []struct {
		name, policy string
		env          []string
		sig          syscall.Signal
		note         string
	}{
		{"signal not listed", requeuePolicy, []string{"SLURM_JOB_ID=44"}, syscall.SIGUSR1, ""},
		{"outside Slurm", requeuePolicy, nil, syscall.SIGUSR2, ""},
		{"no slurm section", "version: 1\n", []string{"SLURM_JOB_ID=45"}, syscall.SIGUSR2, "no requeue (the policy has no slurm: section)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := startInSlurm(t, tc.policy, "", tc.env, fake("record", "signals")...)
			supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "ready")
			c.g.signal(t, tc.sig)
			supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), strings.TrimPrefix(signalName(tc.sig), "SIG"))
			c.g.stdin.Close()
			if code := c.g.exitCode(t); code != 0 {
				t.Errorf("exit status %d, want 0; stderr:\n%s", code, c.g.errb)
			}
			if calls := c.scontrolCalls(); len(calls) != 0 {
				t.Errorf("scontrol was called: %q", calls)
			}
			if strings.Contains(c.g.errb.String(), "requeued Slurm job") || strings.Contains(c.g.errb.String(), "no more relaunches") {
				t.Errorf("stderr mentions a requeue:\n%s", c.g.errb)
			}
			wantContains(t, "stderr", c.g.errb.String(), tc.note)
		})
	}
}

// What scontrol answers, and when gpuguard must not call it.
func TestRequeueOutcomes(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		env        []string
		calls      int
		result     string
		want       []string
	}{
		{"already requeued", "pending", nil, 1, "already",
			[]string{"Slurm job 46 was already requeued (by Slurm, or by the job itself): Job is pending execution for job 46"}},
		{"not requeueable", "disabled", nil, 1, "refused",
			[]string{"Slurm refuses to requeue job 46 (scontrol requeue 46: Requested operation is presently disabled for job 46): submit it with #SBATCH --requeue"}},
		{"controller down", "broken", nil, 1, "failed",
			[]string{"scontrol requeue 46 failed: slurm_load_jobs error: Unable to contact slurm controller (connect failure); the job ends here and may not be started again"}},
		{"no scontrol", "none", nil, 0, "no scontrol",
			[]string{
				"warning: scontrol, Slurm's client command, is not installed here (not found in PATH=",
				"), so gpuguard cannot requeue the job",
				"cannot requeue Slurm job 46: scontrol, Slurm's client command, is not installed here",
				"(requeue it by hand: scontrol requeue 46)",
			}},
		{"not rank 0", "", []string{"SLURM_NTASKS=2", "SLURM_STEP_ID=0", "SLURM_PROCID=1", "GPUGUARD_GROUP=off"}, 0, "not rank 0",
			[]string{
				"on SIGUSR2 or SIGTERM the job stops, and the task of rank 0 requeues it",
				"not requeueing job 46 from rank 1: the task of rank 0 does",
			}},
		{"max_requeues reached", "", []string{"SLURM_RESTART_COUNT=3"}, 0, "max_requeues",
			[]string{
				"restarted 3 times already (slurm.max_requeues: 3): it will not be requeued again",
				"not requeueing job 46 after SIGUSR2: Slurm has restarted it 3 times already (slurm.max_requeues: 3)",
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := append([]string{"SLURM_JOB_ID=46"}, tc.env...)
			c := startInSlurm(t, requeuePolicy, tc.mode, env, fake("record", "signals")...)
			supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "ready")
			c.g.signal(t, syscall.SIGUSR2)
			supervisortest.WaitFile(t, filepath.Join(c.dir, "signals"), "USR2")
			c.g.stdin.Close()
			if code := c.g.exitCode(t); code != 0 {
				t.Errorf("exit status %d, want the job's 0; stderr:\n%s", code, c.g.errb)
			}
			if calls := c.scontrolCalls(); len(calls) != tc.calls {
				t.Errorf("scontrol calls %q, want %d", calls, tc.calls)
			}
			wantContains(t, "stderr", c.g.errb.String(), tc.want...)
			runDir := "slurm-46"
			if tc.name == "not rank 0" {
				runDir = "slurm-46-task1"
			}
			req := c.events(t, runDir, "requeue")
			if len(req) != 1 || req[0]["result"] != tc.result {
				t.Errorf("requeue events %v, want one with result %q", req, tc.result)
			}
		})
	}
}

// A requeue signal during the wait before a relaunch ends the wait at once:
// no relaunch, and state.json keeps the settings the policy just chose, for
// the requeued job.
func TestRequeueSignalDuringBackoff(t *testing.T) {
	policyText := `version: 1
knobs:
  batch_size: {env: BS, default: 8}
rules:
  - name: oom
    when: {kind: gpu_oom}
    steps: [{halve: batch_size, min: 1}]
backoff: {initial: 10m, max: 10m, jitter: 0}
slurm: {requeue_on: SIGUSR2}
`
	script := `echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 15.77 GiB of which 1.02 GiB is free."; exit 1`
	c := startInSlurm(t, policyText, "", []string{"SLURM_JOB_ID=47"}, "/bin/sh", "-c", script)
	supervisortest.WaitChan(t, c.g.errb.Seen("relaunching in 10m0s"), "the relaunch decision")
	c.g.signal(t, syscall.SIGUSR2)
	if code := c.g.exitCode(t); code != 1 {
		t.Errorf("exit status %d, want the job's 1; stderr:\n%s", code, c.g.errb)
	}
	wantContains(t, "stderr", c.g.errb.String(),
		"SIGUSR2 received while waiting to relaunch: not relaunching",
		"requeued Slurm job 47 after SIGUSR2 (scontrol requeue 47): it continues from .gpuguard/runs/slurm-47 with batch_size=4")
	if n := len(c.events(t, "slurm-47", "attempt_start")); n != 1 {
		t.Errorf("%d attempts started, want 1", n)
	}
	st := c.state(t, "slurm-47")
	if v := st.Policies.Values["batch_size"]; v.Text != "4" || st.Attempt != 1 {
		t.Errorf("state.json: attempt %d, batch_size %v; want 1 and 4", st.Attempt, v)
	}
}
