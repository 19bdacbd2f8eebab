package memory

import (
	"strings"
	"testing"
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
