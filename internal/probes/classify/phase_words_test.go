package classify

import (
	"slices"
	"testing"
)

func TestPhaseWords(t *testing.T) {
	for p, want := range map[Phase][2]string{
		PhaseTrain: {"training", "train"},
		PhaseVal:   {"validation", "val"},
		PhaseNone:  {"", "-"},
		"test":     {"test", "test"},
	} {
		if got := p.Words(); got != want[0] {
			t.Errorf("Phase(%q).Words() = %q, want %q", p, got, want[0])
		}
		if got := p.Label(); got != want[1] {
			t.Errorf("Phase(%q).Label() = %q, want %q", p, got, want[1])
		}
	}
}

func TestPhaseLess(t *testing.T) {
	got := []Phase{PhaseNone, "Warmup", PhaseVal, "test", PhaseTrain}
	slices.SortFunc(got, func(a, b Phase) int {
		switch {
		case a.Less(b):
			return -1
		case b.Less(a):
			return 1
		}
		return 0
	})
	want := []Phase{PhaseTrain, PhaseVal, "test", "Warmup", PhaseNone}
	if !slices.Equal(got, want) {
		t.Errorf("sorted phases = %q, want %q", got, want)
	}
}

// Every kind has a headline of its own; only KindNone (and a kind this
// version does not know) says no failure was found.
func TestKindTitle(t *testing.T) {
	seen := map[string]Kind{}
	for _, k := range []Kind{KindGPUOOM, KindCPUAllocOOM, KindHostOOM, KindCrash, KindHang} {
		title := k.Title()
		if title == KindNone.Title() {
			t.Errorf("%s.Title() = %q, the title of no failure", k, title)
		}
		if other, dup := seen[title]; dup {
			t.Errorf("%s and %s share the title %q", k, other, title)
		}
		seen[title] = k
	}
	if got := Kind("future_kind").Title(); got != "no failure found" {
		t.Errorf("unknown kind's title = %q", got)
	}
}
