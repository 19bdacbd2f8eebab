package supervisor

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/creack/pty"
	"golang.org/x/term"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// The run directory's own behaviour is tested in package rundir; here, the
// exit status its failures give.
func TestRunDirErrorsExit73(t *testing.T) {
	wd := t.TempDir()
	file := filepath.Join(wd, "file")
	os.WriteFile(file, nil, 0o644)
	for _, c := range []struct{ explicit, wd string }{{filepath.Join(file, "x"), wd}, {"", file}} {
		_, err := createRunDir(c.explicit, c.wd)
		if exitCodeOf(err) != ExitCantCreate {
			t.Errorf("CreateRunDir(%q, %q): %v (code %d), want 73", c.explicit, c.wd, err, exitCodeOf(err))
			continue
		}
		if !strings.Contains(err.Error(), "pass --run-dir DIR") || strings.Contains(err.Error(), "\n") {
			t.Errorf("message %q", err)
		}
	}
	if _, err := openRunDir(filepath.Join(wd, "missing")); exitCodeOf(err) != ExitCantCreate {
		t.Errorf("OpenRunDir(missing): %v", err)
	}
	if _, err := openRunDir(file); exitCodeOf(err) != ExitCantCreate {
		t.Errorf("OpenRunDir(file): %v", err)
	}
}

func TestStatusFreshLines(t *testing.T) {
	t.Run("same destination", func(t *testing.T) {
		var buf bytes.Buffer
		s := newStatus(&buf, &buf)
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
		s := newStatus(&out, &errb)
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
		got := &supervisortest.SyncBuffer{}
		go copyUntilEIO(got, m)
		s := newStatus(tty, tty)
		old, err := term.MakeRaw(int(tty.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		s.Stdout().Write([]byte("bar"))
		s.Printf("raw")
		term.Restore(int(tty.Fd()), old)
		s.Printf("cooked")
		done := got.Seen("cooked")
		supervisortest.WaitChan(t, done, "the status lines")
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
		got, err := resolvePTY(c.mode, c.out)
		if err != nil || got != c.want {
			t.Errorf("ResolvePTY(%q, %v) = %v, %v", c.mode, c.out, got, err)
		}
	}
	_, err = resolvePTY("sometimes", tty)
	if exitCodeOf(err) != ExitUsage || !strings.Contains(err.Error(), "auto, always, never") {
		t.Errorf("bad mode: %v", err)
	}
	var e *Error
	if !errors.As(err, &e) {
		t.Errorf("not an *Error: %T", err)
	}
}
