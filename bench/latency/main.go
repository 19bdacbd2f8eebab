// Command latency measures gpuguard's relaunch latency: the time from the
// moment a job that died of a GPU out-of-memory error exits to the moment
// the next attempt starts running, with a policy whose backoff is zero (so
// the figure is gpuguard's own cost: reaping and sweeping the tree, the
// classifier's verdict, the decision, state.json, the next watchdog and
// the next exec). The target is 0.2 s plus the policy's backoff.
//
// The job is this program re-executed: each attempt reads CLOCK_MONOTONIC
// first thing in main and again just before it exits, and appends both to
// a file; attempts 1..K print PyTorch's CUDA OOM error and exit 1, attempt
// K+1 exits 0. gpuguard is this program too, calling supervisor.Run as
// main.go does. For comparison, the same job is relaunched by a bare loop
// (exec, wait, exec again: the cost no supervisor can avoid), and the
// program prints the ratio of the two medians, measured in the same run.
//
//	go run ./bench/latency                       # 5 runs × 10 relaunches per launcher
//	go run ./bench/latency -runs 20 -relaunches 10
//
// It also measures the case where each attempt saved a checkpoint (a plain
// write, as torch.save does) 5 s before it dies, inside the checkpoint quiet
// period, and the next attempt is resumed from it: once the job's processes
// are gone the checkpoint is chosen at once, with no quiet period to wait out.
//
// The machine's load average is printed with the figures: on a shared
// machine they are upper bounds.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/bench/internal/stat"
	"github.com/gpuguard/gpuguard/internal/supervisor"
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-job":
			os.Exit(job(os.Args[2]))
		case "-gpuguard":
			os.Exit(gpuguard(os.Args[2:]))
		case "run":
			if len(os.Args) > 3 && supervisor.IsWatchdogInvocation(os.Args[3:]) {
				os.Exit(supervisor.Run(supervisor.Config{Argv: os.Args[3:]}))
			}
		}
	}
	os.Exit(bench())
}

