package memory

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/gpu"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
	"go.uber.org/zap"
)

// Sampling defaults; the policy can change them (SamplerConfig).
const (
	DefaultBaseHz     = 1.0             // samples per second outside validation
	DefaultFastHz     = 20.0            // samples per second in validation and after a phase change
	DefaultFastFor    = 5 * time.Second // how long a phase change keeps the fast rate
	DefaultGPUTimeout = time.Second     // how long one tick waits for NVML before going on without it
)

// Warning thresholds.
const (
	// HostWarnFraction: host memory over this share of the cgroup limit or of
	// RAM is worth a warning; it re-arms below HostRearmFraction.
	HostWarnFraction  = 0.90
	HostRearmFraction = 0.85
	// ValPeakWarnFraction: a validation sample this close to a GPU's
	// capacity is worth a warning (once per validation run and device).
	ValPeakWarnFraction = 0.95
	// LeakMinRuns: a leak trend needs this many runs of a phase in a row,
	// each peaking higher than the last by at least LeakMinRiseGPU (GPU) or
	// LeakMinRiseHost (host), below which peaks count as equal (allocator
	// block granularity and Python heap noise).
	LeakMinRuns     = 3
	LeakMinRiseGPU  = 16 << 20
	LeakMinRiseHost = 64 << 20
	// leakHistory bounds the per-phase history kept for trend detection.
	leakHistory = 32
)

// TimelineHeader is the first line of timeline.csv (record.TimelineHeader
// describes its columns).
const TimelineHeader = record.TimelineHeader

// SamplerConfig configures a Sampler. Zero values mean the defaults.
type SamplerConfig struct {
	GPU      gpu.Probe // nil: no GPU sampling (NoGPU)
	ProcRoot string    // "": /proc
	BaseHz   float64
	FastHz   float64
	FastFor  time.Duration
	// Timeline receives TimelineHeader-format rows, one Write per sample
	// (the header itself is not written: see OpenTimeline). May be nil. A
	// write error is logged once and stops timeline writing, not sampling.
	Timeline io.Writer
	Attempt  int
	// OnWarning is called as warnings happen, from the goroutine of Run or
	// of SetPhase, with no lock held; it must not block for long. nil logs
	// them at Warn level.
	OnWarning func(Warning)
	Now       func() time.Time // injected clock for tests; nil: time.Now
	Logger    *zap.Logger      // nil: no logging
	// Origin is time zero of elapsed_ms: pass the run's start so that the
	// attempts of a run share one time axis. Zero: when NewSampler is called.
	Origin time.Time
	// GPUTimeout bounds how long one tick waits for NVML (0: 1 s). A stuck
	// NVML call makes later ticks go on without GPU figures.
	GPUTimeout time.Duration
	// SlurmMemBytes is the Slurm job's memory request (0: none, or outside
	// Slurm), for naming the host ceiling (procfs.ReadCeiling).
	SlurmMemBytes uint64
}

// The sampler's results are record types: report reads them from
// events.jsonl without this package's GPU and /proc code.
type (
	WarningKind  = record.WarningKind
	Warning      = record.MemoryWarning
	Summary      = record.MemorySummary
	PhaseSummary = record.PhaseSummary
	DevicePeak   = record.DevicePeak
)

// Kinds of memory warning; the values are a contract (events.jsonl,
// docs/memory.md).
const (
	WarnHostMemory = record.WarnHostMemory
	WarnValPeak    = record.WarnValPeak
	WarnLeakTrend  = record.WarnLeakTrend
	WarnGrowth     = record.WarnGrowth
)

