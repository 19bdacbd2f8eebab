package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

func TestHangSection(t *testing.T) {
	p, err := Parse("p.yaml", []byte("version: 1\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := p.Hang(); ok {
		t.Errorf("no hang: section, but the watchdog is on")
	}
	p, err = Parse("p.yaml", []byte("version: 1\nhang: {min: 1m, factor: 4}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := p.Hang(); !ok || h != (Hang{Min: time.Minute, Factor: 4, Max: 2 * time.Hour}) {
		t.Errorf("Hang() = %+v, %v", h, ok)
	}
	p, err = Parse("p.yaml", []byte("version: 1\nhang: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if h, ok := p.Hang(); !ok || h != DefaultHang {
		t.Errorf("hang: {} gives %+v, %v; want the defaults", h, ok)
	}
}

func TestHangErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{"hang: {min: 5}", `p.yaml:2:13: hang min must be a duration such as "30s" or "2m", not "5"; write it with a unit, e.g. "5s"`},
		{"hang: {min: 0s}", "p.yaml:2:13: hang min must be above 0"},
		{"hang: {factor: 0.5}", "p.yaml:2:16: hang factor must be at least 1"},
		{"hang: {factor: x}", `p.yaml:2:16: hang factor must be a number, not "x"`},
		{"hang: {min: 10m, max: 5m}", "p.yaml:2:23: hang max (5m0s) is below min (10m0s)"},
		{"hang: {maxx: 5m}", `p.yaml:2:8: hang: unknown key "maxx" (did you mean "max"?)`},
		{"hang: 5m", "p.yaml:2:7: hang must be a mapping"},
	}
	for _, c := range cases {
		_, err := Parse("p.yaml", []byte("version: 1\n"+c.yaml+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want %q", c.yaml, err, c.want)
		}
	}
}

func TestHangLimit(t *testing.T) {
	h := Hang{Min: 5 * time.Minute, Factor: 10, Max: 2 * time.Hour}
	for _, c := range []struct{ usual, want time.Duration }{
		{0, 2 * time.Hour},              // no rhythm: max
		{time.Second, 5 * time.Minute},  // 10s: the floor
		{time.Minute, 10 * time.Minute}, // factor × usual
		{time.Hour, 2 * time.Hour},      // the ceiling
		{-time.Second, 2 * time.Hour},   // nonsense: max
	} {
		if got := h.Limit(c.usual); got != c.want {
			t.Errorf("Limit(%s) = %s, want %s", c.usual, got, c.want)
		}
	}
}

// A hang is a failure kind of its own: rules match it, per_kind budgets
// count it, and it is not a crash (budget.crash does not apply).
func TestDecideHang(t *testing.T) {
	p, err := Parse("p.yaml", []byte(`version: 1
hang: {min: 1m}
rules:
  - name: hang
    when: {kind: hang}
    steps:
      - retry: true
budget: {per_kind: {hang: 1}}
`))
	if err != nil {
		t.Fatal(err)
	}
	out := Outcome{Verdict: classify.Verdict{Kind: classify.KindHang}, Exit: classify.Exit{Code: 143, StoppedByUs: true}, Attempt: 1}
	d := p.Decide(NewState(nil), out)
	if d.Verb != Relaunch || d.Rule != "hang" {
		t.Fatalf("first hang: %+v", d)
	}
	out.Attempt = 2
	d = p.Decide(d.State, out)
	if d.Verb != GiveUp || !strings.Contains(d.Reason, "budget for hang exhausted (1/1)") {
		t.Errorf("second hang: %+v", d)
	}
}
