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

// Every kind has a headline and a noun of its own; only KindNone (and a
// kind this version does not know) says no failure was found.
func TestKindWords(t *testing.T) {
	for _, words := range []struct {
		name    string
		of      func(Kind) string
		unknown string
	}{
		{"Title", Kind.Title, "no failure found"},
		{"Noun", Kind.Noun, "an unrecognised failure"},
	} {
		seen := map[string]Kind{}
		for _, k := range []Kind{KindGPUOOM, KindCPUAllocOOM, KindHostOOM, KindCrash, KindHang} {
			w := words.of(k)
			if w == words.of(KindNone) {
				t.Errorf("%s.%s() = %q, the words for no failure", k, words.name, w)
			}
			if other, dup := seen[w]; dup {
				t.Errorf("%s and %s share the %s %q", k, other, words.name, w)
			}
			seen[w] = k
		}
		if got := words.of("future_kind"); got != words.unknown {
			t.Errorf("unknown kind's %s = %q, want %q", words.name, got, words.unknown)
		}
	}
}
