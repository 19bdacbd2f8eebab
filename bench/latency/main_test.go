package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// The test binary plays the benchmark's roles, as the built program does.
func TestMain(m *testing.M) {
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
	os.Exit(m.Run())
}

// The measurement works end to end under both launchers: gpuguard
// relaunches the job after each of its k OOMs, and every latency is a
// positive duration read from the job's own CLOCK_MONOTONIC stamps. (No
// figure is asserted: speed is measured by running the program.)
func TestMeasure(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	pol := filepath.Join(base, "policy.yaml")
	if err := os.WriteFile(pol, fmt.Appendf(nil, policyText, 3, 3), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		mode  string
		ckpts bool
	}{{"never", false}, {"always", false}, {"never", true}} {
		mode := c.mode
		l, err := measure(self, base, pol, mode, 3, c.ckpts)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range l {
			if d <= 0 {
				t.Errorf("--pty %s: relaunch %d took %v", mode, i+1, d)
			}
		}
	}
	// One more OOM than the budget: gpuguard gives up, with the job's status.
	if _, err := measure(self, base, pol, "never", 4, false); err == nil {
		t.Error("a job that dies of OOM once more than the budget allows was measured as relaunched")
	}
}
