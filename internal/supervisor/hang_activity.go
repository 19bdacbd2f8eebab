package supervisor

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// The hang watchdog's second signal. No step for the rhythm's limit is a
// suspicion; what the job's process tree does over a short window confirms
// it or not:
//
//   - idle: the tree used (almost) no CPU, read and wrote (almost) nothing,
//     its GPUs' memory did not move and no kernel ran: hung, stopped at once;
//   - dataloader: idle, and the main process has loader workers that are
//     dead (gone, or zombies) or idle: hung, and the verdict says so;
//   - working: busy (CPU, I/O, GPU memory moving, GPU kernels running):
//     silent but working, left to run until hang max;
//   - spinning: busy, with no I/O, and either a GPU runs a kernel with its
//     memory still (NCCL's kernel waiting for a peer), or a process spins
//     while another of the tree (not its root, not a loader worker) is
//     blocked: a wait on a peer, as a rank in a collective whose peer is
//     gone, or a lock. It gets hang max like work, unless py-spy's stacks
//     show a collective or a lock wait, or NCCL's RAS a rank missing
//     (confirmSpin, hang.go): then it is stopped at once.
//
// Every figure is from two readings a window apart (activityWindow).

// Thresholds of the activity verdict.
const (
	// idleCPUShare: a tree that used less than this share of one CPU over
	// the window, counting the time its processes waited for one, is idle
	// (an idle PyTorch process still wakes its threads now and then).
	idleCPUShare = 0.05
	// busyCPUShare: a process that used or waited for at least this share
	// of one CPU is busy (as much as makes a tree not idle: on a loaded
	// machine a spin gets little of a CPU, but it waits for one all the
	// while); one that used no tick and waited for none is blocked.
	busyCPUShare = idleCPUShare
	// idleIOPerSecond: less I/O than this per second is no progress.
	idleIOPerSecond = 64 << 10
	// gpuMemMoved: GPU memory that moved by more than this is GPU work.
	gpuMemMoved = 64 << 20
	// gpuKernelPct: a GPU on which a kernel ran at least this share of
	// NVML's sample period is busy (an idle one reads 0%).
	gpuKernelPct = 10
	// gpuMemActivePct: a GPU whose memory was read or written at least
	// this share of the period is working on data; a kernel that runs
	// with its memory still (below this) spins: NCCL's kernel waiting for
	// a peer reads 100% and 0%.
	gpuMemActivePct = 5
)

// activityWindow is how long the tree is watched once the rhythm's limit
// passed: a tenth of the limit, within 1 s and 10 s.
func activityWindow(limit time.Duration) time.Duration {
	return min(max(limit/10, time.Second), 10*time.Second)
}

// actKey identifies a process across pid reuse.
type actKey struct {
	pid   int
	start uint64
}

// activitySnap is one reading of the tree.
type activitySnap struct {
	at    time.Time
	root  int
	procs []procfs.Activity
	gpu   []gpu.Sample // nil: no GPU probe, or it failed
}

// activityWatch reads a job's activity and remembers its loader workers.
// The watchdog goroutine of one attempt owns it.
type activityWatch struct {
	r       *procfs.ActivityReader
	gpu     gpu.Probe // nil: none
	now     func() time.Time
	procs   []procfs.Proc
	workers map[actKey]bool // loader workers seen alive in this attempt
	known   map[actKey]bool // processes already looked at
	ras     string          // ncclras to ask when a hang is suspected ("": none)
	where   string          // this gpuguard's place in its group ("": none)
}

func newActivityWatch(g gpu.Probe, now func() time.Time) *activityWatch {
	if g != nil {
		if ok, _ := g.Available(); !ok {
			g = nil
		}
	}
	return &activityWatch{r: procfs.NewActivityReader(""), gpu: g, now: now,
		workers: map[actKey]bool{}, known: map[actKey]bool{}}
}

// track remembers the loader workers among the tree's processes, so that
// one that is gone later still counts as a dead worker. It reads the
// command lines of the processes it has not seen before only.
func (w *activityWatch) track(p process) {
	w.procs = p.Processes(w.procs[:0])
	byPID := make(map[int]procfs.Proc, len(w.procs))
	for _, q := range w.procs {
		byPID[q.PID] = q
	}
	for _, q := range w.procs {
		k := actKey{q.PID, q.Start}
		if w.known[k] || q.Zombie() {
			continue
		}
		w.known[k] = true
		parent, ok := byPID[q.PPID]
		if !ok {
			continue
		}
		if procfs.IsLoaderWorker(q.Comm, w.r.Cmdline(q.PID), parent.Comm, w.r.Cmdline(parent.PID)) {
			w.workers[k] = true
		}
	}
}

