// Command hang measures the stall watchdog's detection delay: the time from
// a job's last training step to the SIGTERM gpuguard's stop sends it, on a
// job with a 1 s step rhythm that then hangs. With the policy's
// hang: {min: 1s, factor: 3, max: 1h} the limit is 3 × the usual interval
// (about 3 s); the figure to read is the delay beyond it: what gpuguard adds
// to the limit the policy asks for.
//
// The job is this program re-executed: it prints "step N loss ..." every
// second, reads CLOCK_MONOTONIC as it prints the last step and again when
// SIGTERM arrives, and appends both to a file. gpuguard is this program too,
// calling supervisor.Run as main.go does.
//
//	go run ./bench/hang                 # 5 runs, 6 steps each
//	go run ./bench/hang -runs 10 -steps 8
//
// The machine's load average is printed with the figures: on a shared
// machine they are upper bounds.
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gpuguard/gpuguard/bench/internal/stat"
	"github.com/gpuguard/gpuguard/internal/supervisor"
)

const (
	rhythm = time.Second
	factor = 3
)

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "-job":
			os.Exit(job(os.Args[2], os.Args[3]))
		case "-gpuguard":
			os.Exit(supervisor.Run(supervisor.Config{
				Argv: os.Args[5:], PTY: "never", Policy: os.Args[2], RunDir: os.Args[3], Grace: 10 * time.Second,
				Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
			}))
		case "run":
			if len(os.Args) > 3 && supervisor.IsWatchdogInvocation(os.Args[3:]) {
				os.Exit(supervisor.Run(supervisor.Config{Argv: os.Args[3:]}))
			}
		}
	}
	os.Exit(bench())
}

// job prints steps at the rhythm, then hangs; it records "last NS" at its
// last step and "term NS" when SIGTERM arrives, in DIR/times.
func job(dir, steps string) int {
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	var n int
	fmt.Sscan(steps, &n)
	f, err := os.OpenFile(filepath.Join(dir, "times"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hang job:", err)
		return 2
	}
	next := time.Now()
	for i := 1; i <= n; i++ {
		time.Sleep(time.Until(next))
		next = next.Add(rhythm)
		fmt.Printf("step %d loss 0.%d\n", i, i)
		if i == n {
			fmt.Fprintf(f, "last %d\n", stat.Monotonic())
		}
	}
	<-term
	fmt.Fprintf(f, "term %d\n", stat.Monotonic())
	f.Close()
	return 143
}

const policyText = `version: 1
description: stall watchdog detection delay benchmark
hang: {min: 1s, factor: %d, max: 1h}
`

func bench() int {
	runs := flag.Int("runs", 5, "gpuguard runs")
	steps := flag.Int("steps", 6, "steps before the job hangs")
	flag.Parse()
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hang:", err)
		return 1
	}
	base, err := os.MkdirTemp("", "gpuguard-hang-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "hang:", err)
		return 1
	}
	defer os.RemoveAll(base)
	pol := filepath.Join(base, "policy.yaml")
	if err := os.WriteFile(pol, fmt.Appendf(nil, policyText, factor), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "hang:", err)
		return 1
	}
	fmt.Printf("load average: %s\n", stat.LoadAvg())
	var delays []time.Duration
	for r := 0; r < *runs; r++ {
		dir, err := os.MkdirTemp(base, "run")
		if err != nil {
			fmt.Fprintln(os.Stderr, "hang:", err)
			return 1
		}
		cmd := exec.Command(self, "-gpuguard", pol, filepath.Join(dir, "rundir"), "--", self, "-job", dir, fmt.Sprint(*steps))
		cmd.Dir = dir
		out, _ := cmd.CombinedOutput() // the job's status (143) is passed on
		if !strings.Contains(string(out), "the job looks hung") {
			fmt.Fprintf(os.Stderr, "hang: run %d: gpuguard did not stop the job as hung:\n%s", r+1, out)
			return 1
		}
		var last, term int64
		data, _ := os.ReadFile(filepath.Join(dir, "times"))
		for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			var what string
			var ns int64
			fmt.Sscanf(l, "%s %d", &what, &ns)
			if what == "last" {
				last = ns
			} else if what == "term" {
				term = ns
			}
		}
		if last == 0 || term == 0 {
			fmt.Fprintf(os.Stderr, "hang: run %d: times %q\n%s", r+1, data, out)
			return 1
		}
		delays = append(delays, time.Duration(term-last))
	}
	limit := factor * rhythm
	fmt.Printf("step rhythm %s, hang factor %d: limit about %s\n", rhythm, factor, limit)
	fmt.Printf("%-30s %8s %10s %10s %10s\n", "", "samples", "median", "p95", "max")
	report("last step → SIGTERM", delays)
	over := make([]time.Duration, len(delays))
	for i, d := range delays {
		over[i] = d - limit
	}
	report("beyond the limit", over)
	fmt.Printf("load average: %s\n", stat.LoadAvg())
	return 0
}

func report(name string, d []time.Duration) {
	fmt.Printf("%-30s %8d %10s %10s %10s\n", name, len(d), stat.Ms(stat.Pct(d, 50)), stat.Ms(stat.Pct(d, 95)), stat.Ms(stat.Pct(d, 100)))
}
