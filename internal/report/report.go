// Package report implements `gpuguard report` (a run directory's attempts,
// memory peaks and a plot) and `gpuguard doctor` (GPUs, who holds their
// memory, host and cgroup memory, Slurm context, allocator settings).
//
// report reads what the supervisor writes into a run directory:
// events.jsonl (one JSON object per line; unknown types and fields are
// ignored), timeline.csv (memory.TimelineHeader) and state.json (not needed
// for the report). See docs/memory.md.
package report

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Exit codes of report and doctor (BSD sysexits, as gpuguard's own codes
// are; see supervisor/exitcode.go).
const (
	exitOK         = 0
	exitBusy       = 1  // doctor: a GPU the job will use is mostly taken
	exitUsage      = 64 // bad arguments (EX_USAGE)
	exitDataErr    = 65 // events.jsonl holds no readable event (EX_DATAERR)
	exitNoInput    = 66 // the run directory or events.jsonl is missing (EX_NOINPUT)
	exitCantCreate = 73 // the plot cannot be written (EX_CANTCREAT)
)

// EventsFile is the name of the event log in a run directory.
const EventsFile = record.Events

// Options are the inputs of `gpuguard report`.
type Options struct {
	RunDir string
	JSON   bool
	Plot   string // output file, .png or .svg; "" for none
	Stdout io.Writer
	Stderr io.Writer
}

// Command runs `gpuguard report` and returns its exit status: 0, 66 when
// the run directory or its events.jsonl is missing (the message says
// which), 65 when events.jsonl has no readable event, 64 for a plot file
// that is neither .png nor .svg, 73 when the plot cannot be written.
// Unreadable lines are reported on stderr and skipped.
func Command(o Options) int {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(o.Stderr, "gpuguard report: "+format+"\n", a...)
		return code
	}
	if o.Plot != "" {
		if ext := strings.ToLower(filepath.Ext(o.Plot)); ext != ".png" && ext != ".svg" {
			return fail(exitUsage, "--plot %s: give a file name ending in .png or .svg", o.Plot)
		}
	}
	st, err := os.Stat(o.RunDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(exitNoInput, "run directory %s does not exist; give the directory `gpuguard run` printed at its start (under .gpuguard/runs/)", o.RunDir)
	case err != nil:
		return fail(exitNoInput, "run directory %s: %v", o.RunDir, err)
	case !st.IsDir():
		return fail(exitNoInput, "%s is not a directory; give a run directory (under .gpuguard/runs/)", o.RunDir)
	}
	evPath := filepath.Join(o.RunDir, EventsFile)
	f, err := os.Open(evPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fail(exitNoInput, "%s has no %s: it is not a gpuguard run directory, or the run never started", o.RunDir, EventsFile)
	}
	if err != nil {
		return fail(exitNoInput, "%s: %v", evPath, err)
	}
	run, err := readEvents(f, o.RunDir)
	f.Close()
	for _, p := range run.Problems {
		fmt.Fprintf(o.Stderr, "gpuguard report: skipped %s\n", p)
	}
	if err != nil {
		return fail(exitDataErr, "%s: %v", evPath, err)
	}
	ti := loadTimeline(run, o.Stderr)
	if run.origin.IsZero() && run.Start != nil {
		run.origin = *run.Start
	}
	if o.JSON {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(run); err != nil {
			return fail(exitCantCreate, "writing JSON: %v", err)
		}
	} else {
		writeText(o.Stdout, run)
	}
	if o.Plot != "" {
		if ti == nil || ti.rows == 0 {
			return fail(exitNoInput, "cannot plot: %s has no memory timeline (%s); memory is sampled only by `gpuguard run`",
				o.RunDir, memory.TimelineFile)
		}
		if err := plotRun(run, ti, filepath.Join(o.RunDir, memory.TimelineFile), o.Plot); err != nil {
			return fail(exitCantCreate, "plot %s: %v", o.Plot, err)
		}
		fmt.Fprintf(o.Stderr, "gpuguard report: memory plot written to %s\n", o.Plot)
	}
	return exitOK
}

// loadTimeline reads timeline.csv when there is one, and fills in the memory
// of attempts that have no memory event (the supervisor was killed before
// writing it). Problems go to stderr; nil when there is no timeline.
func loadTimeline(run *Run, stderr io.Writer) *timelineInfo {
	path := filepath.Join(run.RunDir, memory.TimelineFile)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	run.Timeline = memory.TimelineFile
	ti, err := scanTimeline(path)
	if err != nil {
		fmt.Fprintf(stderr, "gpuguard report: %v (peaks use the lines before it)\n", err)
		run.Problems = append(run.Problems, err.Error())
	}
	if ti == nil {
		return nil
	}
	have := map[int]*Attempt{}
	for _, a := range run.Attempts {
		have[a.N] = a
	}
	for n, sum := range ti.attempts {
		a := have[n]
		if a == nil {
			a = &Attempt{N: n}
			run.Attempts = append(run.Attempts, a)
			have[n] = a
		}
		if a.Memory == nil {
			s := *sum
			s.Origin = run.origin
			a.Memory, a.MemoryFrom = &s, "timeline"
		}
	}
	sortAttempts(run)
	return ti
}

func sortAttempts(run *Run) {
	as := run.Attempts
	for i := 1; i < len(as); i++ {
		for j := i; j > 0 && as[j].N < as[j-1].N; j-- {
			as[j], as[j-1] = as[j-1], as[j]
		}
	}
}
