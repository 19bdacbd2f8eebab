package slurmtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Command is a Slurm command (sbatch, scontrol, ...) for the cluster, run
// in dir.
func (c *Cluster) Command(dir, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir, cmd.Env = dir, c.Env
	return cmd
}

// Run runs a Slurm command and returns its output; failing fails the test.
func (c *Cluster) Run(t testing.TB, dir, name string, args ...string) string {
	t.Helper()
	out, err := c.Command(dir, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Submit writes script to dir/name and submits it with sbatch's args; the
// job is cancelled at the end of the test if it is still in the queue. It
// returns the job id.
func (c *Cluster) Submit(t testing.TB, dir, name, script string, args ...string) string {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	out := c.Run(t, dir, "sbatch", append(append([]string{"--parsable"}, args...), name)...)
	id, _, _ := strings.Cut(strings.TrimSpace(out), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", out)
	}
	t.Cleanup(func() { c.Cancel(t, id) })
	return id
}

// Cancel cancels a job still in the queue and waits until it has left it.
func (c *Cluster) Cancel(t testing.TB, id string) {
	info, err := c.ShowJob(id)
	if err != nil || Ended(info["JobState"]) {
		return
	}
	t.Logf("cancelling job %s (%s)", id, info["JobState"])
	c.Command("", "scancel", id).Run()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		info, err := c.ShowJob(id)
		if err != nil || Ended(info["JobState"]) {
			return
		}
		if info["JobState"] == "PENDING" {
			// Requeued by gpuguard on the SIGTERM (slurm.requeue_on):
			// cancelling a pending job removes it.
			c.Command("", "scancel", id).Run()
		}
		time.Sleep(200 * time.Millisecond) // polling Slurm: it has no notification to wait on
	}
	t.Errorf("job %s still in the queue a minute after scancel", id)
}

// ShowJob returns `scontrol show job -o ID` as fields (for an array job
// given as ARRAY_TASK, that task's).
func (c *Cluster) ShowJob(id string) (map[string]string, error) {
	out, err := c.Command("", "scontrol", "show", "job", "-o", id).CombinedOutput()
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

// Ended reports whether a job in this JobState has left the queue for good.
func Ended(state string) bool {
	switch state {
	case "PENDING", "RUNNING", "COMPLETING", "CONFIGURING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT":
		return false
	}
	return true
}

// WaitJob polls the job until cond holds (Slurm offers nothing to wait on
// but sbatch --wait, which polls too) and returns its fields then; what
// names the condition in the failure.
func (c *Cluster) WaitJob(t testing.TB, id string, within time.Duration, what string, cond func(map[string]string) bool) map[string]string {
	t.Helper()
	deadline := time.Now().Add(within)
	var info map[string]string
	var err error
	last := ""
	for {
		info, err = c.ShowJob(id)
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

// WaitEnd waits until the job has ended for good and returns its fields. A
// requeued job is left to wait its cred_expire+1 s (11 s on the tests'
// clusters): `scontrol update StartTime=now` would start it sooner, but a
// run started while the previous run's step daemon is still ending failed
// at once (JobState=FAILED ExitCode=1:0, RunTime 0) in one of our runs.
func (c *Cluster) WaitEnd(t testing.TB, id string, within time.Duration) map[string]string {
	t.Helper()
	return c.WaitJob(t, id, within, "end", func(info map[string]string) bool { return Ended(info["JobState"]) })
}

// WaitFile waits until file contains want and returns its content.
func WaitFile(t testing.TB, file, want string, within time.Duration) string {
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
		time.Sleep(50 * time.Millisecond) // the job's file: nothing to wait on
	}
}

// WantState checks a job's JobState and ExitCode.
func WantState(t testing.TB, info map[string]string, state, exit string) {
	t.Helper()
	if info["JobState"] != state || info["ExitCode"] != exit {
		t.Errorf("job %s: JobState=%s ExitCode=%s, want %s %s (%v)", info["JobId"], info["JobState"], info["ExitCode"], state, exit, info)
	}
}
