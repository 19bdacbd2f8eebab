package memory

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

const mib = 1 << 20

// series is runs labelled 1.. with peaks in MiB.
func series(mibs ...float64) []RunPeak {
	out := make([]RunPeak, len(mibs))
	for i, m := range mibs {
		out[i] = RunPeak{Label: int64(i + 1), Bytes: uint64(m * mib)}
	}
	return out
}

func TestProjectShapes(t *testing.T) {
	for _, c := range []struct {
		name     string
		runs     []RunPeak
		ceiling  float64 // MiB
		ok       bool
		growing  bool
		wontFit  bool
		failNear int64 // FailLabel expected (0: not checked)
	}{
		{name: "too few runs after warm-up", runs: series(100, 148, 196), ceiling: 330, ok: false},
		{name: "steady leak, next fits", runs: series(60, 108, 156, 204), ceiling: 330, ok: true, growing: true, failNear: 7},
		{name: "steady leak, next will not fit", runs: series(60, 108, 156, 204, 252, 300), ceiling: 330, ok: true, growing: true, wontFit: true, failNear: 7},
		{name: "warm-up spike then flat", runs: series(300, 200, 200, 201, 200), ceiling: 330, ok: true},
		{name: "cache fills then flat", runs: series(100, 150, 200, 250, 280, 281, 280, 281), ceiling: 330, ok: true},
		{name: "flat near the ceiling", runs: series(320, 321, 320, 322, 321, 320), ceiling: 330, ok: true},
		{name: "validation every 3 epochs", runs: series(200, 200, 200, 310, 200, 200, 310, 200, 200, 310), ceiling: 330, ok: true},
		{name: "leak with validation spikes", runs: series(100, 120, 140, 260, 180, 200, 320, 240), ceiling: 330, ok: true, growing: true, wontFit: true},
		{name: "noisy leak", runs: series(100, 125, 138, 170, 181, 212, 219, 252), ceiling: 400, ok: true, growing: true},
		{name: "no ceiling", runs: series(1, 2, 3, 4, 5), ceiling: 0, ok: false},
	} {
		t.Run(c.name, func(t *testing.T) {
			p, ok := Project(c.runs, uint64(c.ceiling*mib))
			if ok != c.ok {
				t.Fatalf("ok = %v, want %v (%+v)", ok, c.ok, p)
			}
			if !ok {
				return
			}
			if p.Growing != c.growing || p.NextWontFit != c.wontFit {
				t.Fatalf("growing %v, next won't fit %v; want %v, %v (%+v)", p.Growing, p.NextWontFit, c.growing, c.wontFit, p)
			}
			if c.failNear != 0 && p.FailLabel != c.failNear {
				t.Errorf("fail label %d, want %d (%+v)", p.FailLabel, c.failNear, p)
			}
			if p.NextWontFit && p.FailLabel != p.NextLabel {
				t.Errorf("the next run will not fit, but it fails at %d (next %d)", p.FailLabel, p.NextLabel)
			}
		})
	}
}