// job is one attempt: it appends "start N NS" and "exit N NS" to
// DIR/times; attempts up to DIR/k die of a (printed) CUDA OOM.
func job(dir string) int {
	start := stat.Monotonic()
	prev, _ := os.ReadFile(filepath.Join(dir, "count"))
	n := len(prev) + 1
	os.WriteFile(filepath.Join(dir, "count"), append(prev, '.'), 0o644)
	kb, _ := os.ReadFile(filepath.Join(dir, "k"))
	k, _ := strconv.Atoi(strings.TrimSpace(string(kb)))
	f, err := os.OpenFile(filepath.Join(dir, "times"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency job:", err)
		return 2
	}
	fmt.Fprintf(f, "start %d %d\n", n, start)
	code := 0
	if n <= k {
		if _, err := os.Stat(filepath.Join(dir, "checkpoints")); err == nil {
			// Saved in place, as torch.save does, some steps before the
			// OOM (its time set back 5 s, well inside the 10 s quiet period).
			os.MkdirAll(filepath.Join(dir, "ckpt"), 0o755)
			ckpt := filepath.Join(dir, "ckpt", fmt.Sprintf("step_%d.pt", n*100))
			os.WriteFile(ckpt, make([]byte, 1<<20), 0o644)
			saved := time.Now().Add(-5 * time.Second)
			os.Chtimes(ckpt, saved, saved)
		}
		// The request shrinks from attempt to attempt, as it does when a
		// relaunch halves the batch: the same request would tell the policy
		// that the batch is not the cause.
		fmt.Fprintf(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate %.2f GiB. GPU 0 has a total capacity of 16.00 GiB of which 1.00 GiB is free.\n", 2/float64(n))
		code = 1
	}
	fmt.Fprintf(f, "exit %d %d\n", n, stat.Monotonic())
	f.Close()
	return code
}

func gpuguard(args []string) int {
	fs := flag.NewFlagSet("gpuguard", flag.ContinueOnError)
	ptyMode := fs.String("pty", "never", "")
	runDir := fs.String("run-dir", "", "")
	pol := fs.String("policy", "", "")
	if err := fs.Parse(args); err != nil {
		return supervisor.ExitUsage
	}
	return supervisor.Run(supervisor.Config{
		Argv: fs.Args(), PTY: *ptyMode, RunDir: *runDir, Policy: *pol, Grace: 10 * time.Second,
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
	})
}

const policyText = `version: 1
description: relaunch latency benchmark (zero backoff)
knobs:
  batch_size:
    flag: --batch-size
rules:
  - name: oom
    when: {kind: gpu_oom}
    steps:
      - halve: batch_size
        min: 1
budget:
  relaunches: %d
  per_kind: {gpu_oom: %d}
backoff: {initial: 0s}
checkpoints:
  globs: [ckpt/step_*.pt]
  choose: highest_step
  pass: {flag: --resume}
  earlier_runs: true   # the attempts last milliseconds: a save dated 5 s back predates the run
`

// latencies reads DIR/times and returns exit(i) → start(i+1) per relaunch.
func latencies(dir string) ([]time.Duration, error) {
	data, err := os.ReadFile(filepath.Join(dir, "times"))
	if err != nil {
		return nil, err
	}
	starts, exits := map[int]int64{}, map[int]int64{}
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var what string
		var n int
		var ns int64
		if _, err := fmt.Sscanf(l, "%s %d %d", &what, &n, &ns); err != nil {
			return nil, fmt.Errorf("%s/times: %q: %v", dir, l, err)
		}
		if what == "start" {
			starts[n] = ns
		} else {
			exits[n] = ns
		}
	}
	var out []time.Duration
	for n := 1; ; n++ {
		e, ok1 := exits[n]
		s, ok2 := starts[n+1]
		if !ok1 || !ok2 {
			break
		}
		out = append(out, time.Duration(s-e))
	}
	return out, nil
}

func prepare(base string, k int) (string, error) {
	dir, err := os.MkdirTemp(base, "run")
	if err != nil {
		return "", err
	}
	return dir, os.WriteFile(filepath.Join(dir, "k"), []byte(strconv.Itoa(k)), 0o644)
}

func bench() int {
	runs := flag.Int("runs", 5, "gpuguard runs per launcher")
	k := flag.Int("relaunches", 10, "relaunches per run")
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		return 1
	}
	base, err := os.MkdirTemp("", "gpuguard-latency-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		return 1
	}
	defer os.RemoveAll(base)
	pol := filepath.Join(base, "policy.yaml")
	if err := os.WriteFile(pol, fmt.Appendf(nil, policyText, *k, *k), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "latency:", err)
		return 1
	}

	// The bare loop: the same job, relaunched as soon as it exits.
	var bare []time.Duration
	for r := 0; r < *runs; r++ {
		dir, err := prepare(base, *k)
		if err != nil {
			fmt.Fprintln(os.Stderr, "latency:", err)
			return 1
		}
		for i := 0; i <= *k; i++ {
			cmd := exec.Command(self, "-job", dir, "--batch-size", "1024")
			cmd.Run() // the attempts before the last exit 1 on purpose
		}
		l, err := latencies(dir)
		if err != nil {
			fmt.Fprintln(os.Stderr, "latency:", err)
			return 1
		}
		bare = append(bare, l...)
	}
	fmt.Printf("load average: %s\n", stat.LoadAvg())
	fmt.Printf("%-38s %8s %10s %10s %10s\n", "relaunched by", "samples", "median", "p95", "max")
	report("bare exec loop", bare)
	bareMedian := stat.Pct(bare, 50)

	for _, c := range []struct {
		mode  string
		ckpts bool
	}{{"never", false}, {"always", false}, {"never", true}} {
		var all []time.Duration
		for r := 0; r < *runs; r++ {
			l, err := measure(self, base, pol, c.mode, *k, c.ckpts)
			if err != nil {
				fmt.Fprintln(os.Stderr, "latency:", err)
				return 1
			}
			all = append(all, l...)
		}
		name := "gpuguard --pty " + c.mode
		if c.ckpts {
			name += ", checkpoints"
		}
		report(name, all)
		fmt.Printf("%-38s median %.1f× the bare loop's; p95 %s against the 200ms target\n", "", float64(stat.Pct(all, 50))/float64(bareMedian), verdict(stat.Pct(all, 95)))
	}
	fmt.Printf("load average: %s\n", stat.LoadAvg())
	return 0
}

// measure runs gpuguard (self in its -gpuguard role) once, with the
// policy file pol and --pty mode, on a job that dies of OOM k times, and
// returns the k relaunch latencies.
func measure(self, base, pol, mode string, k int, ckpts bool) ([]time.Duration, error) {
	dir, err := prepare(base, k)
	if err != nil {
		return nil, err
	}
	if ckpts {
		if err := os.WriteFile(filepath.Join(dir, "checkpoints"), nil, 0o644); err != nil {
			return nil, err
		}
	}
	cmd := exec.Command(self, "-gpuguard", "--pty", mode, "--policy", pol, "--run-dir", filepath.Join(dir, "rundir"), "--",
		self, "-job", dir, "--batch-size", "1048576")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("gpuguard --pty %s: %v\n%s", mode, err, out)
	}
	l, err := latencies(dir)
	if err != nil {
		return nil, err
	}
	if len(l) != k {
		return nil, fmt.Errorf("gpuguard --pty %s relaunched %d times, want %d:\n%s", mode, len(l), k, out)
	}
	if ckpts && !strings.Contains(string(out), fmt.Sprintf("--resume %s", filepath.Join(dir, "ckpt", fmt.Sprintf("step_%d.pt", k*100)))) {
		return nil, fmt.Errorf("gpuguard --pty %s did not resume from the last checkpoint:\n%s", mode, out)
	}
	return l, nil
}

func verdict(d time.Duration) string {
	if d <= 200*time.Millisecond {
		return "within"
	}
	return "OVER"
}

func report(name string, d []time.Duration) {
	fmt.Printf("%-38s %8d %10s %10s %10s\n", name, len(d), stat.Ms(stat.Pct(d, 50)), stat.Ms(stat.Pct(d, 95)), stat.Ms(stat.Pct(d, 100)))
}
