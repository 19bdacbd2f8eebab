package record

import (
	"bufio"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// TimelineHeader is the first line of timeline.csv. Each later line is one
// device at one sample:
//
//	elapsed_ms  milliseconds since the run's origin (the sampler's origin)
//	attempt     attempt number
//	phase       phase in effect ("train", "val", "" before any marker)
//	device      "gpu<N>" / "gpu<N>.mig<M>" (NVML index), "host" (the job's
//	            process tree, PSS; under an RLIMIT_DATA or RLIMIT_AS, the
//	            root process's VmData or VmSize, as the kernel counts it
//	            against the limit), "cgroup" (the memory cgroup's working set;
//	            only when it has a limit), "ram" (the machine: MemTotal minus
//	            MemAvailable)
//	used_bytes  bytes in use (GPU: total minus free, all processes)
//	limit_bytes capacity: GPU memory, the ceiling that applies to the job
//	            (host: the rlimit, else the cgroup limit when lower than
//	            RAM, else RAM), the
//	            cgroup limit, the RAM
//	job_bytes   GPU only: memory of the job's processes as NVML attributes
//	            it; empty when unknown
const TimelineHeader = "elapsed_ms,attempt,phase,device,used_bytes,limit_bytes,job_bytes"

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
