package memory

import (
	"cmp"
	"sort"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// Ceiling names, as projections and warnings say them.
const (
	CeilingGPU = "the GPU's capacity"
	CeilingRAM = "the machine's RAM"
)

// minCurrentSamples: the run in progress joins a projection once it has
// this many samples (a checkpoint completes at a run's end, before the
// next run starts and closes it).
const minCurrentSamples = 3

// Projections fits every phase's runs of this attempt on each device
// (Project), the run in progress included when it has a few samples (its
// peak so far, a lower bound: a projection errs towards no stop). Only the
// projections that could be made are returned, the earliest to run out
// first. Safe to call at any time.
func (s *Sampler) Projections() []Projection {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Projection
	phases := make([]classify.Phase, 0, len(s.hist))
	for p := range s.hist {
		phases = append(phases, p)
	}
	if r := s.run; r != nil && r.phase != classify.PhaseNone && s.hist[r.phase] == nil && r.samples >= minCurrentSamples {
		phases = append(phases, r.phase)
	}
	sort.Slice(phases, func(i, j int) bool { return phases[i].Less(phases[j]) })
	for _, p := range phases {
		h := s.hist[p]
		if r := s.run; r != nil && r.phase == p && r.samples >= minCurrentSamples &&
			(len(h) == 0 || h[len(h)-1].isEpoch == r.isEpoch && h[len(h)-1].label < r.label) {
			h = append(h[:len(h):len(h)], memRunPeak{label: r.label, isEpoch: r.isEpoch, gpu: r.gpu, gpuCap: r.gpuCap, host: r.host, hostCap: r.hostCap, alloc: r.alloc})
		}
		out = append(out, s.project(p, h)...)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.NextWontFit != b.NextWontFit {
			return a.NextWontFit
		}
		return a.Growing && (!b.Growing || a.FailLabel < b.FailLabel)
	})
	return out
}

// project fits phase p's history h on each device. Called with s.mu held.
func (s *Sampler) project(p classify.Phase, h []memRunPeak) []Projection {
	if len(h) == 0 {
		return nil
	}
	var out []Projection
	ids := make([]string, 0, len(h[len(h)-1].gpu))
	for id := range h[len(h)-1].gpu {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	fit := func(dev, ceiling string, get func(memRunPeak) (uint64, uint64, bool)) {
		var runs []RunPeak
		var capacity uint64
		for _, r := range h {
			v, c, ok := get(r)
			if !ok || len(runs) > 0 && c != capacity {
				// A gap, or another ceiling (an rlimit read after the start:
				// another unit): the runs before it are another stretch.
				runs = runs[:0]
			}
			if !ok {
				continue
			}
			runs = append(runs, RunPeak{Label: r.label, Bytes: v})
			capacity = c
		}
		if pr, ok := Project(runs, capacity); ok {
			pr.Phase, pr.Device, pr.Ceiling, pr.Epochs = string(p), dev, ceiling, h[len(h)-1].isEpoch
			if dev != "host" {
				pr.Fragmentation = fragmenting(h, pr)
			}
			out = append(out, pr)
		}
	}
	for _, id := range ids {
		fit(id, CeilingGPU, func(r memRunPeak) (uint64, uint64, bool) {
			v, ok := r.gpu[id]
			return v, r.gpuCap[id], ok && r.gpuCap[id] > 0
		})
	}
	fit("host", cmp.Or(s.ceiling.Kind, CeilingRAM), func(r memRunPeak) (uint64, uint64, bool) {
		return r.host, r.hostCap, r.host > 0 && r.hostCap > 0
	})
	return out
}

// fragmenting reports whether the allocator's figures over the runs pr
// fitted show fragmentation: the reserved-but-unallocated memory grows at
// half the peaks' rate or more, or allocation retries were counted during
// them (the caching allocator freed its cache and tried again).
func fragmenting(h []memRunPeak, pr Projection) bool {
	var un []RunPeak
	var first, last allocSigns
	for _, r := range h {
		if r.label < pr.From || r.label > pr.To || !r.alloc.seen {
			continue
		}
		if !first.seen {
			first = r.alloc
		}
		last = r.alloc
		un = append(un, RunPeak{Label: r.label, Bytes: uint64(max(r.alloc.unallocated, 0))})
	}
	if len(un) < 2 {
		return false
	}
	return last.retries > first.retries || theilSen(un) >= float64(pr.SlopeBytes)/2 && pr.SlopeBytes > 0
}

// NoteAllocator records the allocator's figures the torch probe read in
// the job (reserved but unallocated bytes, allocation retries so far) in
// the current run: fragmentation's signs for the projection.
func (s *Sampler) NoteAllocator(unallocated, retries int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.run; r != nil {
		r.alloc.unallocated = max(r.alloc.unallocated, unallocated)
		r.alloc.retries = max(r.alloc.retries, retries)
		r.alloc.seen = true
	}
}

// growthWarnings adds a warning for each projection of phase p that found
// growth which will not fit at a known epoch, once per phase and device in
// an attempt. Called with s.mu held, as a run ends.
func (s *Sampler) growthWarnings(warns []Warning, p classify.Phase) []Warning {
	for _, pr := range s.project(p, s.hist[p]) {
		key := pr.Phase + "/" + pr.Device
		if !pr.Growing || pr.FailLabel == 0 || s.growthWarned[key] {
			continue
		}
		s.growthWarned[key] = true
		w := Warning{Kind: WarnGrowth, Attempt: s.cfg.Attempt, Phase: p, Epoch: pr.To, Device: pr.Device,
			UsedBytes: pr.LastBytes, LimitBytes: pr.CeilingBytes, GrowthPerEpochBytes: pr.SlopeBytes,
			FailEpoch: pr.FailLabel, ElapsedMs: s.lastMs, Message: "projection: " + pr.Words()}
		if !pr.Epochs {
			w.Epoch = -1
		}
		warns = append(warns, w)
	}
	return warns
}

// Epoch is the epoch the sampler samples in (-1: none known yet).
func (s *Sampler) Epoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epoch
}

// HostCeilingName names a host ceiling kind for people (procfs.Ceiling's
// Kind; "" is the machine's RAM).
func HostCeilingName(c procfs.Ceiling) string { return cmp.Or(c.Kind, CeilingRAM) }
