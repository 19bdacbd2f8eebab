//go:build cgo && !nonvml

package memory

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/gpu/nvmltest"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"go.uber.org/zap"
)

// Benchmarks of the sampler's cost, recorded in docs/performance.md
// ("Sampler"). Run them with
//
//	CGO_CFLAGS=-Wno-deprecated-declarations go test ./internal/probes/memory -run '^$' -bench 'SamplerCPU' -benchtime 3000x
//	CGO_CFLAGS=-Wno-deprecated-declarations go test ./internal/probes/memory -run '^$' -bench 'Sampler24h' -benchtime 1x -timeout 30m

// benchGPU is an 8-GPU go-nvml mock (DGX A100) where every device lists the
// given pid, opened through the real probe code (goroutine and timeout per
// sample included).
func benchGPU(b *testing.B, pid int) gpu.Probe {
	srv := dgxa100.New()
	nvmltest.Machine(srv, []uint64{30, 30, 30, 30, 30, 30, 30, 30}, map[int][]nvml.ProcessInfo{
		0: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}}, 1: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}},
		2: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}}, 3: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}},
		4: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}}, 5: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}},
		6: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}}, 7: {{Pid: uint32(pid), UsedGpuMemory: 20 * memGiB}},
	})
	g, err := gpu.FromNVML(srv, []string{"CUDA_DEVICE_ORDER=PCI_BUS_ID", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7"}, zap.NewNop())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Close() })
	return g
}

// memStartTree starts a parent shell with n sleep children and returns the
// shell's pid once all children exist.
func memStartTree(b *testing.B, n int) int {
	cmd := exec.Command("sh", "-c", fmt.Sprintf("for i in $(seq %d); do sleep 3600 & done; echo ready; wait", n))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
	buf := make([]byte, 6)
	if _, err := out.Read(buf); err != nil || string(buf) != "ready\n" {
		b.Fatalf("tree did not start: %q %v", buf, err)
	}
	h, err := procfs.ReadHost("/proc", cmd.Process.Pid)
	if err != nil || h.Processes != n+1 {
		b.Fatalf("tree has %d processes, want %d: %v", h.Processes, n+1, err)
	}
	return cmd.Process.Pid
}

func memCPUTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSamplerCPU measures the CPU one sample costs (this process's
// user+system time, GC and goroutines included) for a real /proc tree of 51
// processes and 8 mock GPUs, and reports it as a share of one core at the
// sampling rate. The rate matters because PSS, command lines and the cgroup
// location are refreshed once per second of sampler time. The job's process
// list comes from a procfs.Tree scanned once, as the supervisor's tracker
// scans it on its own schedule, whatever the sampler does (its cost is
// BenchmarkTrackerScan's).
func BenchmarkSamplerCPU(b *testing.B) {
	root := memStartTree(b, 50)
	gpu := benchGPU(b, root)
	job := procfs.NewTree("/proc", "")
	if _, err := job.SetRoot(root); err != nil {
		b.Fatal(err)
	}
	if n := len(job.Scan()); n != 51 {
		b.Fatalf("the job has %d processes, want 51", n)
	}
	for _, hz := range []float64{10, 100} {
		b.Run(fmt.Sprintf("%gHz", hz), func(b *testing.B) {
			c := &memClock{t: memT0}
			s := NewSampler(SamplerConfig{GPU: gpu, Now: c.Now, Timeline: memDiscard{}, OnWarning: func(Warning) {}})
			step := time.Duration(float64(time.Second) / hz)
			ctx := context.Background()
			s.tickJob(ctx, job) // warm the caches
			b.ResetTimer()
			start := memCPUTime()
			for i := 0; i < b.N; i++ {
				c.Add(step)
				s.tickJob(ctx, job)
			}
			cpu := memCPUTime() - start
			b.StopTimer()
			perSample := cpu / time.Duration(b.N)
			b.ReportMetric(float64(perSample.Microseconds()), "cpu-µs/sample")
			b.ReportMetric(100*perSample.Seconds()*hz, "%core")
			if s.Summary().Samples != b.N+1 {
				b.Fatalf("samples %d", s.Summary().Samples)
			}
		})
	}
}

// BenchmarkSampler24h drives 24 hours of 10 Hz sampling (864,000 samples,
// hourly epochs with 5 minutes of validation each) through the real tick
// with an injected clock, the timeline going to a counting writer, and
// reports the heap's growth after the first simulated hour, and the
// timeline's size per day.
func BenchmarkSampler24h(b *testing.B) {
	root := memStartTree(b, 1)
	gpu := benchGPU(b, root)
	for i := 0; i < b.N; i++ {
		c := &memClock{t: memT0}
		var w memCountingWriter
		s := NewSampler(SamplerConfig{GPU: gpu, Now: c.Now, Timeline: &w, OnWarning: func(Warning) {}})
		ctx := context.Background()
		const perHour = 36000
		var before, after runtime.MemStats
		for n := 0; n < 24*perHour; n++ {
			switch n % perHour {
			case 0:
				s.SetPhase(classify.PhaseTrain, int64(n/perHour))
			case perHour - 3000:
				s.SetPhase(classify.PhaseVal, -1)
			}
			if n == perHour {
				runtime.GC()
				runtime.ReadMemStats(&before)
			}
			c.Add(100 * time.Millisecond)
			s.tick(ctx, root)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)), "heap-growth-B")
		b.ReportMetric(float64(after.HeapAlloc), "heap-B")
		b.ReportMetric(float64(w.n)/(1<<20), "timeline-MiB/day")
		if got := s.Summary().Samples; got != 24*perHour {
			b.Fatalf("samples %d", got)
		}
	}
	fmt.Fprintln(os.Stderr, "24h simulated")
}

type memCountingWriter struct{ n int64 }

func (c *memCountingWriter) Write(b []byte) (int, error) { c.n += int64(len(b)); return len(b), nil }
