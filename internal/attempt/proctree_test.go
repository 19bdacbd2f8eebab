package attempt

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/gpu/gputest"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/probes/procfs/procfstest"
	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

func pidsOf(ps []procInfo) []int {
	return procfstest.SortedPIDs(ps, func(p procInfo) int { return p.pid })
}

// readStat reads one process; ok is false when it is gone.
func readStat(pid int) (procInfo, bool) {
	p, err := procfs.ReadStat("/proc", pid)
	return infoOf(p), err == nil
}

// The killer and the memory sampler agree on what the job is. The job
// leaves behind a process that is no longer in its tree: a shell in a
// session of its own starts it and exits, and it is re-parented to gpuguard
// (the subreaper), but it carries the attempt's marker. The tracker finds
// it, the sampler (which used to walk the tree by parentage, and missed it)
// measures it and hands its pid to the GPU probe, and Kill kills it.
func TestKillerAndSamplerAgreeOnEscapedProcess(t *testing.T) {
	dir := t.TempDir()
	pidFile, leftFile := filepath.Join(dir, "escaped"), filepath.Join(dir, "left")
	env := append(os.Environ(), "PIDFILE="+pidFile, "LEFTFILE="+leftFile,
		// Written once the escaped shell runs (its environment is in place),
		// then kept alive.
		`ESCAPE=echo $$ > "$PIDFILE.tmp" && mv "$PIDFILE.tmp" "$PIDFILE"; while :; do sleep 60; done`)
	a := start(t, Spec{Env: env, Grace: time.Second, Argv: []string{"sh", "-c",
		`setsid sh -c 'sh -c "$ESCAPE" </dev/null >/dev/null 2>&1 &'
		echo left > "$LEFTFILE.tmp" && mv "$LEFTFILE.tmp" "$LEFTFILE"
		exec sleep 60`}})
	escaped, err := strconv.Atoi(strings.TrimSpace(supervisortest.WaitFile(t, pidFile, "\n")))
	if err != nil {
		t.Fatal(err)
	}
	supervisortest.WaitFile(t, leftFile, "\n") // the shell that started it has exited
	if p, ok := readStat(escaped); !ok || p.ppid != os.Getpid() {
		t.Fatalf("escaped process %d: %+v, want it re-parented to the test process (the subreaper)", escaped, p)
	}
	if h, err := procfs.ReadHost("/proc", a.PID()); err != nil || h.Processes != 1 {
		t.Fatalf("the main child's tree by parentage: %d processes, %v; want the main child alone", h.Processes, err)
	}

	killer := pidsOf(a.tracker.scan())
	if !slices.Contains(killer, escaped) || !slices.Contains(killer, a.PID()) {
		t.Fatalf("the tracker finds %v, want the main child %d and the escaped %d", killer, a.PID(), escaped)
	}

	gpu := gputest.NewFake(1, 1<<30)
	sampled := make(chan struct{}, 1)
	gpu.Notify(sampled)
	s := memory.NewSampler(memory.SamplerConfig{GPU: gpu})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() { defer close(ran); s.RunJob(ctx, a) }()
	<-sampled
	cancel()
	<-ran
	measured := gpu.Pids()
	if !slices.Contains(measured, escaped) || !slices.Contains(measured, a.PID()) {
		t.Errorf("the sampler measured %v, want the main child %d and the escaped %d", measured, a.PID(), escaped)
	}
	// The escaped shell's sleep may start after the sampler's look, not the
	// other way round: what was measured, the killer still sees.
	killer = pidsOf(a.tracker.scan())
	for _, pid := range measured {
		if !slices.Contains(killer, pid) {
			t.Errorf("the sampler measured %d, which the killer does not see (%v)", pid, killer)
		}
	}

	a.Kill("test")
	res := waitDone(t, a)
	if !res.Killed {
		t.Errorf("result %+v: want SIGKILL sent", res)
	}
	supervisortest.Gone(t, escaped)
}

// BenchmarkTrackerScan: one look at a job's tree (a fake trainer with two
// grandchildren) on a machine running 300 more processes, by a full scan
// (every process's stat file) and by the periodic quick scan (members and
// new processes; every fullScanEvery-th one full):
//
//	go test ./internal/attempt -run '^$' -bench TrackerScan
func BenchmarkTrackerScan(b *testing.B) {
	for i := 0; i < 300; i++ {
		c := exec.Command("sleep", "600")
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Process.Kill(); c.Wait() })
	}
	dir := b.TempDir()
	a, err := Start(Spec{Argv: fake("tree", filepath.Join(dir, "pids")), Grace: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { a.Kill("done"); <-a.Done() })
	for _, m := range []struct {
		name string
		scan func() []procInfo
	}{{"full", a.tracker.scan}, {"quick", a.tracker.scanQuick}} {
		b.Run(m.name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if len(m.scan()) == 0 {
					b.Fatal("empty tree")
				}
			}
		})
	}
}
