package supervisor

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/term"
)

func TestCreateRunDirDefault(t *testing.T) {
	wd := t.TempDir()
	rd, err := CreateRunDir("", wd)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	rel, _ := filepath.Rel(wd, rd.Path())
	if !regexp.MustCompile(`^\.gpuguard/runs/\d{8}-\d{6}-[0-9a-f]{6}$`).MatchString(rel) {
		t.Errorf("run directory %q", rel)
	}
	for _, name := range []string{OutputLogName, EventsName, GpuguardLog} {
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
	rd2, err := CreateRunDir("", wd)
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

func TestCreateRunDirExplicitAndErrors(t *testing.T) {
	wd := t.TempDir()
	rd, err := CreateRunDir("runs/a", wd)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Path() != filepath.Join(wd, "runs/a") {
		t.Errorf("path %q", rd.Path())
	}
	rd.Log().Write([]byte("first\n"))
	rd.Close()
	// An existing directory is appended to.
	rd, err = CreateRunDir(filepath.Join(wd, "runs/a"), "/elsewhere")
	if err != nil {
		t.Fatal(err)
	}
	rd.Log().Write([]byte("second\n"))
	rd.Close()
	if data, _ := os.ReadFile(filepath.Join(wd, "runs/a", OutputLogName)); string(data) != "first\nsecond\n" {
		t.Errorf("output.log %q", data)
	}

	// A path under a regular file cannot be created, even by root.
	file := filepath.Join(wd, "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct{ explicit, wd string }{{filepath.Join(file, "x"), wd}, {"", file}} {
		_, err := CreateRunDir(c.explicit, c.wd)
		if ExitCodeOf(err) != ExitCantCreate {
			t.Errorf("CreateRunDir(%q, %q): %v (code %d), want 73", c.explicit, c.wd, err, ExitCodeOf(err))
			continue
		}
		if !strings.Contains(err.Error(), "pass --run-dir DIR") || strings.Contains(err.Error(), "\n") {
			t.Errorf("message %q", err)
		}
	}
	if _, err := OpenRunDir(filepath.Join(wd, "missing")); ExitCodeOf(err) != ExitCantCreate {
		t.Errorf("OpenRunDir(missing): %v", err)
	}
	if _, err := OpenRunDir(file); ExitCodeOf(err) != ExitCantCreate {
		t.Errorf("OpenRunDir(file): %v", err)
	}
}

func TestEvents(t *testing.T) {
	rd, err := CreateRunDir(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rd.Event("step", map[string]any{"i": i, "type": "ignored", "text": "<a & b>", "ch": make(chan int)})
		}()
	}
	wg.Wait()
	rd.Event("run_end", nil)
	rd.Close()
	data, err := os.ReadFile(filepath.Join(rd.Path(), EventsName))
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
	if !strings.HasSuffix(lines[50], `"type":"run_end"}`) {
		t.Errorf("last line %q", lines[50])
	}
}

func TestWriteFileAtomic(t *testing.T) {
	rd, err := CreateRunDir(t.TempDir(), "")
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
	rd, err := CreateRunDir(t.TempDir(), "")
	if err != nil {
		t.Fatal(err)
	}
	rd.Logger().Info("hello")
	rd.Logger().Info("hello") // not sampled away
	rd.Close()
	data, _ := os.ReadFile(filepath.Join(rd.Path(), GpuguardLog))
	if n := bytes.Count(data, []byte(`"msg":"hello"`)); n != 2 {
		t.Errorf("gpuguard.log has %d entries: %q", n, data)
	}
}

func TestStatusFreshLines(t *testing.T) {
	t.Run("same destination", func(t *testing.T) {
		var buf bytes.Buffer
		s := NewStatus(&buf, &buf)
		s.Printf("start")
		s.Stdout().Write([]byte("\r 50%|#####"))
		s.Printf("SIGINT passed\nto the job")
		s.Stderr().Write([]byte("done\n"))
		s.Printf("end")
		want := "gpuguard: start\n\r 50%|#####\ngpuguard: SIGINT passed to the job\ndone\ngpuguard: end\n"
		if buf.String() != want {
			t.Errorf("got  %q\nwant %q", buf.String(), want)
		}
	})
	t.Run("separate destinations", func(t *testing.T) {
		var out, errb bytes.Buffer
		s := NewStatus(&out, &errb)
		s.Stdout().Write([]byte("partial"))
		s.Printf("a")
		s.Stderr().Write([]byte("err partial"))
		s.Printf("b")
		if errb.String() != "gpuguard: a\nerr partial\ngpuguard: b\n" || out.String() != "partial" {
			t.Errorf("stderr %q stdout %q", errb.String(), out.String())
		}
	})
	t.Run("raw terminal", func(t *testing.T) {
		m, tty, err := pty.Open()
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		defer tty.Close()
		got := &syncBuffer{}
		go copyUntilEIO(got, m)
		s := NewStatus(tty, tty)
		old, err := term.MakeRaw(int(tty.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		s.Stdout().Write([]byte("bar"))
		s.Printf("raw")
		term.Restore(int(tty.Fd()), old)
		s.Printf("cooked")
		done := got.seen("cooked")
		waitChan(t, done, "the status lines")
		// Cooked: the terminal itself turns "\n" into "\r\n" (OPOST).
		if want := "bar\r\ngpuguard: raw\r\ngpuguard: cooked\r\n"; got.String() != want {
			t.Errorf("got %q, want %q", got.String(), want)
		}
	})
}

func TestResolvePTY(t *testing.T) {
	m, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	defer tty.Close()
	r, w, _ := os.Pipe()
	defer r.Close()
	defer w.Close()
	for _, c := range []struct {
		mode string
		out  *os.File
		want bool
	}{{"auto", tty, true}, {"auto", w, false}, {"", tty, true}, {"always", w, true}, {"never", tty, false}, {"auto", nil, false}} {
		got, err := ResolvePTY(c.mode, c.out)
		if err != nil || got != c.want {
			t.Errorf("ResolvePTY(%q, %v) = %v, %v", c.mode, c.out, got, err)
		}
	}
	_, err = ResolvePTY("sometimes", tty)
	if ExitCodeOf(err) != ExitUsage || !strings.Contains(err.Error(), "auto, always, never") {
		t.Errorf("bad mode: %v", err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("not an *Error: %T", err)
	}
}
