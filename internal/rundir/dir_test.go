package rundir

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

func TestCreateDefault(t *testing.T) {
	wd := t.TempDir()
	rd, err := Create("", wd)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rel, _ := filepath.Rel(wd, rd.Path())
	if !regexp.MustCompile(`^\.gpuguard/runs/\d{8}-\d{6}-[0-9a-f]{6}$`).MatchString(rel) {
		t.Errorf("run directory %q", rel)
	}
	for _, name := range []string{record.OutputLog, record.Events, record.GpuguardLog} {
		if _, err := os.Stat(filepath.Join(rd.Path(), name)); err != nil {
			t.Error(err)
		}
	}
	if data, err := os.ReadFile(filepath.Join(wd, ".gpuguard", ".gitignore")); err != nil || !strings.Contains(string(data), "*") {
		t.Errorf(".gitignore: %q %v", data, err)
	}
	// A second run gets a directory of its own, and the user's .gitignore
	// edits are left alone.
	os.WriteFile(filepath.Join(wd, ".gpuguard", ".gitignore"), []byte("mine\n"), 0o644)
	rd2, err := Create("", wd)
	if err != nil {
		t.Fatal(err)
	}
	defer rd2.Close()
	if rd2.Path() == rd.Path() {
		t.Error("two runs share a directory")
	}
	if data, _ := os.ReadFile(filepath.Join(wd, ".gpuguard", ".gitignore")); string(data) != "mine\n" {
		t.Errorf(".gitignore rewritten: %q", data)
	}
}

func TestCreateExplicitAndErrors(t *testing.T) {
	wd := t.TempDir()
	rd, err := Create("runs/a", wd)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Path() != filepath.Join(wd, "runs/a") {
		t.Errorf("path %q", rd.Path())
	}
	rd.Log().Write([]byte("first\n"))
	rd.Close()
	// An existing directory is appended to.
	rd, err = Create(filepath.Join(wd, "runs/a"), "/elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	rd.Log().Write([]byte("second\n"))
	rd.Close()
	if data, _ := os.ReadFile(filepath.Join(wd, "runs/a", record.OutputLog)); string(data) != "first\nsecond\n" {
		t.Errorf("output.log %q", data)
	}

	// A path under a regular file cannot be created, even by root.
	file := filepath.Join(wd, "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct{ explicit, wd string }{{filepath.Join(file, "x"), wd}, {"", file}} {
		_, err := Create(c.explicit, c.wd)
		if err == nil {
			t.Errorf("Create(%q, %q) succeeded", c.explicit, c.wd)
			continue
		}
		if !strings.Contains(err.Error(), "pass --run-dir DIR") || strings.Contains(err.Error(), "\n") {
			t.Errorf("message %q", err)
		}
	}
	if _, err := Open(filepath.Join(wd, "missing")); err == nil || !strings.Contains(err.Error(), "give the directory an earlier run printed at its start") {
		t.Errorf("Open(missing): %v", err)
	}
	if _, err := Open(file); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("Open(file): %v", err)
	}
}

// step is an event with a field that cannot be encoded and one that would
// clash with the header.
type step struct {
	I    int      `json:"i"`
	Type string   `json:"type"`
	Text string   `json:"text"`
	Ch   chan int `json:"ch"`
}

func (step) EventType() string { return "step" }

type bare struct{}

func (bare) EventType() string { return "bare" }

func TestWrite(t *testing.T) {
	rd, err := Create(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd.Write(step{I: i, Type: "ignored", Text: "<a & b>", Ch: make(chan int)})
		}()
	}
	wg.Wait()
	rd.Write(bare{})
	rd.Close()
	data, err := os.ReadFile(filepath.Join(rd.Path(), record.Events))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(data), "\n"), "\n")
	if len(lines) != 51 {
		t.Fatalf("%d lines", len(lines))
	}
	seen := map[float64]bool{}
	for _, l := range lines[:50] {
		if !strings.HasPrefix(l, `{"time":"`) || !strings.Contains(l, `,"type":"step","ch":"unencodable: `) {
			t.Errorf("line %q: want time, then type first, then sorted keys", l)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("%q: %v", l, err)
		}
		if m["text"] != "<a & b>" || m["type"] != "step" {
			t.Errorf("%v", m)
		}
		seen[m["i"].(float64)] = true
	}
	if len(seen) != 50 {
		t.Errorf("events lost or garbled: %d distinct", len(seen))
	}
	if !strings.HasSuffix(lines[50], `"type":"bare"}`) {
		t.Errorf("last line %q", lines[50])
	}
}

func TestWriteFileAtomic(t *testing.T) {
	rd, err := Create(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	for _, content := range []string{`{"attempt":1}`, `{"attempt":2}`} {
		if err := rd.WriteFileAtomic("state.json", []byte(content)); err != nil {
			t.Fatal(err)
		}
		if data, _ := os.ReadFile(filepath.Join(rd.Path(), "state.json")); string(data) != content {
			t.Errorf("state.json %q, want %q", data, content)
		}
	}
	entries, _ := os.ReadDir(rd.Path())
	for _, e := range entries {
		if strings.Contains(e.Name(), ".tmp") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	for _, bad := range []string{"", "a/b", "..", "."} {
		if err := rd.WriteFileAtomic(bad, nil); err == nil {
			t.Errorf("WriteFileAtomic(%q) accepted", bad)
		}
	}
	// Into a directory that is gone: an error that names the file.
	os.RemoveAll(rd.Path())
	if err := rd.WriteFileAtomic("state.json", nil); err == nil || !strings.Contains(err.Error(), "state.json") {
		t.Errorf("error %v", err)
	}
}

func TestLoggerWritesJSONToFileOnly(t *testing.T) {
	rd, err := Create(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	rd.Logger().Info("hello")
	rd.Logger().Info("hello") // not sampled away
	rd.Close()
	data, _ := os.ReadFile(filepath.Join(rd.Path(), record.GpuguardLog))
	if n := bytes.Count(data, []byte(`"msg":"hello"`)); n != 2 {
		t.Errorf("gpuguard.log has %d entries: %q", n, data)
	}
}

// OnWrite's functions see every event Write records, in the journal's order,
// with the time the journal line carries.
func TestOnWrite(t *testing.T) {
	rd, err := Create(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var stamps []string
	rd.OnWrite(func(ts time.Time, ev record.Event) {
		got = append(got, ev.EventType())
		stamps = append(stamps, ts.Format(time.RFC3339Nano))
	})
	second := 0
	rd.OnWrite(func(time.Time, record.Event) { second++ })
	rd.Write(record.RunStart{Argv: []string{"x"}})
	rd.Write(record.AttemptStart{Attempt: 1})
	rd.Write(record.RunEnd{ExitCode: 0})
	rd.Close()
	if strings.Join(got, " ") != "run_start attempt_start run_end" || second != 3 {
		t.Fatalf("observed %v, second %d", got, second)
	}
	data, err := os.ReadFile(filepath.Join(rd.Path(), record.Events))
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev struct{ Time string }
		if err := json.Unmarshal([]byte(line), &ev); err != nil || ev.Time != stamps[i] {
			t.Errorf("line %d time %q, observer saw %q (%v)", i+1, ev.Time, stamps[i], err)
		}
	}
}
