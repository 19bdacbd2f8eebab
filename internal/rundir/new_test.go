package rundir

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// A directory that holds an ended run is refused, naming the file that shows
// it; one that holds none, or whose files are empty or not regular, is not.
func TestCheckNew(t *testing.T) {
	wd := t.TempDir()
	write := func(dir, name, data string) string {
		t.Helper()
		d := filepath.Join(wd, dir)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if name != "" {
			if err := os.WriteFile(filepath.Join(d, name), []byte(data), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	for _, c := range []struct {
		name string
		dir  string
		held string // the file named, "" for no refusal
	}{
		{"missing", filepath.Join(wd, "absent"), ""},
		{"empty directory", write("empty", "", ""), ""},
		{"empty files of a run that wrote nothing", write("nothing", record.Events, ""), ""},
		{"a user's own file", write("mine", "notes.txt", "x"), ""},
		{"events", write("ev", record.Events, `{"type":"run_start"}`+"\n"), record.Events},
		{"output only", write("out", record.OutputLog, "line 1\n"), record.OutputLog},
		{"state only", write("st", record.State, `{"version":1}`), record.State},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := CheckNew(c.dir, false)
			var held *HeldError
			switch {
			case c.held == "" && err != nil:
				t.Errorf("CheckNew(%s) = %v, want nil", c.dir, err)
			case c.held != "" && (!errors.As(err, &held) || held.File != c.held || held.Dir != c.dir):
				t.Errorf("CheckNew(%s) = %#v, want a HeldError naming %s", c.dir, err, c.held)
			}
			// A Slurm job requeued onto its directory continues its run there.
			if err := CheckNew(c.dir, true); err != nil {
				t.Errorf("CheckNew(%s, requeued) = %v, want nil", c.dir, err)
			}
		})
	}

	// A link planted in place of events.jsonl is no run's record.
	d := write("link", "", "")
	target := write("elsewhere", "data", "not a run\n")
	if err := os.Symlink(filepath.Join(target, "data"), filepath.Join(d, record.Events)); err != nil {
		t.Fatal(err)
	}
	if err := CheckNew(d, false); err != nil {
		t.Errorf("CheckNew with a planted link = %v, want nil", err)
	}
}

// A run going on in the directory is not CheckNew's to refuse: Create then
// says which gpuguard holds it (ErrInUse). Once that run has ended, its
// record is refused.
func TestCheckNewLiveThenEnded(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rd")
	rd, err := Create(dir, "")
	if err != nil {
		t.Fatal(err)
	}
	rd.Write(bare{})
	if _, err := rd.Log().Write([]byte("line 1\n")); err != nil {
		t.Fatal(err)
	}
	if err := CheckNew(dir, false); err != nil {
		t.Errorf("CheckNew of a live run's directory = %v, want nil", err)
	}
	if _, err := Create(dir, ""); !errors.Is(err, ErrInUse) {
		t.Errorf("Create of a live run's directory = %v, want ErrInUse", err)
	}
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	var held *HeldError
	if err := CheckNew(dir, false); !errors.As(err, &held) || held.File != record.Events {
		t.Errorf("CheckNew of an ended run's directory = %v, want a HeldError naming %s", err, record.Events)
	}
	if got, want := err2str(CheckNew(dir, false)), dir+" already holds a run (events.jsonl)"; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
}

func err2str(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// NewPath makes .gpuguard (with its .gitignore) and runs under root, and
// names a new directory there without making it; two calls name two.
func TestNewPath(t *testing.T) {
	root := t.TempDir()
	p, err := NewPath(root)
	if err != nil {
		t.Fatal(err)
	}
	rel, _ := filepath.Rel(root, p)
	if !regexp.MustCompile(`^\.gpuguard/runs/\d{8}-\d{6}-[0-9a-f]{6}$`).MatchString(rel) {
		t.Errorf("NewPath = %q, want .gpuguard/runs/<time>-<random> under %s", p, root)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Errorf("NewPath made %s (%v): the run makes it once its policy is read", p, err)
	}
	if st, err := os.Stat(filepath.Dir(p)); err != nil || !st.IsDir() {
		t.Errorf("runs directory: %v", err)
	}
	if data, err := os.ReadFile(filepath.Join(root, ".gpuguard", ".gitignore")); err != nil || !strings.Contains(string(data), "*") {
		t.Errorf(".gitignore: %q %v", data, err)
	}
	p2, err := NewPath(root)
	if err != nil {
		t.Fatal(err)
	}
	if p2 == p {
		t.Errorf("two calls named one directory: %s", p)
	}
	// What Create then makes of it is a run directory like any other.
	rd, err := Create(p, "")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if rd.Path() != p {
		t.Errorf("Create(%s) made %s", p, rd.Path())
	}
}

// A root where .gpuguard cannot be made is an error that names it.
func TestNewPathError(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, ".gpuguard"), []byte("a file\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewPath(root)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(root, ".gpuguard", "runs")) || !strings.Contains(err.Error(), "--run-dir") {
		t.Errorf("NewPath under a file named .gpuguard = %v, want an error naming %s and --run-dir", err, filepath.Join(root, ".gpuguard", "runs"))
	}
}
