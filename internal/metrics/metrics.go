// Package metrics keeps a Prometheus text file (metrics.prom in the run
// directory, and wherever --metrics-file says, for node_exporter's textfile
// collector) that says where a run stands. It follows the events the run
// directory records (rundir.Dir.OnWrite) and rewrites each file whole
// (a temporary file renamed over it) after each event that changes a figure,
// so that a scraper reads the old content or the new, never a mix.
//
// The metrics (docs/notify.md):
//
// Every sample has the label run: the run directory.
//
//	gpuguard_run_info{command}                1
//	gpuguard_run_start_time_seconds           the latest run_start (Unix time)
//	gpuguard_running                          1 until the run ends, then 0
//	gpuguard_exit_code                        gpuguard's exit status, once it ended
//	gpuguard_attempts_total                   attempts started
//	gpuguard_relaunches_total{cause}          relaunches, by what the attempt died of
//	gpuguard_knob{knob}                       the value the current (or next) attempt gets; numeric knobs only
//	gpuguard_peak_memory_bytes{phase,device}  the latest sampled attempt's peaks; device "host" is the job's processes
//	gpuguard_capacity_bytes{device}           each GPU's memory
//	gpuguard_relaunch_lost_seconds_total      time lost to relaunches (see Lost)
//
// Lost: for each relaunch, the time from the failed attempt's end to the
// next attempt's start (backoff, waiting for memory, the new process), plus
// the failed attempt's work that the next attempt does again: the part of
// the failed attempt after the checkpoint the next attempt resumes from
// (file modification time), or all of it when it resumes from no checkpoint
// or from one written before the failed attempt began. When the
// checkpoint's time cannot be read, the redone work counts 0.
package metrics

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// FileName is the metrics file of a run directory.
const FileName = "metrics.prom"

// Writer keeps the metrics files. Its methods are safe for concurrent use.
type Writer struct {
	paths []string
	warn  func(string)

	mu     sync.Mutex
	warned map[string]bool
	s      state
}

type state struct {
	runDir, command string
	workdir         string
	start           time.Time
	running         bool
	ended           bool
	exitCode        int

	attempts   int
	relaunches map[string]int
	knobs      map[string]record.Value
	peaks      map[[2]string]uint64 // phase, device
	capacity   map[string]uint64
	lost       time.Duration

	// The last attempt's span and cause, for the decision that follows.
	lastStart, lastEnd time.Time
	lastCause          string
	// The end of the failed attempt a relaunch follows, until the next
	// attempt starts.
	relaunchFrom time.Time
}

// New returns a Writer of the files at paths (the run directory's
// metrics.prom, and --metrics-file). warn says, once per file, that it
// could not be written.
func New(paths []string, warn func(string)) *Writer {
	return &Writer{paths: paths, warn: warn, warned: map[string]bool{},
		s: state{relaunches: map[string]int{}, knobs: map[string]record.Value{}, peaks: map[[2]string]uint64{}, capacity: map[string]uint64{}}}
}

// Observe takes one event of the run, recorded at t, and rewrites the files
// when it changed a figure.
func (w *Writer) Observe(t time.Time, ev record.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.s.apply(t, ev, statCheckpoint) {
		return
	}
	data := w.s.render()
	for _, p := range w.paths {
		if err := writeAtomic(p, data); err != nil && !w.warned[p] {
			w.warned[p] = true
			if w.warn != nil {
				w.warn(fmt.Sprintf("cannot write metrics file %s: %v; the job goes on", p, err))
			}
		}
	}
}

// Replay takes the events an earlier gpuguard recorded in the run directory
// (--resume-run, a Slurm requeue), so that the counts cover the whole run;
// the files are written at the next event.
func (w *Writer) Replay(entries []record.Entry) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, e := range entries {
		if ev, err := e.Event(); err == nil {
			w.s.apply(e.Time, ev, statCheckpoint)
		}
	}
}

// statCheckpoint is the modification time of a checkpoint.
func statCheckpoint(path string) (time.Time, bool) {
	st, err := os.Stat(path)
	if err != nil {
		return time.Time{}, false
	}
	return st.ModTime(), true
}

// apply updates s with ev; false when no figure changed.
func (s *state) apply(t time.Time, ev record.Event, mtime func(string) (time.Time, bool)) bool {
	switch e := ev.(type) {
	case record.RunStart:
		s.runDir, s.command, s.workdir = e.RunDir, strings.Join(e.Argv, " "), e.Workdir
		s.start, s.running, s.ended = t, true, false
	case record.Policy:
		s.setKnobs(e.Knobs)
	case record.AttemptStart:
		s.attempts++
		if !s.relaunchFrom.IsZero() {
			if d := t.Sub(s.relaunchFrom); d > 0 {
				s.lost += d
			}
			s.relaunchFrom = time.Time{}
		}
	case record.AttemptEnd:
		s.lastEnd = t
		s.lastStart = t.Add(-time.Duration(e.DurationS * float64(time.Second)))
		s.lastCause = cause(e)
	case record.Memory:
		s.peaks = map[[2]string]uint64{}
		for _, d := range e.Summary.Devices {
			s.capacity[d.ID] = d.TotalBytes
		}
		for _, ph := range e.Summary.Phases {
			name := string(ph.Phase)
			if name == "" {
				name = "none"
			}
			for _, g := range ph.GPU {
				k := [2]string{name, g.ID}
				s.peaks[k] = max(s.peaks[k], g.PeakBytes)
				if g.CapacityBytes > 0 {
					s.capacity[g.ID] = g.CapacityBytes
				}
			}
			if ph.HostPeakBytes > 0 {
				k := [2]string{name, "host"}
				s.peaks[k] = max(s.peaks[k], ph.HostPeakBytes)
			}
		}
	case record.Decision:
		s.setKnobs(e.Knobs)
		if e.Verb == "relaunch" {
			s.relaunches[s.lastCause]++
			s.lost += s.redone(e.Checkpoint, mtime)
			s.relaunchFrom = s.lastEnd
		}
	case record.RunEnd:
		s.running, s.ended, s.exitCode = false, true, e.ExitCode
	default:
		return false
	}
	return true
}