// Sampler samples a job's GPU and host memory from outside: at BaseHz,
// faster (FastHz) during validation and for FastFor after any phase change,
// so that short validation peaks are seen. It writes each sample to the
// timeline, keeps only per-phase peaks and a short per-phase history (its
// memory does not grow with the run's length), and raises warnings as they
// happen. Create it with NewSampler; Run it in its own goroutine; call
// SetPhase from the output scanner; read Summary at any time.
type Sampler struct {
	cfg  SamplerConfig
	log  *zap.Logger
	gpu  gpu.Probe
	host *procfs.HostReader
	wake chan struct{}

	// Only the Run goroutine touches these.
	pids        []int
	row         []byte
	timelineErr bool
	gpuErrLast  string
	lastUse     uint64 // the root's last reading of its rlimit's use

	mu      sync.Mutex
	phase   classify.Phase
	epoch   int64 // -1 unknown
	changed time.Time
	run     *memPhaseRun
	runs    map[classify.Phase]int // runs started per phase (labels when epochs are unknown)
	hist    map[classify.Phase][]memRunPeak
	acc     map[classify.Phase]*memPhaseAcc
	devices map[string]gpu.Device
	samples int
	firstMs int64
	lastMs  int64
	// valWarned: devices warned about in the current validation run;
	// leakWarned: last label warned about per phase/device. Both stay the
	// size of the device list.
	valWarned  map[string]bool
	leakWarned map[string]int64
	hostHot    map[string]bool   // "cgroup"/"ram" currently over the warning line
	lastHost   procfs.HostSample // the last host sample, for LastHost
	gpuWhy     string
	// The host ceiling that applies to the job (procfs.ReadCeiling), read
	// from the root process when it changes and again at each phase change
	// (a wrapper may set ulimit -d after the start); ceilingPID is the
	// process it was read from, ceilingStale asks for a new reading.
	ceiling      procfs.Ceiling
	ceilingPID   int
	ceilingStale bool
	// growthWarned: the phase/device projections already warned about.
	growthWarned map[string]bool
}

// memPhaseRun is one uninterrupted stretch of a phase (one epoch's validation,
// say), for leak trends and validation warnings.
type memPhaseRun struct {
	phase   classify.Phase
	label   int64 // epoch, or run number when epochs are unknown
	isEpoch bool
	samples int
	gpu     map[string]uint64
	gpuCap  map[string]uint64
	host    uint64
	hostCap uint64
	alloc   allocSigns
}

type memRunPeak struct {
	label   int64
	isEpoch bool
	gpu     map[string]uint64
	gpuCap  map[string]uint64
	host    uint64
	hostCap uint64
	alloc   allocSigns
}

// allocSigns are a run's allocator figures, from the torch probe
// (NoteAllocator): the most reserved-but-unallocated memory seen, and the
// allocation retries counted by then. Their rise is fragmentation's sign.
type allocSigns struct {
	unallocated int64
	retries     int64
	seen        bool
}

type memPhaseAcc struct {
	samples    int
	gpu        map[string]*DevicePeak
	host       uint64
	hostLimit  uint64
	hostMs     int64
	cg         uint64
	cgLimit    uint64
	ram        uint64
	ramTotal   uint64
	maxWorkers int
	// The host ceiling (its kind and bytes) and the peak use of it, in its
	// own units (VmData under RLIMIT_DATA, VmSize under RLIMIT_AS, the
	// cgroup's working set under a cgroup or Slurm, else the tree's PSS).
	ceilKind  string
	ceilBytes uint64
	ceilPeak  uint64
	// start: the largest fraction of a GPU in use at the phase's first
	// sample with GPU figures, about its fixed part (weights, CUDA context,
	// optimizer states once made); startSet once taken.
	start    float64
	startSet bool
}

