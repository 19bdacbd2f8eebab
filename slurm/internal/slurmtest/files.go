package slurmtest

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// JobDir is a new job directory that every user can read (jobs may run as
// another user), removed when the test ends.
func JobDir(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// CopyFile copies the file from to the file to, mode 0755 (the tests' job
// programs are run directly, the scripts among them).
func CopyFile(t testing.TB, from, to string) {
	t.Helper()
	data, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, data, 0o755); err != nil {
		t.Fatal(err)
	}
}

// CopyDir copies the files of the directory from (not its subdirectories)
// into the directory to.
func CopyDir(t testing.TB, from, to string) {
	t.Helper()
	entries, err := os.ReadDir(from)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.IsDir() {
			CopyFile(t, filepath.Join(from, e.Name()), filepath.Join(to, e.Name()))
		}
	}
}

// ReadFile returns the file's content; failing to read it fails the test.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// TryRead returns the file's content, "" when it cannot be read.
func TryRead(path string) string {
	data, _ := os.ReadFile(path)
	return string(data)
}

// WantContains checks that got (what names it) contains each of wants.
func WantContains(t testing.TB, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, got)
		}
	}
}

// Stamp reads the number printed after prefix in out (a time a job
// printed), 0 when there is none.
func Stamp(out, prefix string) float64 {
	i := strings.Index(out, prefix)
	if i < 0 {
		return 0
	}
	f := strings.Fields(out[i+len(prefix):])
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// Event is one line of a run directory's events.jsonl.
type Event = map[string]any

// RunDir is the run directory gpuguard keeps for Slurm job id run in dir.
func RunDir(dir, id string) string { return filepath.Join(dir, ".gpuguard", "runs", "slurm-"+id) }

// Events reads a run directory's events of the given types (all when
// none); failing to read them fails the test.
func Events(t testing.TB, runDir string, types ...string) []Event {
	t.Helper()
	evs, err := ReadEvents(runDir, types...)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// ReadEvents reads a run directory's events of the given types (all when
// none).
func ReadEvents(runDir string, types ...string) ([]Event, error) {
	f, err := os.Open(filepath.Join(runDir, "events.jsonl"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Event
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %v", runDir, err)
		}
		typ, _ := ev["type"].(string)
		if len(types) == 0 || slices.Contains(types, typ) {
			out = append(out, ev)
		}
	}
	return out, sc.Err()
}

// Verdicts are the verdicts of the attempts in a run directory, in order.
func Verdicts(t testing.TB, runDir string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, ev := range Events(t, runDir, "attempt_end") {
		v, _ := ev["verdict"].(map[string]any)
		out = append(out, v)
	}
	return out
}

// Kinds are the verdicts' kinds (gpu_oom, host_oom, none, ...).
func Kinds(vs []map[string]any) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i], _ = v["kind"].(string)
	}
	return out
}

// Median is the median of xs, 0 when there are none.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MsList writes milliseconds as a space-separated list of whole numbers.
func MsList(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = strconv.FormatFloat(x, 'f', 0, 64)
	}
	return strings.Join(parts, " ")
}
