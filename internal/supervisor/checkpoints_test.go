package supervisor

import (
	"testing"
	"time"
)

// The writers are gone when the main child exited, if it left nothing
// behind; otherwise when gpuguard saw the last of them end (now).
func TestWritersGoneAt(t *testing.T) {
	now := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	exited := now.Add(-3 * time.Second)
	for _, c := range []struct {
		name string
		res  attemptResult
		want time.Time
	}{
		{"alone: its exit", attemptResult{End: exited}, exited},
		{"descendants stopped after it: now", attemptResult{End: exited, Leftovers: 2}, now},
		{"no exit time: now", attemptResult{}, now},
		{"an exit after now (clock stepped back): now", attemptResult{End: now.Add(time.Second)}, now},
	} {
		if got := writersGoneAt(c.res, now); !got.Equal(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