// NewSampler returns a sampler; it starts nothing until Run.
func NewSampler(cfg SamplerConfig) *Sampler {
	if cfg.GPU == nil {
		cfg.GPU = gpu.None("no GPU probe configured")
	}
	if cfg.BaseHz <= 0 {
		cfg.BaseHz = DefaultBaseHz
	}
	if cfg.FastHz <= 0 {
		cfg.FastHz = DefaultFastHz
	}
	if cfg.FastHz < cfg.BaseHz {
		cfg.FastHz = cfg.BaseHz
	}
	if cfg.FastFor <= 0 {
		cfg.FastFor = DefaultFastFor
	}
	if cfg.GPUTimeout <= 0 {
		cfg.GPUTimeout = DefaultGPUTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Origin.IsZero() {
		cfg.Origin = cfg.Now()
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	s := &Sampler{
		cfg:        cfg,
		log:        log,
		gpu:        cfg.GPU,
		host:       procfs.NewHostReader(cfg.ProcRoot),
		wake:       make(chan struct{}, 1),
		epoch:      -1,
		runs:       map[classify.Phase]int{},
		hist:       map[classify.Phase][]memRunPeak{},
		acc:        map[classify.Phase]*memPhaseAcc{},
		devices:    map[string]gpu.Device{},
		valWarned:  map[string]bool{},
		leakWarned: map[string]int64{},
		hostHot:    map[string]bool{},

		growthWarned: map[string]bool{},
	}
	s.host.KeepOpen()
	if ok, why := cfg.GPU.Available(); !ok {
		s.gpuWhy = why
	}
	for _, d := range cfg.GPU.Devices() {
		s.devices[d.ID] = d
	}
	s.startRun(classify.PhaseNone, -1)
	return s
}

// interval is the time to the next sample.
func (s *Sampler) interval(now time.Time) time.Duration {
	s.mu.Lock()
	fast := s.phase == classify.PhaseVal || now.Sub(s.changed) < s.cfg.FastFor
	s.mu.Unlock()
	hz := s.cfg.BaseHz
	if fast {
		hz = s.cfg.FastHz
	}
	return time.Duration(float64(time.Second) / hz)
}

// RunJob samples the memory of job until ctx is done: the processes
// job.Processes lists, which for a supervised job are the ones the
// supervisor would stop and kill (procfs.Tree's rule), with job.PID() as the
// root whose cgroup is read. While job.PID() is 0 or less nothing is
// sampled; a root that is gone is skipped quietly. RunJob blocks; start it
// with `go`. NVML calls never delay it by more than GPUTimeout per sample.
// It keeps a few /proc and cgroup files open while it runs and closes them
// when it returns.
func (s *Sampler) RunJob(ctx context.Context, job procfs.ProcessList) {
	s.loop(ctx, func(ctx context.Context) {
		if job.PID() > 0 {
			s.tickJob(ctx, job)
		}
	})
}

// Run is RunJob for a caller with no supervisor to list the job's
// processes: it samples the tree of rootPID(), the root and its
// descendants by parentage (procfs.HostReader.Read). rootPID is asked
// before every sample; while it returns 0 or less nothing is sampled.
func (s *Sampler) Run(ctx context.Context, rootPID func() int) {
	s.loop(ctx, func(ctx context.Context) {
		if pid := rootPID(); pid > 0 {
			s.tick(ctx, pid)
		}
	})
}

// loop calls sample at the sampling rate until ctx is done.
func (s *Sampler) loop(ctx context.Context, sample func(context.Context)) {
	t := time.NewTimer(0)
	defer t.Stop()
	defer s.host.Close()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.wake:
			if !t.Stop() {
				select {
				case <-t.C:
				default:
				}
			}
		}
		sample(ctx)
		t.Reset(s.interval(s.cfg.Now()))
	}
}

// tickJob takes one sample of job's processes.
func (s *Sampler) tickJob(ctx context.Context, job procfs.ProcessList) {
	now := s.cfg.Now()
	hs, err := s.host.ReadJob(job, now, false)
	s.sample(ctx, now, job.PID(), hs, err)
}

// tick takes one sample of the tree of pid.
func (s *Sampler) tick(ctx context.Context, pid int) {
	now := s.cfg.Now()
	hs, err := s.host.Read(pid, now, false)
	s.sample(ctx, now, pid, hs, err)
}

