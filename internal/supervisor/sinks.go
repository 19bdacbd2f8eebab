package supervisor

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/gpuguard/gpuguard/internal/metrics"
	"github.com/gpuguard/gpuguard/internal/notify"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// startSinks makes the run's events reach the notifications (--notify,
// --notify-command) and the metrics files (metrics.prom, --metrics-file),
// which say their failures once on the status output. The returned function
// gives queued notifications their bounded time to go out; call it after the
// run's last event. While quiet holds (a member of a group, whose leader
// notifies for the whole job) nothing is notified; a member that lost its
// leader speaks for itself again. Metrics are per node and always written.
func startSinks(cfg Config, rd *rundir.Dir, status *Status, quiet *atomic.Bool) (stop func()) {
	warn := func(msg string) { status.Printf("%s", msg) }
	paths := []string{filepath.Join(rd.Path(), metrics.FileName)}
	if cfg.MetricsFile != "" {
		paths = append(paths, cfg.MetricsFile)
	}
	m := metrics.New(paths, warn)
	// A continued run's metrics count what its earlier gpuguards recorded.
	if f, err := os.Open(filepath.Join(rd.Path(), record.Events)); err == nil {
		entries, _, _ := record.Read(f)
		f.Close()
		m.Replay(entries)
	}
	rd.OnWrite(m.Observe)
	n := notify.Start(notify.Config{URL: cfg.Notify, Command: cfg.NotifyCommand, Warn: warn})
	rd.OnWrite(func(t time.Time, ev record.Event) {
		if !quiet.Load() {
			n.Observe(t, ev)
		}
	})
	return n.Close
}
