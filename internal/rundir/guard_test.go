package rundir

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// Issue 23, finding 3: two runs given one directory interleaved their
// records, and --resume-run of a live run started a second copy of the job.
// The lock is per open file, so a second Create in this process meets it as
// a second gpuguard would (reliability/rundir_lock_test.go runs two).
func TestLockExcludesSecondRun(t *testing.T) {
	wd := t.TempDir()
	first, err := Create("rd", wd)
	if err != nil {
		t.Fatal(err)
	}
	p := first.Path()
	if !Live(p) {
		t.Errorf("Live(%s) is false while a run holds it", p)
	}
	holder := regexp.MustCompile(`another gpuguard \(pid ` + regexp.QuoteMeta(strconv.Itoa(os.Getpid())) + `, started \d{4}-\d\d-\d\dT`)
	_, err = Create("rd", wd)
	if !errors.Is(err, ErrInUse) || !holder.MatchString(err.Error()) ||
		!strings.HasPrefix(err.Error(), `cannot use run directory "`+p+`": `) || !strings.Contains(err.Error(), "pass --run-dir DIR") {
		t.Errorf("second run: %v", err)
	}
	_, err = Open(p)
	if !errors.Is(err, ErrInUse) || !holder.MatchString(err.Error()) ||
		!strings.HasPrefix(err.Error(), `cannot resume run directory "`+p+`": its run is still going`) {
		t.Errorf("resume of a live run: %v", err)
	}
	// The refused runs wrote nothing there.
	first.Log().Write([]byte("first\n"))
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if Live(p) {
		t.Errorf("Live(%s) is true after its run closed it", p)
	}
	if data, _ := os.ReadFile(filepath.Join(p, record.OutputLog)); string(data) != "first\n" {
		t.Errorf("output.log %q", data)
	}
	// Once the run has ended, the directory can be resumed, and then it is
	// locked again.
	again, err := Open(p)
	if err != nil {
		t.Fatalf("resume after the end: %v", err)
	}
	defer again.Close()
	if _, err := Create(p, ""); !errors.Is(err, ErrInUse) {
		t.Errorf("run beside a resumed one: %v", err)
	}
}

// Issue 23, finding 4: output.log, events.jsonl and gpuguard.log were
// opened with O_APPEND|O_CREAT, following a link planted in their place.
func TestPlantedLinksRefused(t *testing.T) {
	for _, name := range []string{record.OutputLog, record.Events, record.GpuguardLog, record.Lock} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			victim := filepath.Join(dir, "victim")
			if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			rd := filepath.Join(dir, "rd")
			if err := os.Mkdir(rd, 0o755); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(rd, name)
			if err := os.Symlink(victim, link); err != nil {
				t.Fatal(err)
			}
			for _, open := range []func() (*Dir, error){
				func() (*Dir, error) { return Create(rd, "") },
				func() (*Dir, error) { return Open(rd) },
			} {
				d, err := open()
				if err == nil {
					d.Log().Write([]byte("x"))
					d.Write(record.RunEnd{})
					d.Close()
					t.Fatal("opened a run directory with a planted link")
				}
				want := `cannot use run directory "` + rd + `": ` + link + ` is a symbolic link, which gpuguard does not follow here; remove it, or pass --run-dir DIR (or set GPUGUARD_RUN_DIR) to another directory`
				if err.Error() != want {
					t.Errorf("error\n%s\nwant\n%s", err, want)
				}
			}
			if data, _ := os.ReadFile(victim); string(data) != "keep" {
				t.Errorf("the link's target was written: %q", data)
			}
		})
	}
}

// A FIFO planted in a run directory would block the run's start for ever.
func TestPlantedFIFORefused(t *testing.T) {
	rd := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(rd, record.Events), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Create(rd, "")
	if err == nil || !strings.Contains(err.Error(), "is a named pipe (FIFO), not a regular file; remove it") {
		t.Errorf("error %v", err)
	}
}

// Issue 23, finding 6: state.json was 0644 under umask 077, while
// output.log was 0600. Every file of the run follows the umask.
func TestModesFollowUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	rd, err := Create("", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	if err := rd.WriteFileAtomic(record.State, []byte("{}\n")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{record.OutputLog, record.Events, record.GpuguardLog, record.Lock, record.State} {
		st, err := os.Lstat(filepath.Join(rd.Path(), name))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode() != 0o600 {
			t.Errorf("%s: mode %v under umask 077, want -rw-------", name, st.Mode())
		}
	}
}

// On a file system without flock (Lustre mounted noflock: ENOSYS) the run
// goes on, unguarded, and says so once through OnWriteError; any other
// failure to lock refuses the directory.
func TestNoLockFileSystem(t *testing.T) {
	defer func(f func(int, int) error) { flock = f }(flock)
	for _, errno := range []syscall.Errno{syscall.ENOSYS, syscall.EOPNOTSUPP, syscall.ENOLCK} {
		flock = func(int, int) error { return errno }
		rd, err := Create(t.TempDir(), "")
		if err != nil {
			t.Fatalf("%v: %v", errno, err)
		}
		var said []string
		rd.OnWriteError(func(msg string) { said = append(said, msg) })
		want := "warning: run directory " + rd.Path() + " is not locked (" + errno.Error() + ": its file system has no flock): nothing stops a second run from using it at the same time"
		if len(said) != 1 || said[0] != want {
			t.Errorf("%v: said %q, want %q", errno, said, want)
		}
		rd.Close()
		if data, _ := os.ReadFile(filepath.Join(rd.Path(), record.GpuguardLog)); !strings.Contains(string(data), "run directory not locked") {
			t.Errorf("%v: gpuguard.log %q", errno, data)
		}
	}
	flock = func(int, int) error { return syscall.EIO }
	if _, err := Create(t.TempDir(), ""); err == nil || !strings.Contains(err.Error(), "cannot lock run directory") {
		t.Errorf("EIO: %v", err)
	}
}