// sample completes a sample whose host part is hs: the GPUs, with the pids
// of the processes measured, then the bookkeeping, the timeline rows and
// the warnings.
func (s *Sampler) sample(ctx context.Context, now time.Time, pid int, hs procfs.HostSample, err error) {
	if err != nil {
		return // the root exited: the attempt is ending
	}
	use := s.ceilingUse(pid, hs)
	s.pids = s.host.Pids(s.pids)
	var gs []gpu.Sample
	if s.gpuWhy == "" {
		gctx, cancel := context.WithTimeout(ctx, s.cfg.GPUTimeout)
		gs, err = s.gpu.Sample(gctx, s.pids)
		cancel()
		s.noteGPUError(err)
	}
	s.record(now, hs, gs, use)
}

// ceilingUse reads the host ceiling of root process pid when it is not
// known yet (or a phase change made it stale), and returns the job's use of
// it: the root's VmData or VmSize under an rlimit (the kernel counts those
// per process), the cgroup's working set under a cgroup or Slurm, else the
// tree's PSS. Run goroutine only.
func (s *Sampler) ceilingUse(pid int, hs procfs.HostSample) uint64 {
	s.mu.Lock()
	stale := s.ceilingStale || s.ceilingPID != pid
	s.ceilingStale = false
	c := s.ceiling
	s.mu.Unlock()
	root := cmp.Or(s.cfg.ProcRoot, "/proc")
	if stale {
		if got, err := procfs.ReadCeiling(root, pid, s.cfg.SlurmMemBytes); err == nil {
			c = got
		}
		s.mu.Lock()
		s.ceiling, s.ceilingPID = c, pid
		s.mu.Unlock()
	}
	switch c.Kind {
	case procfs.CeilingData, procfs.CeilingAS:
		if u, ok := procfs.Usage(root, pid, c.Kind); ok && u > 0 {
			s.lastUse = u
			return u
		}
		return s.lastUse // the root is exiting: its last reading stands
	case procfs.CeilingCgroup, procfs.CeilingSlurm:
		if hs.Cgroup != nil && hs.Cgroup.LimitBytes > 0 {
			return hs.Cgroup.WorkingSetBytes
		}
	}
	return hs.TreeBytes()
}

// Ceiling is the host ceiling that applies to the job, as last read (the
// zero Ceiling: none below the machine's RAM).
func (s *Sampler) Ceiling() procfs.Ceiling {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ceiling
}

// noteGPUError logs a GPU sampling error when it differs from the last one.
func (s *Sampler) noteGPUError(err error) {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == s.gpuErrLast {
		return
	}
	s.gpuErrLast = msg
	switch {
	case err == nil:
		s.log.Info("GPU sampling recovered")
	case errors.Is(err, gpu.ErrBusy) || errors.Is(err, gpu.ErrTimeout):
		s.log.Warn("GPU sampling is slow; going on without GPU figures until NVML answers", zap.Error(err))
	default:
		s.log.Warn("GPU sampling failed", zap.Error(err))
	}
}

