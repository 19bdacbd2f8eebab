package memory

import (
	"fmt"
	"io"
	"os"

	"github.com/gpuguard/gpuguard/internal/fsutil"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// TimelineFile is the name of the memory timeline in a run directory.
const TimelineFile = record.Timeline

// OpenTimeline opens (creating it if needed) the timeline file at path for
// appending, and writes TimelineHeader when the file is empty, so that the
// attempts of a run, and a resumed run, share one file with one header.
// A symbolic link planted at path is refused, never followed
// (fsutil.OpenAppend). The caller closes it after the sampler's Run has
// returned.
func OpenTimeline(path string) (*os.File, error) {
	f, err := fsutil.OpenAppend(path, 0o644, false)
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

// TimelineRow is one parsed line of timeline.csv (record.TimelineRow).
type TimelineRow = record.TimelineRow

// ReadTimeline calls fn for every row of a timeline (record.ReadTimeline).
func ReadTimeline(r io.Reader, fn func(TimelineRow) error) error {
	return record.ReadTimeline(r, fn)
}
