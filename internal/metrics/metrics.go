// Package metrics keeps a Prometheus text file (metrics.prom in the run
// directory, and wherever --metrics-file says, for node_exporter's textfile
// collector) that says where a run stands. It follows the events the run
// directory records (rundir.Dir.OnWrite) and rewrites each file whole
// (a temporary file renamed over it) after each event that changes a figure,
// so that a scraper reads the old content or the new, never a mix. The
// text is written by Prometheus' own encoder (expfmt), and the command label
// holds no secret (internal/redact).
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
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/gpuguard/gpuguard/internal/fsutil"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/redact"
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
	data, renderErr := w.s.render()
	for _, p := range w.paths {
		err := renderErr
		if err == nil {
			err = writeAtomic(p, data)
		}
		if err != nil && !w.warned[p] {
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
		// The command label never holds a secret (docs/secrets.md).
		s.runDir, s.command, s.workdir = e.RunDir, strings.Join(redact.Argv(e.Argv), " "), e.Workdir
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

// render writes the text exposition format, through Prometheus' own
// encoder (expfmt). A family without samples is left out.
func (s *state) render() ([]byte, error) {
	// Every sample names its run, so that the files of several runs on one
	// node (node_exporter's textfile collector merges them) never collide.
	run := s.runDir
	var fams []*dto.MetricFamily
	family := func(name string, typ dto.MetricType, help string) *dto.MetricFamily {
		f := &dto.MetricFamily{Name: ptr(name), Help: ptr(help), Type: typ.Enum()}
		fams = append(fams, f)
		return f
	}
	info := family("gpuguard_run_info", dto.MetricType_GAUGE, "The run this file describes (always 1).")
	sample(info, 1, "run", run, "command", s.command)
	if !s.start.IsZero() {
		f := family("gpuguard_run_start_time_seconds", dto.MetricType_GAUGE, "When the run (or its latest resumption) started, Unix time.")
		sample(f, float64(s.start.UnixMilli())/1000, "run", run)
	}
	sample(family("gpuguard_running", dto.MetricType_GAUGE, "1 while gpuguard supervises the run, 0 once it ended."), float64(b2i(s.running)), "run", run)
	if s.ended {
		sample(family("gpuguard_exit_code", dto.MetricType_GAUGE, "gpuguard's exit status at the run's end."), float64(s.exitCode), "run", run)
	}
	sample(family("gpuguard_attempts_total", dto.MetricType_COUNTER, "Attempts started."), float64(s.attempts), "run", run)
	rel := family("gpuguard_relaunches_total", dto.MetricType_COUNTER, "Relaunches, by what the attempt before died of (the classifier's kind; exit: not recognised).")
	for _, c := range sortedKeys(s.relaunches) {
		sample(rel, float64(s.relaunches[c]), "run", run, "cause", c)
	}
	lost := family("gpuguard_relaunch_lost_seconds_total", dto.MetricType_COUNTER, "Time lost to relaunches: the gap to the next attempt plus the failed attempt's work after the checkpoint resumed from.")
	sample(lost, s.lost.Seconds(), "run", run)
	knob := family("gpuguard_knob", dto.MetricType_GAUGE, "The value of each numeric knob the current (or next) attempt gets.")
	for _, k := range sortedKeys(s.knobs) {
		v := s.knobs[k]
		if v.Null {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v.Text), 64)
		if err != nil {
			continue
		}
		sample(knob, f, "run", run, "knob", k)
	}
	peak := family("gpuguard_peak_memory_bytes", dto.MetricType_GAUGE, "Peak memory of the latest sampled attempt, per phase and device (host: the job's processes, PSS).")
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
		sample(peak, float64(s.peaks[k]), "run", run, "phase", k[0], "device", k[1])
	}
	capacity := family("gpuguard_capacity_bytes", dto.MetricType_GAUGE, "Memory of each GPU the job uses.")
	for _, d := range sortedKeys(s.capacity) {
		sample(capacity, float64(s.capacity[d]), "run", run, "device", d)
	}

	var b bytes.Buffer
	enc := expfmt.NewEncoder(&b, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if len(f.Metric) == 0 {
			continue
		}
		if err := enc.Encode(f); err != nil {
			return nil, err
		}
	}
	return b.Bytes(), nil
}

// sample adds a sample of value v to f, with labels given as name, value
// pairs. A value that is not UTF-8 (a command's argument may be any bytes)
// has its bad bytes replaced, as Prometheus takes only UTF-8.
func sample(f *dto.MetricFamily, v float64, labels ...string) {
	m := &dto.Metric{}
	for i := 0; i+1 < len(labels); i += 2 {
		m.Label = append(m.Label, &dto.LabelPair{Name: ptr(labels[i]), Value: ptr(strings.ToValidUTF8(labels[i+1], "\uFFFD"))})
	}
	if f.GetType() == dto.MetricType_COUNTER {
		m.Counter = &dto.Counter{Value: ptr(v)}
	} else {
		m.Gauge = &dto.Gauge{Value: ptr(v)}
	}
	f.Metric = append(f.Metric, m)
}

func ptr[T any](v T) *T { return &v }

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// writeAtomic replaces path with data (fsutil.ReplaceFile: a temporary
// file beside it, with a name node_exporter's textfile collector skips,
// renamed over it), with mode 0644 less the umask. Not synced: the file
// says where a live run stands, and is rewritten at the next event.
func writeAtomic(path string, data []byte) error {
	return fsutil.ReplaceFile(path, data, 0o644)
}