// record folds one sample into the summary, the run, the timeline and the
// warnings.
func (s *Sampler) record(now time.Time, hs procfs.HostSample, gs []gpu.Sample, use uint64) {
	ms := now.Sub(s.cfg.Origin).Milliseconds()
	var warns []Warning

	s.mu.Lock()
	phase := s.phase
	if s.samples == 0 {
		s.firstMs = ms
	}
	s.samples++
	s.lastMs = ms
	acc := s.acc[phase]
	if acc == nil {
		acc = &memPhaseAcc{gpu: map[string]*DevicePeak{}}
		s.acc[phase] = acc
	}
	acc.samples++
	run := s.run
	run.samples++
	for _, g := range gs {
		if g.Lost {
			continue
		}
		if _, ok := s.devices[g.ID]; !ok {
			s.devices[g.ID] = gpu.Device{ID: g.ID, UUID: g.UUID, TotalBytes: g.TotalBytes}
		}
		dp := acc.gpu[g.ID]
		if dp == nil {
			dp = &DevicePeak{ID: g.ID, UUID: g.UUID}
			acc.gpu[g.ID] = dp
		}
		if g.UsedBytes > dp.PeakBytes || dp.CapacityBytes == 0 {
			dp.PeakBytes, dp.PeakMs = g.UsedBytes, ms
		}
		dp.CapacityBytes = g.TotalBytes
		if g.JobKnown {
			dp.PeakJobBytes = max(dp.PeakJobBytes, g.JobBytes)
		}
		if g.UsedBytes > run.gpu[g.ID] {
			run.gpu[g.ID] = g.UsedBytes
		}
		run.gpuCap[g.ID] = g.TotalBytes
		if !acc.startSet && g.TotalBytes > 0 {
			acc.start = math.Max(acc.start, float64(g.UsedBytes)/float64(g.TotalBytes))
		}
		if phase == classify.PhaseVal && g.TotalBytes > 0 && float64(g.UsedBytes) >= ValPeakWarnFraction*float64(g.TotalBytes) {
			if !s.valWarned[g.ID] {
				s.valWarned[g.ID] = true
				warns = append(warns, Warning{Kind: WarnValPeak, Attempt: s.cfg.Attempt, Phase: phase, Epoch: s.runEpoch(),
					Device: g.ID, UsedBytes: g.UsedBytes, LimitBytes: g.TotalBytes, ElapsedMs: ms,
					Message: fmt.Sprintf("validation uses %s of %s on %s (%.1f%%): within %.0f%% of capacity; "+
						"a larger validation batch or input will not fit",
						humanize.Bytes(g.UsedBytes), humanize.Bytes(g.TotalBytes), g.ID,
						100*float64(g.UsedBytes)/float64(g.TotalBytes), 100*(1-ValPeakWarnFraction))})
			}
		}
	}
	if acc.start > 0 {
		acc.startSet = true
	}
	tree, limit := hs.TreeBytes(), hs.LimitBytes()
	if tree > acc.host || acc.samples == 1 {
		acc.host, acc.hostMs = tree, ms
	}
	acc.hostLimit = limit
	acc.maxWorkers = max(acc.maxWorkers, hs.Workers)
	s.lastHost = hs
	// The run's host figure is the use of the ceiling that applies, in its
	// units: what the projection and the leak trend compare with it.
	capBytes := limit
	if s.ceiling.Bytes > 0 {
		capBytes = s.ceiling.Bytes
	}
	acc.ceilKind, acc.ceilBytes = s.ceiling.Kind, capBytes
	acc.ceilPeak = max(acc.ceilPeak, use)
	if use > run.host {
		run.host = use
	}
	run.hostCap = capBytes
	ramUsed := uint64(0)
	if hs.MemTotalBytes > hs.MemAvailableBytes {
		ramUsed = hs.MemTotalBytes - hs.MemAvailableBytes
	}
	acc.ram = max(acc.ram, ramUsed)
	acc.ramTotal = hs.MemTotalBytes
	var cgUsed, cgLimit uint64
	if hs.Cgroup != nil && hs.Cgroup.LimitBytes > 0 {
		cgUsed, cgLimit = hs.Cgroup.WorkingSetBytes, hs.Cgroup.LimitBytes
		acc.cg = max(acc.cg, cgUsed)
		acc.cgLimit = cgLimit
	}
	if cgLimit > 0 {
		warns = s.hostWarning(warns, "cgroup", cgUsed, cgLimit, hs, ms)
	}
	warns = s.hostWarning(warns, "ram", ramUsed, hs.MemTotalBytes, hs, ms)

	hostUsed, hostLimit := tree, limit
	if k := s.ceiling.Kind; k == procfs.CeilingData || k == procfs.CeilingAS {
		hostUsed, hostLimit = use, capBytes // the rlimit's units
	}
	s.mu.Unlock()

	s.writeTimeline(ms, phase, hs, gs, hostUsed, hostLimit, ramUsed, cgUsed, cgLimit)
	s.emit(warns)
}