// snap reads the tree's counters and its GPUs' memory.
func (w *activityWatch) snap(p process) activitySnap {
	w.procs = p.Processes(w.procs[:0])
	s := activitySnap{at: w.now(), root: p.PID(), procs: w.r.Read(nil, w.procs)}
	s.procs = w.r.ZombieChildren(s.procs, w.procs)
	if w.gpu != nil {
		pids := make([]int, len(w.procs))
		for i, q := range w.procs {
			pids[i] = q.PID
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.gpu, _ = w.gpu.Sample(ctx, pids)
		cancel()
	}
	return s
}

// judge is the verdict on the window between two readings. workers are
// the loader workers seen alive in the attempt. It reads nothing.
func judge(s0, s1 activitySnap, workers map[actKey]bool) record.HangActivity {
	window := s1.at.Sub(s0.at)
	if window <= 0 {
		window = time.Millisecond
	}
	act := record.HangActivity{WindowS: window.Seconds()}
	for _, a := range s1.procs {
		if !a.Zombie() {
			act.Processes++
		}
	}
	before := make(map[actKey]procfs.Activity, len(s0.procs))
	for _, a := range s0.procs {
		before[actKey{a.PID, a.Start}] = a
	}
	now := make(map[actKey]procfs.Activity, len(s1.procs))
	comm := map[int]string{}
	for _, a := range s1.procs {
		now[actKey{a.PID, a.Start}] = a
		comm[a.PID] = a.Comm
	}
	var ticks uint64
	var waitNs uint64
	busyS := busyCPUShare * window.Seconds()
	var blockedPeers []int
	busiest, busiestTicks, busiestS := 0, uint64(0), 0.0
	for _, a := range s1.procs {
		b, ok := before[actKey{a.PID, a.Start}]
		if !ok || a.Zombie() {
			continue // new in the window, or dead: no rate to read
		}
		d := a.CPUTicks - min(a.CPUTicks, b.CPUTicks)
		w := a.RunQueueNs - min(a.RunQueueNs, b.RunQueueNs)
		ticks += d
		waitNs += w
		if a.IOKnown && b.IOKnown {
			act.IOBytes += a.IOBytes - min(a.IOBytes, b.IOBytes)
		}
		// What the process wanted of a CPU: what it got, and what it
		// waited for while others ran.
		wanted := float64(d)/procfs.ClockTicks + float64(w)/1e9
		switch {
		case wanted >= busyS:
			act.Busy = append(act.Busy, a.PID)
			if wanted > busiestS {
				busiest, busiestTicks, busiestS = a.PID, d, wanted
			}
		case d == 0 && w == 0 && a.State != 'R':
			act.Blocked = append(act.Blocked, a.PID)
			if a.PID != s1.root && !workers[actKey{a.PID, a.Start}] && !strings.HasPrefix(a.Comm, "pt_data_worker") {
				blockedPeers = append(blockedPeers, a.PID)
			}
		}
	}
	act.CPUS = float64(ticks) / procfs.ClockTicks
	act.CPUWaitS = float64(waitNs) / 1e9
	gpuBusy, gpuSpin := judgeGPU(s0.gpu, s1.gpu, &act)

	var idleWorkers int
	act.Workers, act.WorkersDead, idleWorkers = countWorkers(s1, workers, now, comm, act.Blocked)
	dead := act.WorkersDead

	figures := fmt.Sprintf("CPU %.2fs", act.CPUS)
	if act.CPUWaitS >= idleCPUShare*window.Seconds() {
		figures += fmt.Sprintf(" (and %.2fs waiting for a CPU)", act.CPUWaitS)
	}
	figures += ", I/O " + humanize.Bytes(act.IOBytes)
	if act.GPUMemDeltaBytes != nil {
		figures += ", GPU memory moved " + humanize.Bytes(*act.GPUMemDeltaBytes)
	}
	if act.GPUUtilPct != nil {
		figures += fmt.Sprintf(", GPU %d%% (memory %d%%)", *act.GPUUtilPct, *act.GPUMemUtilPct)
	}
	figures += fmt.Sprintf(" over %s in %d %s", fmtSeconds(act.WindowS), act.Processes, plural(act.Processes, "process", "processes"))
	idleIO := float64(act.IOBytes) < idleIOPerSecond*window.Seconds()
	idle := act.CPUS+act.CPUWaitS < idleCPUShare*window.Seconds() && idleIO && !gpuBusy
	switch {
	case idle && act.Workers > 0 && dead+idleWorkers > 0:
		act.Verdict = "dataloader"
		act.Detail = fmt.Sprintf("the main process waits idle on its %d loader %s (%d dead, %d idle): %s", act.Workers, plural(act.Workers, "worker", "workers"), dead, idleWorkers, figures)
	case idle:
		act.Verdict = "idle"
		act.Detail = "idle: " + figures
	case gpuSpin && idleIO:
		// A kernel runs, nothing it reads or writes moves, no I/O: a
		// kernel that waits, as NCCL's for a peer in a collective.
		act.Verdict = "spinning"
		act.Detail = fmt.Sprintf("spinning: the GPU runs a kernel (%d%%) with its memory still (%d%%) and no I/O, as a collective waiting for a peer: %s", *act.GPUUtilPct, *act.GPUMemUtilPct, figures)
	case len(act.Busy) > 0 && len(blockedPeers) > 0 && idleIO && !gpuBusy:
		act.Verdict = "spinning"
		act.Detail = fmt.Sprintf("spinning: pid %d busy (%.2f CPU s) while pid %d (%s) is blocked: %s", busiest, float64(busiestTicks)/procfs.ClockTicks, blockedPeers[0], comm[blockedPeers[0]], figures)
	default:
		act.Verdict = "working"
		act.Detail = "silent but working: " + figures
	}
	return act
}

// judgeGPU fills act's GPU figures from the two readings of the job's
// GPUs: busy when their memory moved or a kernel ran; spin when a kernel
// ran with the memory still (no movement, no memory activity).
func judgeGPU(g0s, g1s []gpu.Sample, act *record.HangActivity) (busy, spin bool) {
	memMoved := false
	if g0s != nil && g1s != nil {
		var moved uint64
		for _, g1 := range g1s {
			for _, g0 := range g0s {
				if g0.ID == g1.ID && !g0.Lost && !g1.Lost {
					moved += max(g1.UsedBytes, g0.UsedBytes) - min(g1.UsedBytes, g0.UsedBytes)
				}
			}
		}
		act.GPUMemDeltaBytes = &moved
		memMoved = moved > gpuMemMoved
	}
	// Utilisation: the highest of the job's GPUs at either reading.
	for _, ss := range [][]gpu.Sample{g0s, g1s} {
		for _, g := range ss {
			if !g.UtilKnown || g.Lost {
				continue
			}
			if act.GPUUtilPct == nil {
				act.GPUUtilPct, act.GPUMemUtilPct = new(uint32), new(uint32)
			}
			*act.GPUUtilPct = max(*act.GPUUtilPct, g.GPUUtilPct)
			*act.GPUMemUtilPct = max(*act.GPUMemUtilPct, g.MemUtilPct)
		}
	}
	gpuKernel := act.GPUUtilPct != nil && *act.GPUUtilPct >= gpuKernelPct
	spin = gpuKernel && *act.GPUMemUtilPct < gpuMemActivePct && !memMoved
	return memMoved || gpuKernel, spin
}

// idleVerdict says whether a verdict confirms the hang at the rhythm's
// limit: nothing in the tree moves.
func idleVerdict(v string) bool { return v == "idle" || v == "dataloader" }

// waitStacks matches py-spy stacks of a process that waits on a peer: in a
// collective, or on a lock or a queue; collectiveStacks those in a
// collective (NCCL, torch.distributed).
var (
	waitStacks       = regexp.MustCompile(`(?i)nccl|all_?reduce|all_?gather|reduce_scatter|broadcast|barrier|all_?to_?all|\bwait|acquire|recv`)
	collectiveStacks = regexp.MustCompile(`(?i)nccl|all_?reduce|all_?gather|reduce_scatter|broadcast|barrier|all_?to_?all|distributed_c10d`)
)

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// countWorkers counts the loader workers: those seen alive in the attempt
// (dead now if gone or a zombie, idle if blocked), and zombies that are a
// worker's child of its parent's name.
func countWorkers(s1 activitySnap, workers map[actKey]bool, now map[actKey]procfs.Activity, comm map[int]string, blocked []int) (total, dead, idle int) {
	counted := map[actKey]bool{}
	for k := range workers {
		counted[k] = true
		a, ok := now[k]
		switch {
		case !ok || a.Zombie():
			dead++
		case slices.Contains(blocked, a.PID):
			idle++
		}
	}
	for _, a := range s1.procs {
		k := actKey{a.PID, a.Start}
		if counted[k] || !a.Zombie() || a.PID == s1.root {
			continue
		}
		if pc, ok := comm[a.PPID]; ok && (a.Comm == pc || strings.HasPrefix(a.Comm, "pt_data_worker")) {
			counted[k] = true
			dead++
		}
	}
	return len(counted), dead, idle
}
