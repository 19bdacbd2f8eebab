package rundir

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// HeldError is CheckNew's error for a directory that already holds a run: a
// new run never appends to one (report and explain would mix the two).
type HeldError struct {
	Dir  string // the directory, as given
	File string // the file that shows the run: events.jsonl, output.log or state.json
}

func (e *HeldError) Error() string {
	return fmt.Sprintf("%s already holds a run (%s)", e.Dir, e.File)
}

// CheckNew says whether a new run may take dir: nil when dir is missing or
// holds no run's record, a *HeldError when it holds an ended run's (a
// non-empty events.jsonl, output.log or state.json, as a regular file).
//
// A directory whose run is going on is nil too: Create refuses it with
// ErrInUse, naming the gpuguard that holds it. So is one a Slurm job was
// requeued onto (requeued: SLURM_RESTART_COUNT > 0), which continues its
// own earlier run there.
func CheckNew(dir string, requeued bool) error {
	if requeued || Live(dir) {
		return nil
	}
	for _, name := range []string{record.Events, record.OutputLog, record.State} {
		st, err := os.Lstat(filepath.Join(dir, name))
		if err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
			continue
		}
		return &HeldError{Dir: dir, File: name}
	}
	return nil
}

// NewPath is the path of a new run's directory under root's .gpuguard/runs
// (<YYYYMMDD-HHMMSS>-<random>), as Create("", root) would make it. It
// creates .gpuguard (with a .gitignore, so that runs stay out of version
// control) and runs when they are missing, not the run's directory itself:
// Create makes that once the run's policy is read, so that a run refused
// before it starts leaves no empty directory behind.
func NewPath(root string) (string, error) {
	runs, err := runsDir(root)
	if err != nil {
		return "", err
	}
	return filepath.Join(runs, newName()), nil
}

// runsDir makes root/.gpuguard/runs, and the .gitignore of a new .gpuguard.
func runsDir(root string) (string, error) {
	top := filepath.Join(root, ".gpuguard")
	if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
		if err := os.Mkdir(top, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", runDirError(top, err)
		}
		// Best effort: a run directory is no source file.
		_ = os.WriteFile(filepath.Join(top, ".gitignore"), []byte("# gpuguard run records\n*\n"), 0o644)
	}
	runs := filepath.Join(top, "runs")
	if err := os.MkdirAll(runs, 0o755); err != nil {
		return "", runDirError(runs, err)
	}
	return runs, nil
}

// newName is a new run directory's name: its start time, then 6 random hex
// digits.
func newName() string {
	var b [3]byte
	_, _ = rand.Read(b[:])
	return time.Now().Format("20060102-150405") + "-" + hex.EncodeToString(b[:])
}