// hostWarning raises a host warning when used crosses HostWarnFraction of
// limit, once until it drops below HostRearmFraction. Called with s.mu held.
func (s *Sampler) hostWarning(warns []Warning, what string, used, limit uint64, hs procfs.HostSample, ms int64) []Warning {
	if limit == 0 {
		return warns
	}
	frac := float64(used) / float64(limit)
	switch {
	case frac >= HostWarnFraction && !s.hostHot[what]:
		s.hostHot[what] = true
		ceiling := "the machine's RAM"
		if what == "cgroup" {
			ceiling = "the memory cgroup's limit (the job's real ceiling under Slurm or a container)"
		}
		msg := fmt.Sprintf("host memory at %s of %s (%.0f%% of %s); the job's processes hold %s",
			humanize.Bytes(used), humanize.Bytes(limit), 100*frac, ceiling, humanize.Bytes(hs.TreeBytes()))
		if hs.Workers > 0 {
			msg += fmt.Sprintf(" across %d DataLoader-like workers; fewer workers or a smaller prefetch_factor would relieve it", hs.Workers)
		}
		warns = append(warns, Warning{Kind: WarnHostMemory, Attempt: s.cfg.Attempt, Phase: s.phase, Epoch: s.runEpoch(),
			Device: what, UsedBytes: used, LimitBytes: limit, ElapsedMs: ms, Message: msg})
	case frac < HostRearmFraction:
		s.hostHot[what] = false
	}
	return warns
}

// runEpoch is the epoch label of the current run (-1 when unknown).
func (s *Sampler) runEpoch() int64 {
	if s.run == nil || !s.run.isEpoch {
		return -1
	}
	return s.run.label
}

// writeTimeline appends this sample's rows in one Write.
func (s *Sampler) writeTimeline(ms int64, phase classify.Phase, hs procfs.HostSample, gs []gpu.Sample, hostUsed, hostLimit, ramUsed, cgUsed, cgLimit uint64) {
	if s.cfg.Timeline == nil || s.timelineErr {
		return
	}
	b := s.row[:0]
	prefix := func(dev string) {
		b = strconv.AppendInt(b, ms, 10)
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(s.cfg.Attempt), 10)
		b = append(b, ',')
		b = appendCSVField(b, string(phase))
		b = append(b, ',')
		b = append(b, dev...)
		b = append(b, ',')
	}
	for _, g := range gs {
		if g.Lost {
			continue
		}
		prefix(g.ID)
		b = strconv.AppendUint(b, g.UsedBytes, 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, g.TotalBytes, 10)
		b = append(b, ',')
		if g.JobKnown {
			b = strconv.AppendUint(b, g.JobBytes, 10)
		}
		b = append(b, '\n')
	}
	row := func(dev string, used, limit uint64) {
		prefix(dev)
		b = strconv.AppendUint(b, used, 10)
		b = append(b, ',')
		b = strconv.AppendUint(b, limit, 10)
		b = append(b, ",\n"...)
	}
	row("host", hostUsed, hostLimit)
	if cgLimit > 0 {
		row("cgroup", cgUsed, cgLimit)
	}
	row("ram", ramUsed, hs.MemTotalBytes)
	s.row = b
	if _, err := s.cfg.Timeline.Write(b); err != nil {
		s.timelineErr = true
		s.log.Warn("cannot write the memory timeline; sampling goes on without it", zap.Error(err))
	}
}

// appendCSVField appends a field, dropping characters that would break the
// row (phases are plain words in practice).
func appendCSVField(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != ',' && c != '\n' && c != '\r' && c != '"' {
			b = append(b, c)
		}
	}
	return b
}

// emit hands warnings to the callback (or the log).
func (s *Sampler) emit(warns []Warning) {
	for _, w := range warns {
		if s.cfg.OnWarning != nil {
			s.cfg.OnWarning(w)
		} else {
			s.log.Warn(w.Message, zap.String("kind", string(w.Kind)), zap.String("device", w.Device))
		}
	}
}

// SetPhase tells the sampler which phase the job is in (from the output
// scanner's phase events) and, when known, the epoch (-1 when not: the
// last known epoch is kept). A change of phase or epoch ends the current run
// (checking it for a leak trend), starts a new one, switches to the fast
// rate for FastFor (and for all of validation) and wakes Run at once.
func (s *Sampler) SetPhase(p classify.Phase, epoch int64) {
	s.setPhase(p, epoch)
}

