// Package stat holds what the benchmark programs under bench/ print their
// figures with: percentiles of durations, milliseconds, the load average.
package stat

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Pct is the p-th percentile of d (nearest rank); 0 for none.
func Pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (p*len(s) + 99) / 100
	return s[max(i-1, 0)]
}

// Ms is d in milliseconds with one decimal: "27.1ms".
func Ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }

// LoadAvg is the machine's 1, 5 and 15 minute load averages, printed with
// figures measured on a shared machine.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}

// Monotonic is CLOCK_MONOTONIC in nanoseconds: the same clock in every
// process, unlike Go's monotonic readings, which are per process; a job and
// gpuguard stamp the times a benchmark subtracts with it.
func Monotonic() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		panic(err)
	}
	return ts.Nano()
}
