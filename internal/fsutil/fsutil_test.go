package fsutil

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// withUmask runs fn under umask mask (the process's: these tests are not
// parallel).
func withUmask(t *testing.T, mask int, fn func()) {
	t.Helper()
	old := syscall.Umask(mask)
	defer syscall.Umask(old)
	fn()
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode()
}

// Issue 23, finding 6: files replaced whole got 0644 whatever the umask.
func TestWriteFileAtomicHonoursUmask(t *testing.T) {
	for _, write := range []struct {
		name string
		fn   func(string, []byte, fs.FileMode) error
	}{{"WriteFileAtomic", WriteFileAtomic}, {"ReplaceFile", ReplaceFile}} {
		for _, tc := range []struct {
			umask int
			perm  fs.FileMode
			want  fs.FileMode
		}{{0o077, 0o644, 0o600}, {0o022, 0o644, 0o644}, {0o027, 0o666, 0o640}, {0o002, 0o644, 0o644}} {
			dir := t.TempDir()
			p := filepath.Join(dir, "state.json")
			// Also when replacing a file of another mode: the new one gets
			// what the umask gives, like a new file.
			if err := os.WriteFile(p, []byte("old"), 0o666); err != nil {
				t.Fatal(err)
			}
			withUmask(t, tc.umask, func() {
				if err := write.fn(p, []byte("new\n"), tc.perm); err != nil {
					t.Fatal(err)
				}
			})
			if got := mode(t, p).Perm(); got != tc.want {
				t.Errorf("%s under umask %03o, perm %03o: mode %03o, want %03o", write.name, tc.umask, tc.perm, got, tc.want)
			}
			if data, _ := os.ReadFile(p); string(data) != "new\n" {
				t.Errorf("%s: content %q", write.name, data)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 1 {
				t.Errorf("%s left files behind: %v", write.name, ents)
			}
		}
	}
}

// A link planted where the file goes is replaced, and what it points to is
// left alone.
func TestWriteFileAtomicReplacesLink(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "state.json")
	if err := os.Symlink(victim, p); err != nil {
		t.Fatal(err)
	}
	if err := WriteFileAtomic(p, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep" {
		t.Errorf("the link's target was written: %q", data)
	}
	if m := mode(t, p); !m.IsRegular() {
		t.Errorf("state.json is %v, want a regular file", m)
	}
}

func TestWriteFileAtomicErrorNamesFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "missing", "state.json")
	err := WriteFileAtomic(p, nil, 0o644)
	if err == nil || !strings.Contains(err.Error(), p) || !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v, want one naming %s", err, p)
	}
}

// Issue 23, finding 4: a planted link made gpuguard append to its target.
func TestOpenAppendRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(dir, "victim")
	if err := os.WriteFile(victim, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{victim, filepath.Join(dir, "absent")} {
		p := filepath.Join(dir, "output.log")
		os.Remove(p)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		for _, excl := range []bool{false, true} {
			f, err := OpenAppend(p, 0o644, excl)
			if err == nil {
				f.Write([]byte("x"))
				f.Close()
				t.Fatalf("link to %s (exclusive %v): opened", target, excl)
			}
			if !excl && !errors.Is(err, ErrSymlink) {
				t.Errorf("link to %s: error %v, want ErrSymlink", target, err)
			}
			if !strings.Contains(err.Error(), p) {
				t.Errorf("error %q does not name %s", err, p)
			}
		}
	}
	if data, _ := os.ReadFile(victim); string(data) != "keep" {
		t.Errorf("the link's target was written: %q", data)
	}
	if _, err := os.Lstat(filepath.Join(dir, "absent")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a dangling link's target was created")
	}
}

func TestOpenAppend(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "events.jsonl")
	withUmask(t, 0o077, func() {
		for _, s := range []string{"a", "b"} {
			f, err := OpenAppend(p, 0o644, false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString(s); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
	})
	if data, _ := os.ReadFile(p); string(data) != "ab" {
		t.Errorf("content %q, want appended \"ab\"", data)
	}
	if m := mode(t, p).Perm(); m != 0o600 {
		t.Errorf("mode %03o under umask 077, want 600", m)
	}
	if _, err := OpenAppend(p, 0o644, true); !errors.Is(err, fs.ErrExist) {
		t.Errorf("exclusive open of an existing file: %v, want ErrExist", err)
	}
	// A FIFO nobody reads would block the open for ever; it is refused.
	fifo := filepath.Join(dir, "gpuguard.log")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := OpenAppend(fifo, 0o644, false)
	var nr *NotRegularError
	if !errors.As(err, &nr) || !strings.Contains(err.Error(), "named pipe") {
		t.Errorf("FIFO: %v, want a NotRegularError", err)
	}
}

// Issue 23, finding 9: `gpuguard policy check /dev/zero` read until memory
// ran out.
func TestReadFileLimit(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(small, []byte("rules: []\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if data, err := ReadFileLimit(small, 10); err != nil || string(data) != "rules: []\n" {
		t.Errorf("file at the limit: %q, %v", data, err)
	}
	var tl *TooLargeError
	if _, err := ReadFileLimit(small, 9); !errors.As(err, &tl) || tl.Size != 10 || !strings.Contains(err.Error(), small) {
		t.Errorf("file over the limit: %v", err)
	}
	link := filepath.Join(dir, "link.yaml")
	if err := os.Symlink(small, link); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFileLimit(link, 1<<20); err != nil {
		t.Errorf("a link to a regular file: %v", err)
	}
	fifo := filepath.Join(dir, "fifo.yaml")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/dev/zero", fifo, dir} {
		_, err := ReadFileLimit(p, 4<<20)
		var nr *NotRegularError
		if !errors.As(err, &nr) || !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %v, want a NotRegularError naming it", p, err)
		}
	}
	if _, err := ReadFileLimit(filepath.Join(dir, "absent"), 1); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}