// Phase is the phase the sampler now samples in (SetPhase's last).
func (s *Sampler) Phase() classify.Phase {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.phase
}

func (s *Sampler) setPhase(p classify.Phase, epoch int64) {
	s.mu.Lock()
	if epoch < 0 {
		epoch = s.epoch
	}
	if p == s.phase && epoch == s.epoch {
		s.mu.Unlock()
		return
	}
	warns := s.endRun()
	s.phase, s.epoch = p, epoch
	s.changed = s.cfg.Now()
	s.ceilingStale = true
	s.startRun(p, epoch)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	s.emit(warns)
}

// startRun begins a run of phase p. Called with s.mu held.
func (s *Sampler) startRun(p classify.Phase, epoch int64) {
	s.runs[p]++
	r := &memPhaseRun{phase: p, label: int64(s.runs[p]), gpu: map[string]uint64{}, gpuCap: map[string]uint64{}}
	if epoch >= 0 {
		r.label, r.isEpoch = epoch, true
	}
	s.run = r
	clear(s.valWarned)
}

// endRun closes the current run, appends its peaks to the phase's history
// and returns any leak-trend warnings. Called with s.mu held.
func (s *Sampler) endRun() []Warning {
	r := s.run
	if r == nil || r.samples == 0 || r.phase == classify.PhaseNone {
		return nil
	}
	h := s.hist[r.phase]
	if len(h) > 0 && h[len(h)-1].isEpoch != r.isEpoch {
		h = h[:0] // epochs became known (or unknown): start the trend over
	}
	h = append(h, memRunPeak{label: r.label, isEpoch: r.isEpoch, gpu: r.gpu, gpuCap: r.gpuCap, host: r.host, hostCap: r.hostCap, alloc: r.alloc})
	if len(h) > leakHistory {
		h = append(h[:0], h[len(h)-leakHistory:]...)
	}
	s.hist[r.phase] = h
	var warns []Warning
	ids := make([]string, 0, len(r.gpu))
	for id := range r.gpu {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if w, ok := s.leakTrend(r.phase, id, h, func(p memRunPeak) (uint64, uint64, bool) {
			v, ok := p.gpu[id]
			return v, p.gpuCap[id], ok
		}, LeakMinRiseGPU); ok {
			warns = append(warns, w)
		}
	}
	if w, ok := s.leakTrend(r.phase, "host", h, func(p memRunPeak) (uint64, uint64, bool) {
		return p.host, p.hostCap, p.host > 0
	}, LeakMinRiseHost); ok {
		warns = append(warns, w)
	}
	return s.growthWarnings(warns, r.phase)
}

