package memory

import (
	"fmt"
	"math"
	"slices"

	"github.com/gpuguard/gpuguard/internal/humanize"
)

// The projection: will the next run of a phase fit under the ceiling that
// applies to it? It is a pure function of the per-run peaks the sampler
// keeps (one per epoch, or per run of the phase when epochs are unknown),
// so that the same figures always give the same answer, and the benchmark
// (bench/relaunch) can replay shapes through it.
//
// Robustness, in the order the rules apply:
//   - warm-up: the first run of an attempt is left out of the fit (it
//     loads, compiles and fills caches once);
//   - never from one sample: at least ProjectMinRuns runs are fitted;
//   - noise and periodic spikes (validation every N epochs counted in the
//     phase): the slope is the Theil-Sen estimator, the median of the
//     slopes between every pair of runs, which a minority of outliers does
//     not move; the margin is three times the residuals' robust spread
//     (1.4826 × their median absolute deviation), or the most any run rose
//     above the line (a spike that came once, validation every N epochs,
//     comes again), whichever is larger, and at least ProjectMinMarginFrac
//     of the ceiling;
//   - a cache that fills and then stays flat: the growth must go on in the
//     recent half of the window too (its own Theil-Sen slope at least half
//     the whole window's), and be at least ProjectMinSlopeFrac of the
//     ceiling per run.
//
// Only then is the next run's peak projected (the fit at the next label,
// plus the margin), and the first label at which it reaches the ceiling.

// Projection tuning.
const (
	ProjectMinRuns       = 3     // runs fitted, after the warm-up run
	ProjectWindow        = 8     // the most recent runs fitted
	ProjectMinSlopeFrac  = 0.005 // growth per run below this share of the ceiling is no growth
	ProjectMinMarginFrac = 0.01  // the margin is at least this share of the ceiling
)

// RunPeak is one run of a phase: its label (epoch, or run number) and its
// peak in the units of the ceiling.
type RunPeak struct {
	Label int64
	Bytes uint64
}

// Projection is what the fit says of a phase on one device.
type Projection struct {
	Phase   string `json:"phase"`
	Device  string `json:"device"` // a GPU's id, or "host"
	Ceiling string `json:"ceiling"`
	// CeilingBytes: what the device's memory meets (a GPU's capacity; the
	// host ceiling: RLIMIT_DATA/AS, the cgroup's limit, Slurm's request, or
	// the machine's RAM).
	CeilingBytes uint64 `json:"ceiling_bytes"`
	// The runs fitted (labels From..To, Runs of them), the growth per run
	// (SlopeBytes), the margin, the last run's peak.
	From       int64  `json:"from"`
	To         int64  `json:"to"`
	Runs       int    `json:"runs"`
	SlopeBytes uint64 `json:"slope_bytes"`
	// RecentSlopeBytes: the slope of the window's recent half.
	RecentSlopeBytes uint64 `json:"recent_slope_bytes"`
	MarginBytes      uint64 `json:"margin_bytes"`
	LastBytes        uint64 `json:"last_bytes"`
	// NextLabel is the run projected, NextBytes its peak with the margin.
	NextLabel int64  `json:"next_label"`
	NextBytes uint64 `json:"next_bytes"`
	// Growing: the fit found sustained growth. NextWontFit: the next run's
	// projected peak reaches the ceiling. FailLabel: the first label at
	// which it does (0: no growth, or no ceiling).
	Growing     bool  `json:"growing"`
	NextWontFit bool  `json:"next_wont_fit"`
	FailLabel   int64 `json:"fail_label,omitempty"`
	// Epochs: the labels are epochs (else runs of the phase).
	Epochs bool `json:"epochs"`
	// Fragmentation: on a GPU, the torch probe's allocator figures over
	// the runs fitted rose with the peaks (reserved but unallocated memory,
	// allocation retries): the growth is the allocator's.
	Fragmentation bool `json:"fragmentation,omitempty"`
	// The fitted line (bytes = icpt + slope × label).
	icpt, slope float64
}

// At is the projected peak of the run labelled label, margin included (0
// without growth).
func (p Projection) At(label int64) uint64 {
	if !p.Growing {
		return 0
	}
	return uint64(p.at(label))
}

func (p Projection) at(label int64) float64 {
	return math.Max(p.icpt+p.slope*float64(label), float64(p.LastBytes)+p.slope*float64(label-p.To)) + float64(p.MarginBytes)
}

// Within says whether the growth will not fit within the next n runs (the
// runs until the next checkpoint: a job that checkpoints every n epochs
// must stop now if any of them will not fit), and the first run that will
// not (its label and projected peak).
func (p Projection) Within(n int64) (label int64, bytes uint64, wontFit bool) {
	if !p.Growing || p.FailLabel == 0 || p.FailLabel > p.To+max(n, 1) {
		return 0, 0, false
	}
	return p.FailLabel, p.At(p.FailLabel), true
}

