package supervisor

import (
	"context"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/torchprobe"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// probePoll is how often the torch probe's files are read during an attempt.
const probePoll = 200 * time.Millisecond

// probeWatch follows the torch probe's records during one attempt
// (--probe torch, docs/probe.md): they go to the journal as probe events,
// the main rank's phase drives the sampler in place of the output's, and
// the first out-of-memory site goes into attempt_end.
type probeWatch struct {
	n       int
	rd      *rundir.Dir
	status  *Status
	sampler *memory.Sampler

	phased *atomic.Bool // the probe reported a phase: the output's phases no longer drive the sampler
	cancel context.CancelFunc
	done   sync.WaitGroup

	mu   sync.Mutex
	site *record.ProbeSite
}

// startProbe writes the probe's Python files and starts following the
// attempt's records; nil when the plan has no probe. A probe that cannot be
// written is a warning: the attempt runs without it.
func startProbe(n int, p launchPlan, rd *rundir.Dir, status *Status, sampler *memory.Sampler, phased *atomic.Bool) *probeWatch {
	if p.probeRecords == "" {
		return nil
	}
	if err := torchprobe.Install(p.probeSite); err != nil {
		status.Printf("warning: %v", err)
		return nil
	}
	if err := os.MkdirAll(p.probeRecords, 0o755); err != nil {
		status.Printf("warning: cannot make the torch probe's directory: %v", err)
		return nil
	}
	status.Printf("attempt %d: torch probe on (records in %s)", n, p.probeRecords)
	w := &probeWatch{n: n, rd: rd, status: status, sampler: sampler, phased: phased}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		torchprobe.Follow(ctx, p.probeRecords, probePoll, w.record)
	}()
	return w
}

// stop reads what is left and stops following.
func (w *probeWatch) stop() {
	w.cancel()
	w.done.Wait()
}

// oomSite is the first out-of-memory site the probe reported, or nil.
func (w *probeWatch) oomSite() *record.ProbeSite {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.site
}

func (w *probeWatch) record(r torchprobe.Record) {
	ev := record.Probe{
		Attempt: w.n, Kind: r.Kind, PID: r.PID, Rank: r.Rank, Phase: classify.Phase(r.Phase),
		Step: r.Step, How: r.How, Memory: (*record.ProbeMemory)(r.Mem),
	}
	switch r.Kind {
	case torchprobe.KindStep:
		if r.Mem != nil && r.Mem.CUDAReserved > 0 { // fragmentation's signs, for the projection (prevent.go)
			w.sampler.NoteAllocator(r.Mem.CUDAReservedUnallocated, r.Mem.CUDAAllocRetries)
		}
		return // counted in every record; not journalled one by one
	case torchprobe.KindPhase:
		if r.MainRank() && (r.Phase == string(classify.PhaseTrain) || r.Phase == string(classify.PhaseVal)) {
			w.phased.Store(true)
			w.sampler.SetPhase(classify.Phase(r.Phase), -1)
		}
	case torchprobe.KindOOM:
		site := &record.ProbeSite{
			Module: r.Module, Pass: r.Pass, Phase: classify.Phase(r.Phase), Step: r.Step, Shapes: string(r.Shapes),
			PID: r.PID, Rank: r.Rank, ErrorType: r.ErrorType, Error: r.Error, Snapshot: r.Snapshot, Grad: r.Grad,
		}
		if r.Block != nil {
			site.Block = &record.ProbeBlock{Container: r.Block.Container, Index: r.Block.Index, Of: r.Block.Of}
		}
		ev.Site = site
		w.mu.Lock()
		first := w.site == nil
		if first {
			w.site = site
		}
		w.mu.Unlock()
		if first {
			w.status.Printf("torch probe: %s", describeSite(site, r.Mem))
		}
	case torchprobe.KindError:
		ev.Error = r.Where + ": " + r.Error
		w.status.Printf("warning: the torch probe failed in process %d and switched itself off there: %s", r.PID, ev.Error)
	case torchprobe.KindStart:
	default:
		return
	}
	w.rd.Write(ev)
}

// describeSite says where an out-of-memory error was raised, in words.
func describeSite(s *record.ProbeSite, m *torchprobe.Memory) string {
	where := s.Pass
	if s.Module != "" {
		where += " of " + s.Module
	}
	msg := "out of memory in the " + where + " (" + string(s.Phase)
	if s.Phase == "" {
		msg += "no phase"
	}
	msg += ", step " + strconv.FormatInt(s.Step, 10)
	if s.Shapes != "" && s.Shapes != "[]" {
		msg += ", inputs " + s.Shapes
	}
	if s.Block != nil {
		msg += ", block " + strconv.Itoa(s.Block.Index+1) + " of " + strconv.Itoa(s.Block.Of) + " in " + s.Block.Container
	}
	if s.Rank != nil {
		msg += ", rank " + strconv.Itoa(*s.Rank)
	}
	msg += ")"
	if m != nil && m.CUDAReserved > 0 {
		msg += "; CUDA allocated " + humanize.Bytes(uint64(m.CUDAAllocated)) + ", reserved " + humanize.Bytes(uint64(m.CUDAReserved))
	}
	return msg
}

// oomBlock is what fit is told of site: the failing block's place, when the
// probe saw one in the phase the verdict names (nil otherwise).
func oomBlock(site *record.ProbeSite, phase classify.Phase) *policy.OOMBlock {
	if site == nil || site.Block == nil || (site.Phase != "" && site.Phase != phase) {
		return nil
	}
	return &policy.OOMBlock{
		Index: site.Block.Index, Of: site.Block.Of,
		Backward: site.Pass != "forward",
		NoGrad:   site.Grad != nil && !*site.Grad,
	}
}

// probeHook is --probe torch: each attempt's probe records are followed
// while it runs (probeWatch), and its first out-of-memory site goes into
// attempt_end and, as the block it struck in, to the policy.
type probeHook struct {
	l   *loop
	cur *probeWatch // nil: the probe could not be installed for this attempt
}

func (h *probeHook) attemptStarting(a *attemptRun) {
	h.cur = startProbe(a.n, a.plan, h.l.job.RunDir, h.l.job.Status, a.sampler, &a.probePhase)
}

func (h *probeHook) startFailed(*attemptRun) {
	if h.cur != nil {
		h.cur.stop()
	}
}

// stopped reads the records left and puts the site in attempt_end.
func (h *probeHook) stopped(a *attemptRun) {
	if h.cur != nil {
		h.cur.stop()
		a.end.Site = h.cur.oomSite()
	}
}

func (h *probeHook) judged(a *attemptRun) {
	a.row.block = oomBlock(a.end.Site, a.verdict.Phase)
}
