package supervisor

import (
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/gpu/gputest"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// cpuTime is the CPU time this process used (user and system), in ns.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// listedTree is a job's process tree as the attempt lists it: real
// processes, listed from memory (the attempt's tree scan, which the
// sampler pays for anyway).
type listedTree struct{ procs []procfs.Proc }

func (l *listedTree) PID() int                                  { return l.procs[0].PID }
func (l *listedTree) Processes(dst []procfs.Proc) []procfs.Proc { return append(dst, l.procs...) }
func (l *listedTree) Done() <-chan struct{}                     { return nil }
func (l *listedTree) Stop(string)                               {}
func (l *listedTree) Signal(syscall.Signal)                     {}

// BenchmarkHangActivity is what the hang watchdog's second signal costs
// gpuguard: one reading of a job's tree (CPU time and state from
// /proc/PID/stat, I/O from /proc/PID/io, the zombie children of every
// thread, the GPUs' memory and utilisation through the probe: here the
// fake, whose cost is nothing; NVML's own is BenchmarkRealNVMLSample in
// internal/probes/gpu) and the verdict on two readings. The tree is this
// process (the test binary: about ten threads, each of whose children
// lists are read) and procs-1 sleeping children. cpu-µs/op is the CPU
// time of one reading and verdict; %CPU@10Hz is the share of one CPU that
// reading at 10 Hz would take; the watchdog reads
// twice per look (a window of at least 1 s), once the rhythm's limit has
// passed, so this is a bound far above what it takes.
//
//	go test -run '^$' -bench HangActivity -benchtime 2s ./internal/supervisor/
func BenchmarkHangActivity(b *testing.B) {
	for _, n := range []int{1, 9, 33} {
		b.Run(fmt.Sprintf("procs=%d", n), func(b *testing.B) {
			tree := &listedTree{}
			self, err := procfs.ReadStat("", os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			tree.procs = append(tree.procs, self)
			for range n - 1 {
				c := exec.Command("sleep", "600")
				if err := c.Start(); err != nil {
					b.Fatal(err)
				}
				b.Cleanup(func() { c.Process.Kill(); c.Wait() })
				st, err := procfs.ReadStat("", c.Process.Pid)
				if err != nil {
					b.Fatal(err)
				}
				tree.procs = append(tree.procs, st)
			}
			g := gputest.NewFake(1, 80<<30)
			g.SetUtil("gpu0", 100, 0)
			w := newActivityWatch(g, time.Now)
			w.track(tree)
			prev := w.snap(tree)
			b.ResetTimer()
			cpu0 := cpuTime(b)
			for range b.N {
				s := w.snap(tree)
				v := judge(prev, s, w.workers)
				if v.Processes != n {
					b.Fatalf("%d processes read, want %d", v.Processes, n)
				}
				prev = s
			}
			// gpuguard's CPU time, not the wall clock: on a loaded
			// machine the wall clock counts the waits for a CPU.
			per := float64(cpuTime(b)-cpu0) / float64(b.N)
			b.ReportMetric(per/1e3, "cpu-µs/op")
			b.ReportMetric(per*10/1e9*100, "%CPU@10Hz")
		})
	}
}