// Project fits the runs of one phase on one device (in order, the first
// being the attempt's first run) against ceiling. ok is false when there is
// too little to fit (fewer than ProjectMinRuns after the warm-up run) or no
// ceiling.
func Project(runs []RunPeak, ceiling uint64) (Projection, bool) {
	if ceiling == 0 || len(runs) < ProjectMinRuns+1 {
		return Projection{}, false
	}
	fit := runs[1:] // the warm-up run
	if len(fit) > ProjectWindow {
		fit = fit[len(fit)-ProjectWindow:]
	}
	slope := theilSen(fit)
	recent := theilSen(fit[len(fit)/2:])
	if len(fit)-len(fit)/2 < 2 {
		recent = slope
	}
	// The line through the median point with the slope (Theil-Sen's
	// intercept), and the residuals' robust spread.
	icpt := medianOf(fit, func(r RunPeak) float64 { return float64(r.Bytes) - slope*float64(r.Label) })
	res := make([]float64, len(fit))
	for i, r := range fit {
		res[i] = float64(r.Bytes) - (icpt + slope*float64(r.Label))
	}
	med := median(slices.Clone(res))
	dev := make([]float64, len(res))
	top := 0.0 // the highest any run rose above the line: a spike recurs
	for i, x := range res {
		dev[i] = math.Abs(x - med)
		top = math.Max(top, x)
	}
	margin := max(3*1.4826*median(dev), top, ProjectMinMarginFrac*float64(ceiling))
	last := runs[len(runs)-1]
	p := Projection{CeilingBytes: ceiling, From: fit[0].Label, To: last.Label, Runs: len(fit),
		SlopeBytes: uint64(math.Max(slope, 0)), RecentSlopeBytes: uint64(math.Max(recent, 0)),
		MarginBytes: uint64(margin), LastBytes: last.Bytes, NextLabel: last.Label + 1}
	p.Growing = slope >= ProjectMinSlopeFrac*float64(ceiling) && recent >= slope/2
	if !p.Growing {
		return p, true
	}
	// The next run peaks at least as high as the last one did plus the
	// growth (a run above the line is not forgotten), or at the line.
	p.icpt, p.slope = icpt, slope
	at := p.at
	next := at(p.NextLabel)
	p.NextBytes = uint64(next)
	p.NextWontFit = next >= float64(ceiling)
	// The first label whose projection reaches the ceiling.
	n := math.Ceil((float64(ceiling) - at(last.Label)) / slope)
	p.FailLabel = last.Label + int64(math.Max(n, 0))
	if p.FailLabel <= last.Label {
		p.FailLabel = p.NextLabel
	}
	return p, true
}

// Words is the projection in words, for warnings and decision lines:
// "host memory under RLIMIT_DATA (330.0 MiB) grows 48.0 MiB per epoch (fit
// over epochs 2-6, margin 3.3 MiB; last peak 290.0 MiB): epoch 7 projected
// at 341.3 MiB".
func (p Projection) Words() string {
	unit := "epoch"
	if !p.Epochs {
		unit = "run"
	}
	what := "memory on " + p.Device
	if p.Device == "host" {
		what = "host memory"
	}
	s := fmt.Sprintf("%s %s under %s (%s) grows %s per %s (fit over %ss %d-%d, margin %s; last peak %s)",
		phaseWords(p.Phase), what, p.Ceiling, humanize.Bytes(p.CeilingBytes), humanize.Bytes(p.SlopeBytes), unit,
		unit, p.From, p.To, humanize.Bytes(p.MarginBytes), humanize.Bytes(p.LastBytes))
	if p.NextWontFit {
		return s + fmt.Sprintf(": %s %d projected at %s, which will not fit", unit, p.NextLabel, humanize.Bytes(p.NextBytes))
	}
	return s + fmt.Sprintf(": at this rate it will not fit at %s %d", unit, p.FailLabel)
}

func phaseWords(p string) string {
	switch p {
	case "train":
		return "training"
	case "val":
		return "validation"
	case "":
		return "(no phase)"
	}
	return p
}

// theilSen is the median of the slopes between every pair of runs.
func theilSen(rs []RunPeak) float64 {
	var s []float64
	for i := range rs {
		for j := i + 1; j < len(rs); j++ {
			if dx := float64(rs[j].Label - rs[i].Label); dx != 0 {
				s = append(s, (float64(rs[j].Bytes)-float64(rs[i].Bytes))/dx)
			}
		}
	}
	if len(s) == 0 {
		return 0
	}
	return median(s)
}

func medianOf(rs []RunPeak, f func(RunPeak) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return median(v)
}

// median sorts v and returns its median.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
