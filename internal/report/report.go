// Package report implements `gpuguard report`: a run directory's attempts,
// verdicts, memory peaks and a plot.
//
// report reads what the supervisor writes into a run directory:
// events.jsonl (one JSON object per line; unknown types and fields are
// ignored), timeline.csv (record.TimelineHeader) and state.json (not needed
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

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Options are the inputs of `gpuguard report`.
type Options struct {
	RunDir string
	JSON   bool
	Plot   string // output file, .png or .svg; "" for none
	Stdout io.Writer
	Stderr io.Writer
}

// Command runs `gpuguard report`. Its error, if any, says what went wrong and
// carries the exit status (package exitcode): NoInput when the run directory
// or its events.jsonl is missing (the message says which), DataErr when
// events.jsonl has no readable event, Usage for a plot file that is neither
// .png nor .svg, CantCreate when the output or the plot cannot be written.
// Unreadable lines are reported on stderr and skipped.
func Command(o Options) error {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if o.Stderr == nil {
		o.Stderr = io.Discard
	}
	fail := func(code int, format string, a ...any) error {
		return &exitcode.Error{Code: code, Msg: fmt.Sprintf(format, a...)}
	}
	if o.Plot != "" {
		if ext := strings.ToLower(filepath.Ext(o.Plot)); ext != ".png" && ext != ".svg" {
			return fail(exitcode.Usage, "--plot %s: give a file name ending in .png or .svg", o.Plot)
		}
	}
	st, err := os.Stat(o.RunDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fail(exitcode.NoInput, "run directory %s does not exist; give the directory `gpuguard run` printed at its start (under .gpuguard/runs/)", o.RunDir)
	case err != nil:
		return fail(exitcode.NoInput, "run directory %s: %v", o.RunDir, err)
	case !st.IsDir():
		return fail(exitcode.NoInput, "%s is not a directory; give a run directory (under .gpuguard/runs/)", o.RunDir)
	}
	evPath := filepath.Join(o.RunDir, record.Events)
	f, err := os.Open(evPath)
	if errors.Is(err, fs.ErrNotExist) {
		return fail(exitcode.NoInput, "%s has no %s: it is not a gpuguard run directory, or the run never started", o.RunDir, record.Events)
	}
	if err != nil {
		return fail(exitcode.NoInput, "%s: %v", evPath, err)
	}
	run, err := readEvents(f, o.RunDir)
	f.Close()
	for _, p := range run.Problems {
		fmt.Fprintf(o.Stderr, "gpuguard report: skipped %s\n", p)
	}
	if err != nil {
		return fail(exitcode.DataErr, "%s: %v", evPath, err)
	}
	ti := loadTimeline(run, o.Stderr)
	if run.origin.IsZero() && run.Start != nil {
		run.origin = *run.Start
	}
	if o.JSON {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(run); err != nil {
			return fail(exitcode.CantCreate, "writing JSON: %v", err)
		}
	} else {
		writeText(o.Stdout, run)
	}
	if o.Plot != "" {
		if ti == nil {
			return fail(exitcode.NoInput, "cannot plot: %s has no memory timeline (%s); memory is sampled only by `gpuguard run`",
				o.RunDir, record.Timeline)
		}
		if ti.rows == 0 {
			// A job that ends within its first sample leaves the header
			// alone: the plot still shows its attempts.
			fmt.Fprintf(o.Stderr, "gpuguard report: %s holds no memory sample (the attempts ended before the first); the plot shows the attempts only\n", record.Timeline)
		}
		if err := plotRun(run, ti, filepath.Join(o.RunDir, record.Timeline), o.Plot); err != nil {
			return fail(exitcode.CantCreate, "plot %s: %v", o.Plot, err)
		}
		fmt.Fprintf(o.Stderr, "gpuguard report: memory plot written to %s\n", o.Plot)
	}
	return nil
}

// loadTimeline reads timeline.csv when there is one, and fills in the memory
// of attempts that have no memory event (the supervisor was killed before
// writing it). Problems go to stderr; nil when there is no timeline.
func loadTimeline(run *Run, stderr io.Writer) *timelineInfo {
	path := filepath.Join(run.RunDir, record.Timeline)
	if _, err := os.Stat(path); err != nil {
		return nil
	}
	run.Timeline = record.Timeline
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
