package stat

import (
	"testing"
	"time"
)

func TestPct(t *testing.T) {
	d := []time.Duration{5, 1, 4, 2, 3}
	for _, c := range []struct {
		p    int
		want time.Duration
	}{{0, 1}, {50, 3}, {95, 5}, {100, 5}} {
		if got := Pct(d, c.p); got != c.want {
			t.Errorf("Pct(%d) = %v, want %v", c.p, got, c.want)
		}
	}
	if Pct(nil, 50) != 0 {
		t.Error("Pct of nothing")
	}
	if got := Ms(27100 * time.Microsecond); got != "27.1ms" {
		t.Errorf("Ms = %q", got)
	}
}