// leakTrend looks at the tail of a phase's history for one device: at least
// LeakMinRuns runs whose peaks each rose by minRise or more. It projects the
// growth per epoch (the average over the streak) to the first epoch whose
// peak would exceed the capacity.
func (s *Sampler) leakTrend(p classify.Phase, dev string, h []memRunPeak, get func(memRunPeak) (used, capacity uint64, ok bool), minRise uint64) (Warning, bool) {
	n := 0 // runs in the rising streak, counting the last
	for i := len(h) - 1; i >= 0; i-- {
		v, _, ok := get(h[i])
		if !ok {
			break
		}
		if n > 0 {
			next, _, _ := get(h[i+1])
			if next < v+minRise {
				break
			}
		}
		n++
	}
	if n < LeakMinRuns {
		return Warning{}, false
	}
	first, last := h[len(h)-n], h[len(h)-1]
	v0, _, _ := get(first)
	v1, capacity, _ := get(last)
	steps := last.label - first.label
	if steps <= 0 {
		steps = int64(n - 1)
	}
	growth := (v1 - v0) / uint64(steps)
	if growth == 0 {
		return Warning{}, false
	}
	key := string(p) + "/" + dev
	if l, ok := s.leakWarned[key]; ok && l == last.label {
		return Warning{}, false
	}
	s.leakWarned[key] = last.label
	var labels []int64
	for _, r := range h[len(h)-n:] {
		labels = append(labels, r.label)
	}
	unit := "epoch"
	if !last.isEpoch {
		unit = string(p) + " run"
	}
	w := Warning{Kind: WarnLeakTrend, Attempt: s.cfg.Attempt, Phase: p, Epoch: last.label, Device: dev,
		UsedBytes: v1, LimitBytes: capacity, GrowthPerEpochBytes: growth, TrendEpochs: labels,
		ElapsedMs: s.lastMs}
	if !last.isEpoch {
		w.Epoch = -1
	}
	w.Message = fmt.Sprintf("%s peak on %s grew %d times in a row (%s → %s over %ss %d-%d), about %s per %s",
		cmp.Or(p.Words(), "(no phase)"), dev, n-1, humanize.Bytes(v0), humanize.Bytes(v1), unit, first.label, last.label, humanize.Bytes(growth), unit)
	if capacity > v1 {
		left := (capacity - v1 + growth - 1) / growth
		w.FailEpoch = last.label + int64(left)
		w.Message += fmt.Sprintf("; at this rate it will not fit in %s at %s %d", humanize.Bytes(capacity), unit, w.FailEpoch)
	} else if capacity > 0 {
		w.FailEpoch = last.label
		w.Message += fmt.Sprintf("; it already reaches the capacity of %s", humanize.Bytes(capacity))
	}
	w.Message += " (a leak: tensors kept across iterations, a growing cache, metrics accumulated on the device?)"
	return w, true
}

// Summary returns the peaks so far, per phase. Safe to call at any time,
// also while Run is running.
func (s *Sampler) Summary() Summary {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := Summary{Attempt: s.cfg.Attempt, Origin: s.cfg.Origin, Samples: s.samples, FirstMs: s.firstMs, LastMs: s.lastMs,
		GPUUnavailable: s.gpuWhy}
	ids := make([]string, 0, len(s.devices))
	for id := range s.devices {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		out.Devices = append(out.Devices, record.GPUDevice(s.devices[id]))
	}
	phases := make([]classify.Phase, 0, len(s.acc))
	for p := range s.acc {
		phases = append(phases, p)
	}
	sort.Slice(phases, func(i, j int) bool { return phases[i].Less(phases[j]) })
	for _, p := range phases {
		a := s.acc[p]
		ps := PhaseSummary{Phase: p, Samples: a.samples, HostPeakBytes: a.host, HostLimitBytes: a.hostLimit, HostPeakMs: a.hostMs,
			CgroupPeakBytes: a.cg, CgroupLimitBytes: a.cgLimit, RAMPeakBytes: a.ram, RAMTotalBytes: a.ramTotal, MaxWorkers: a.maxWorkers,
			StartFraction: a.start, HostCeiling: a.ceilKind, HostCeilingBytes: a.ceilBytes, HostCeilingPeakBytes: a.ceilPeak}
		if a.hostLimit > 0 {
			ps.HostPeakFraction = float64(a.host) / float64(a.hostLimit)
		}
		gids := make([]string, 0, len(a.gpu))
		for id := range a.gpu {
			gids = append(gids, id)
		}
		sort.Strings(gids)
		for _, id := range gids {
			dp := *a.gpu[id]
			if dp.CapacityBytes > dp.PeakBytes {
				dp.HeadroomBytes = dp.CapacityBytes - dp.PeakBytes
			}
			if dp.CapacityBytes > 0 {
				ps.PeakFraction = math.Max(ps.PeakFraction, float64(dp.PeakBytes)/float64(dp.CapacityBytes))
			}
			ps.GPU = append(ps.GPU, dp)
		}
		out.Phases = append(out.Phases, ps)
	}
	return out
}

// LastHost is the last host sample taken (the zero sample before the
// first): what held the memory, by role, just before a job died.
func (s *Sampler) LastHost() procfs.HostSample {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastHost
}