func TestProjectWords(t *testing.T) {
	p, ok := Project(series(60, 108, 156, 204, 252, 300), 330*mib)
	if !ok {
		t.Fatal("no projection")
	}
	p.Phase, p.Device, p.Ceiling, p.Epochs = "train", "host", "RLIMIT_DATA", true
	got := p.Words()
	for _, want := range []string{"training host memory under RLIMIT_DATA (330 MiB)", "grows 48.0 MiB per epoch", "fit over epochs 2-6", "epoch 7 projected at", "will not fit"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
}

func TestProjectWithin(t *testing.T) {
	// 20.4 GiB + 1 GiB per epoch under 40 GiB: epoch 20 is the first that
	// will not fit. At epoch 18's checkpoint the next epoch fits, but a job
	// that checkpoints every 2 epochs must stop there.
	var runs []RunPeak
	for e := int64(1); e <= 18; e++ {
		runs = append(runs, RunPeak{Label: e, Bytes: uint64((20.4 + float64(e)) * (1 << 30))})
	}
	p, ok := Project(runs, 40<<30)
	if !ok || p.NextWontFit {
		t.Fatalf("%+v", p)
	}
	if _, _, wont := p.Within(1); wont {
		t.Fatalf("epoch 19 fits: %+v", p)
	}
	label, bytes, wont := p.Within(2)
	if !wont || label != 20 || bytes < 40<<30 {
		t.Fatalf("within 2: %d %d %v (%+v)", label, bytes, wont, p)
	}
}

// The sampler's projections: per phase and device, from the epochs' peaks,
// the run in progress included once it has a few samples; the growth
// warning names the ceiling and the epoch it will not fit at, once.
func TestSamplerProjections(t *testing.T) {
	c := &memClock{t: memT0}
	var warns []Warning
	s := NewSampler(SamplerConfig{Now: c.Now, Attempt: 1, OnWarning: func(w Warning) { warns = append(warns, w) }})
	// GPU: 20 GiB + 2 GiB per epoch of 40 GiB; host flat.
	for epoch := int64(1); epoch <= 8; epoch++ {
		s.SetPhase(classify.PhaseTrain, epoch)
		for range minCurrentSamples {
			memRecordSynthetic(s, c, uint64(20+2*epoch)*memGiB, 4*memGiB)
		}
	}
	ps := s.Projections()
	if len(ps) != 2 {
		t.Fatalf("projections %+v", ps)
	}
	g, h := ps[0], ps[1]
	if g.Device != "gpu0" || g.Ceiling != CeilingGPU || !g.Growing || g.To != 8 || g.SlopeBytes != 2*memGiB || !g.Epochs {
		t.Errorf("GPU projection %+v", g)
	}
	// Epoch 8 peaks at 36 GiB; epoch 9 at 38 GiB plus the margin fits, 10 does not.
	if g.NextWontFit || g.FailLabel != 10 {
		t.Errorf("GPU projection: next won't fit %v, fails at %d; want false, 10", g.NextWontFit, g.FailLabel)
	}
	if l, _, wont := g.Within(2); !wont || l != 10 {
		t.Errorf("within 2 epochs: %d %v", l, wont)
	}
	if h.Device != "host" || h.Growing || h.Ceiling != CeilingRAM {
		t.Errorf("host projection %+v", h)
	}
	var growth []Warning
	for _, w := range warns {
		if w.Kind == WarnGrowth {
			growth = append(growth, w)
		}
	}
	if len(growth) != 1 || growth[0].Device != "gpu0" || growth[0].FailEpoch != 10 ||
		!strings.Contains(growth[0].Message, "training memory on gpu0 under the GPU's capacity (40.00 GiB) grows 2.00 GiB per epoch") {
		t.Errorf("growth warnings %+v", growth)
	}
}

// The torch probe's allocator figures name fragmentation: the same GPU
// growth is fragmentation when the reserved but unallocated memory grows
// with it, and not when it stays flat.
func TestSamplerProjectionFragmentation(t *testing.T) {
	for _, c := range []struct {
		name      string
		unalloc   func(epoch int64) int64
		retries   func(epoch int64) int64
		wantFrag  bool
		withProbe bool
	}{
		{"no probe", nil, nil, false, false},
		{"unallocated grows", func(e int64) int64 { return e * 2 << 30 }, func(int64) int64 { return 0 }, true, true},
		{"retries counted", func(int64) int64 { return 1 << 30 }, func(e int64) int64 { return e / 6 }, true, true},
		{"allocated grows, cache flat", func(int64) int64 { return 1 << 30 }, func(int64) int64 { return 0 }, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			clk := &memClock{t: memT0}
			s := NewSampler(SamplerConfig{Now: clk.Now, Attempt: 1, OnWarning: func(Warning) {}})
			for epoch := int64(1); epoch <= 8; epoch++ {
				s.SetPhase(classify.PhaseTrain, epoch)
				if c.withProbe {
					s.NoteAllocator(c.unalloc(epoch), c.retries(epoch))
				}
				for range minCurrentSamples {
					memRecordSynthetic(s, clk, uint64(20+2*epoch)*memGiB, 4*memGiB)
				}
			}
			ps := s.Projections()
			if len(ps) == 0 || ps[0].Device != "gpu0" || !ps[0].Growing {
				t.Fatalf("projections %+v", ps)
			}
			if ps[0].Fragmentation != c.wantFrag {
				t.Errorf("fragmentation %v, want %v", ps[0].Fragmentation, c.wantFrag)
			}
		})
	}
}