// redone is the failed attempt's work the next attempt does again (Lost).
func (s *state) redone(ckpt string, mtime func(string) (time.Time, bool)) time.Duration {
	from := s.lastStart
	if ckpt != "" {
		if !filepath.IsAbs(ckpt) && s.workdir != "" {
			ckpt = filepath.Join(s.workdir, ckpt)
		}
		m, ok := mtime(ckpt)
		if !ok {
			return 0
		}
		if m.After(from) {
			from = m
		}
	}
	if d := s.lastEnd.Sub(from); d > 0 {
		return d
	}
	return 0
}

func (s *state) setKnobs(k map[string]record.Value) {
	if k != nil {
		s.knobs = k
	}
}

// cause is what an attempt died of, as relaunches_total's label: the
// classifier's kind, or "exit" for a failure it did not recognise.
func cause(e record.AttemptEnd) string {
	if e.Verdict != nil && e.Verdict.Kind != "" && e.Verdict.Kind != classify.KindNone {
		return string(e.Verdict.Kind)
	}
	return "exit"
}

// render writes the text exposition format.
func (s *state) render() []byte {
	var b strings.Builder
	// Every sample names its run, so that the files of several runs on one
	// node (node_exporter's textfile collector merges them) never collide.
	run := "run=" + quote(s.runDir)
	family := func(name, typ, help string) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, typ)
	}
	family("gpuguard_run_info", "gauge", "The run this file describes (always 1).")
	fmt.Fprintf(&b, "gpuguard_run_info{%s,command=%s} 1\n", run, quote(s.command))
	if !s.start.IsZero() {
		family("gpuguard_run_start_time_seconds", "gauge", "When the run (or its latest resumption) started, Unix time.")
		fmt.Fprintf(&b, "gpuguard_run_start_time_seconds{%s} %s\n", run, num(float64(s.start.UnixMilli())/1000))
	}
	family("gpuguard_running", "gauge", "1 while gpuguard supervises the run, 0 once it ended.")
	fmt.Fprintf(&b, "gpuguard_running{%s} %d\n", run, b2i(s.running))
	if s.ended {
		family("gpuguard_exit_code", "gauge", "gpuguard's exit status at the run's end.")
		fmt.Fprintf(&b, "gpuguard_exit_code{%s} %d\n", run, s.exitCode)
	}
	family("gpuguard_attempts_total", "counter", "Attempts started.")
	fmt.Fprintf(&b, "gpuguard_attempts_total{%s} %d\n", run, s.attempts)
	family("gpuguard_relaunches_total", "counter", "Relaunches, by what the attempt before died of (the classifier's kind; exit: not recognised).")
	for _, c := range sortedKeys(s.relaunches) {
		fmt.Fprintf(&b, "gpuguard_relaunches_total{%s,cause=%s} %d\n", run, quote(c), s.relaunches[c])
	}
	family("gpuguard_relaunch_lost_seconds_total", "counter", "Time lost to relaunches: the gap to the next attempt plus the failed attempt's work after the checkpoint resumed from.")
	fmt.Fprintf(&b, "gpuguard_relaunch_lost_seconds_total{%s} %s\n", run, num(s.lost.Seconds()))
	family("gpuguard_knob", "gauge", "The value of each numeric knob the current (or next) attempt gets.")
	for _, k := range sortedKeys(s.knobs) {
		v := s.knobs[k]
		if v.Null {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v.Text), 64)
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "gpuguard_knob{%s,knob=%s} %s\n", run, quote(k), num(f))
	}
	family("gpuguard_peak_memory_bytes", "gauge", "Peak memory of the latest sampled attempt, per phase and device (host: the job's processes, PSS).")
	keys := make([][2]string, 0, len(s.peaks))
	for k := range s.peaks {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0] < keys[j][0]
		}
		return keys[i][1] < keys[j][1]
	})
	for _, k := range keys {
		fmt.Fprintf(&b, "gpuguard_peak_memory_bytes{%s,phase=%s,device=%s} %d\n", run, quote(k[0]), quote(k[1]), s.peaks[k])
	}
	if len(s.capacity) > 0 {
		family("gpuguard_capacity_bytes", "gauge", "Memory of each GPU the job uses.")
		for _, d := range sortedKeys(s.capacity) {
			fmt.Fprintf(&b, "gpuguard_capacity_bytes{%s,device=%s} %d\n", run, quote(d), s.capacity[d])
		}
	}
	return []byte(b.String())
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// quote is a label value: backslash, double quote and newline escaped.
func quote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}

func num(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeAtomic replaces path with data: a temporary file beside it (a name
// node_exporter's textfile collector skips: it reads *.prom only) renamed
// over it. Not synced: the file says where a live run stands, and is
// rewritten at the next event.
func writeAtomic(path string, data []byte) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	tmp, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return nil
}
