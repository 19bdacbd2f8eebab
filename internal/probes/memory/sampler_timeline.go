package memory

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// TimelineFile is the name of the memory timeline in a run directory.
const TimelineFile = record.Timeline

// OpenTimeline opens (creating it if needed) the timeline file at path for
// appending, and writes TimelineHeader when the file is empty, so that the
// attempts of a run, and a resumed run, share one file with one header.
// The caller closes it after the sampler's Run has returned.
func OpenTimeline(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("memory timeline: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("memory timeline: %w", err)
	}
	if st.Size() == 0 {
		if _, err := f.WriteString(TimelineHeader + "\n"); err != nil {
			f.Close()
			return nil, fmt.Errorf("memory timeline %s: writing the header: %w", path, err)
		}
	}
	return f, nil
}

// TimelineRow is one parsed line of timeline.csv.
type TimelineRow struct {
	ElapsedMs  int64
	Attempt    int
	Phase      classify.Phase
	Device     string
	UsedBytes  uint64
	LimitBytes uint64
	JobBytes   uint64
	JobKnown   bool
}

// ReadTimeline calls fn for every row of a timeline, in file order. Header
// lines (also repeated ones, from concatenated files) are skipped. A
// malformed line is an error naming its line number, except a truncated
// last line (the writer was killed mid-write), which is skipped. fn's error
// stops the reading and is returned.
func ReadTimeline(r io.Reader, fn func(TimelineRow) error) error {
	br := bufio.NewReaderSize(r, 64<<10)
	lineNo := 0
	for {
		line, err := br.ReadString('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("timeline line %d: %w", lineNo+1, err)
		}
		if line == "" && err == io.EOF {
			return nil
		}
		lineNo++
		complete := strings.HasSuffix(line, "\n")
		line = strings.TrimRight(line, "\r\n")
		if line == "" || strings.HasPrefix(line, "elapsed_ms,") {
			if err == io.EOF {
				return nil
			}
			continue
		}
		row, perr := parseTimelineRow(line)
		if perr != nil {
			if !complete {
				return nil // truncated tail
			}
			return fmt.Errorf("timeline line %d: %w", lineNo, perr)
		}
		if ferr := fn(row); ferr != nil {
			return ferr
		}
		if err == io.EOF {
			return nil
		}
	}
}

func parseTimelineRow(line string) (TimelineRow, error) {
	f := strings.Split(line, ",")
	if len(f) != 7 {
		return TimelineRow{}, fmt.Errorf("%d fields, want 7 (%s)", len(f), TimelineHeader)
	}
	var r TimelineRow
	var err error
	if r.ElapsedMs, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return r, fmt.Errorf("elapsed_ms %q is not a number", f[0])
	}
	if r.Attempt, err = strconv.Atoi(f[1]); err != nil {
		return r, fmt.Errorf("attempt %q is not a number", f[1])
	}
	r.Phase, r.Device = classify.Phase(f[2]), f[3]
	if r.Device == "" {
		return r, fmt.Errorf("empty device")
	}
	if r.UsedBytes, err = strconv.ParseUint(f[4], 10, 64); err != nil {
		return r, fmt.Errorf("used_bytes %q is not a number", f[4])
	}
	if r.LimitBytes, err = strconv.ParseUint(f[5], 10, 64); err != nil {
		return r, fmt.Errorf("limit_bytes %q is not a number", f[5])
	}
	if f[6] != "" {
		if r.JobBytes, err = strconv.ParseUint(f[6], 10, 64); err != nil {
			return r, fmt.Errorf("job_bytes %q is not a number", f[6])
		}
		r.JobKnown = true
	}
	return r, nil
}
