package supervisor

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// The activity verdict from two readings a second apart (judge reads
// nothing: the readings are written here, GPU samples as the fake probe
// gives them).
func TestJudgeActivity(t *testing.T) {
	t0 := time.Unix(1000, 0)
	main := func(ticks, io uint64, state byte) procfs.Activity {
		return procfs.Activity{PID: 10, PPID: 1, Start: 5, State: state, Comm: "python3", CPUTicks: ticks, IOBytes: io, IOKnown: true}
	}
	child := func(pid int, comm string, ticks uint64, state byte) procfs.Activity {
		return procfs.Activity{PID: pid, PPID: 10, Start: 6, State: state, Comm: comm, CPUTicks: ticks, IOKnown: true}
	}
	withWait := func(a procfs.Activity, ns float64) procfs.Activity { a.RunQueueNs = uint64(ns); return a }
	snap := func(at time.Duration, g []gpu.Sample, ps ...procfs.Activity) activitySnap {
		return activitySnap{at: t0.Add(at), root: 10, procs: ps, gpu: g}
	}
	gpuUsed := func(used uint64) []gpu.Sample { return []gpu.Sample{{ID: "gpu0", UsedBytes: used}} }
	gpuUtil := func(k, m uint32) []gpu.Sample {
		return []gpu.Sample{{ID: "gpu0", UsedBytes: 1 << 30, UtilKnown: true, GPUUtilPct: k, MemUtilPct: m},
			{ID: "gpu1", UsedBytes: 1 << 30, UtilKnown: false}}
	}
	for _, tc := range []struct {
		name    string
		s0, s1  activitySnap
		workers map[actKey]bool
		verdict string
		detail  string
	}{
		{"nothing moves", snap(0, nil, main(100, 5000, 'S')), snap(time.Second, nil, main(101, 5000, 'S')), nil,
			"idle", "idle: CPU 0.01s, I/O 0 bytes over 1s in 1 process"},
		{"CPU", snap(0, nil, main(100, 0, 'R')), snap(time.Second, nil, main(190, 0, 'R')), nil,
			"working", "silent but working: CPU 0.90s"},
		{"I/O only", snap(0, nil, main(100, 0, 'D')), snap(time.Second, nil, main(100, 10<<20, 'D')), nil,
			"working", "I/O 10.0 MiB"},
		{"GPU memory moving", snap(0, gpuUsed(1<<30), main(100, 0, 'S')), snap(time.Second, gpuUsed(3<<30), main(100, 0, 'S')), nil,
			"working", "GPU memory moved 2.00 GiB"},
		{"GPU memory still", snap(0, gpuUsed(1<<30), main(100, 0, 'S')), snap(time.Second, gpuUsed(1<<30), main(100, 0, 'S')), nil,
			"idle", "GPU memory moved 0 bytes"},
		{"GPU kernels at work, no CPU", snap(0, gpuUtil(95, 40), main(100, 0, 'S')), snap(time.Second, gpuUtil(97, 38), main(100, 0, 'S')), nil,
			"working", "silent but working: CPU 0.00s, I/O 0 bytes, GPU memory moved 0 bytes, GPU 97% (memory 40%) over 1s"},
		{"a GPU kernel with its memory still: NCCL waiting", snap(0, gpuUtil(100, 0), main(100, 0, 'R')), snap(time.Second, gpuUtil(100, 0), main(199, 0, 'R')), nil,
			"spinning", "spinning: the GPU runs a kernel (100%) with its memory still (0%) and no I/O, as a collective waiting for a peer: CPU 0.99s"},
		{"a GPU kernel with its memory still, while writing a checkpoint", snap(0, gpuUtil(100, 0), main(100, 0, 'R')), snap(time.Second, gpuUtil(100, 0), main(150, 50<<20, 'R')), nil,
			"working", "I/O 50.0 MiB"},
		{"GPUs idle: 0%", snap(0, gpuUtil(0, 0), main(100, 0, 'S')), snap(time.Second, gpuUtil(3, 0), main(100, 0, 'S')), nil,
			"idle", "GPU 3% (memory 0%)"},
		{"a spin beside a blocked peer", snap(0, nil, main(100, 0, 'R'), child(11, "flock", 3, 'S')),
			snap(time.Second, nil, main(180, 0, 'R'), child(11, "flock", 3, 'S')), nil,
			"spinning", "spinning: pid 10 busy (0.80 CPU s) while pid 11 (flock) is blocked"},
		{"a spin starved of CPU on a busy machine, beside a blocked peer",
			snap(0, nil, withWait(main(100, 0, 'R'), 0), child(11, "flock", 3, 'S')),
			snap(time.Second, nil, withWait(main(103, 0, 'R'), 850e6), child(11, "flock", 3, 'S')), nil,
			"spinning", "spinning: pid 10 busy (0.03 CPU s) while pid 11 (flock) is blocked: CPU 0.03s (and 0.85s waiting for a CPU), I/O 0 bytes"},
		{"work starved of CPU is not idle", snap(0, nil, withWait(main(100, 0, 'R'), 1e9)), snap(time.Second, nil, withWait(main(102, 0, 'R'), 1.9e9)), nil,
			"working", "silent but working: CPU 0.02s (and 0.90s waiting for a CPU), I/O 0 bytes over 1s in 1 process"},
		{"a sleeper's short waits stay idle", snap(0, nil, withWait(main(100, 0, 'S'), 0)), snap(time.Second, nil, withWait(main(101, 0, 'S'), 20e6)), nil,
			"idle", "idle: CPU 0.01s, I/O 0 bytes over 1s in 1 process"},
		{"work beside idle loader workers", snap(0, nil, main(100, 0, 'R'), child(11, "pt_data_worker", 3, 'S')),
			snap(time.Second, nil, main(180, 0, 'R'), child(11, "pt_data_worker", 3, 'S')), nil,
			"working", "silent but working"},
		{"dead workers: one a zombie, one gone", snap(0, nil, main(100, 0, 'S')),
			snap(time.Second, nil, main(100, 0, 'S'), child(12, "python3", 40, 'Z')),
			map[actKey]bool{{13, 6}: true},
			"dataloader", "the main process waits idle on its 2 loader workers (2 dead, 0 idle)"},
		{"idle workers", snap(0, nil, main(100, 0, 'S'), child(11, "pt_data_worker", 3, 'S')),
			snap(time.Second, nil, main(100, 0, 'S'), child(11, "pt_data_worker", 3, 'S')),
			map[actKey]bool{{11, 6}: true},
			"dataloader", "(0 dead, 1 idle)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := judge(tc.s0, tc.s1, tc.workers)
			if v.Verdict != tc.verdict || !strings.Contains(v.Detail, tc.detail) {
				t.Fatalf("got %s: %s; want %s: ...%s...", v.Verdict, v.Detail, tc.verdict, tc.detail)
			}
		})
	}
}

func TestActivityWindow(t *testing.T) {
	for limit, want := range map[time.Duration]time.Duration{
		time.Second: time.Second, time.Minute: 6 * time.Second, 10 * time.Minute: 10 * time.Second,
	} {
		if got := activityWindow(limit); got != want {
			t.Errorf("activityWindow(%s) = %s, want %s", limit, got, want)
		}
	}
}
