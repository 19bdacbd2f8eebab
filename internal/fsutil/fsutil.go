// Package fsutil holds gpuguard's few careful file operations, shared by
// the packages that write a run's record and read its inputs: a file
// replaced whole (WriteFileAtomic, ReplaceFile) with the mode the umask
// gives, a file opened for appending that is never a planted symbolic link
// or a FIFO (OpenAppend), and a bounded read of a regular file
// (ReadFileLimit).
package fsutil

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/gpuguard/gpuguard/internal/humanize"
)

// WriteFileAtomic replaces the file at path with data, so that a reader (or
// a crash) sees the old content or the new, never a mix: a temporary file is
// created beside it, written, synced and renamed over it, and the directory
// is synced. The file gets mode perm less the process's umask (and the
// directory's default ACL), as os.WriteFile gives a new file. A symbolic
// link at path is replaced, never followed.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	return replace(path, data, perm, true)
}

// ReplaceFile is WriteFileAtomic without the syncs: for files that say where
// a live process stands and are rewritten soon (metrics), where a crash may
// lose the last version but a reader still never sees half a file.
func ReplaceFile(path string, data []byte, perm fs.FileMode) error {
	return replace(path, data, perm, false)
}

func replace(path string, data []byte, perm fs.FileMode, sync bool) error {
	dir, name := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("write %s: not a file name", path)
	}
	var tmp *os.File
	var err error
	for range 10 {
		var b [6]byte
		_, _ = rand.Read(b[:])
		// A leading dot and a suffix after the name: readers that pick
		// files by extension (node_exporter reads *.prom) skip it.
		tmpName := filepath.Join(dir, "."+name+".tmp-"+hex.EncodeToString(b[:]))
		// O_EXCL|O_NOFOLLOW: never an existing file or a planted link. The
		// kernel applies the umask to perm, as it does for os.WriteFile.
		tmp, err = os.OpenFile(tmpName, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, perm)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	fail := func(err error) error {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fail(err)
	}
	if sync {
		if err := tmp.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("write %s: %w", path, err)
	}
	if sync {
		if d, err := os.Open(dir); err == nil {
			_ = d.Sync()
			d.Close()
		}
	}
	return nil
}

// ErrSymlink is the error of OpenAppend for a path that is a symbolic link.
var ErrSymlink = errors.New("is a symbolic link, which gpuguard does not follow here")

// OpenAppend opens the file at path for appending, creating it with mode
// perm (less the umask) when it does not exist; with exclusive, the file
// must not exist yet. It never follows a symbolic link at path (a planted
// link would make gpuguard append to any file the user can write): that is
// ErrSymlink. Anything but a regular file (a FIFO, a device) is refused too,
// without blocking on it.
func OpenAppend(path string, perm fs.FileMode, exclusive bool) (*os.File, error) {
	flag := syscall.O_WRONLY | syscall.O_CREAT | syscall.O_APPEND | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC
	if exclusive {
		flag |= syscall.O_EXCL
	}
	fd, err := openFd(path, flag, perm)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), path), nil
}

// openFd opens path with flag (O_NOFOLLOW and O_NONBLOCK expected), checks
// it is a regular file, and clears O_NONBLOCK.
func openFd(path string, flag int, perm fs.FileMode) (int, error) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, flag, uint32(perm.Perm()))
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		if err == syscall.ELOOP && flag&syscall.O_NOFOLLOW != 0 {
			if st, lerr := os.Lstat(path); lerr == nil && st.Mode()&fs.ModeSymlink != 0 {
				err = ErrSymlink
			}
		}
		if err == syscall.ENXIO { // a FIFO without a reader, opened to write
			var st syscall.Stat_t
			if syscall.Lstat(path, &st) == nil && st.Mode&syscall.S_IFMT != syscall.S_IFREG {
				err = &NotRegularError{Kind: kindOf(st.Mode)}
			}
		}
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		syscall.Close(fd)
		return -1, &fs.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		syscall.Close(fd)
		return -1, &fs.PathError{Op: "open", Path: path, Err: &NotRegularError{Kind: kindOf(st.Mode)}}
	}
	if err := syscall.SetNonblock(fd, false); err != nil {
		syscall.Close(fd)
		return -1, &fs.PathError{Op: "open", Path: path, Err: err}
	}
	return fd, nil
}

// NotRegularError is a path that is not a regular file.
type NotRegularError struct{ Kind string }

func (e *NotRegularError) Error() string {
	return "is a " + e.Kind + ", not a regular file"
}

func kindOf(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "directory"
	case syscall.S_IFIFO:
		return "named pipe (FIFO)"
	case syscall.S_IFCHR:
		return "character device"
	case syscall.S_IFBLK:
		return "block device"
	case syscall.S_IFSOCK:
		return "socket"
	case syscall.S_IFLNK:
		return "symbolic link"
	}
	return "special file"
}

// TooLargeError is a file over the size ReadFileLimit was given.
type TooLargeError struct {
	Size  int64 // the file's size, or -1 when it grew while read
	Limit int64
}

func (e *TooLargeError) Error() string {
	if e.Size < 0 {
		return fmt.Sprintf("is larger than %s, the most gpuguard reads of it", humanize.Bytes(uint64(e.Limit)))
	}
	return fmt.Sprintf("is %s, over the %s gpuguard reads of it", humanize.Bytes(uint64(e.Size)), humanize.Bytes(uint64(e.Limit)))
}

// ReadFileLimit reads the regular file at path, following symbolic links,
// if it holds at most limit bytes. A FIFO, a device (/dev/zero) or a
// directory is a *NotRegularError, a larger file a *TooLargeError (both
// inside an *fs.PathError): neither blocks nor reads without end.
func ReadFileLimit(path string, limit int64) ([]byte, error) {
	fd, err := openFd(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Size() > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Size: st.Size(), Limit: limit}}
	}
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &fs.PathError{Op: "read", Path: path, Err: &TooLargeError{Size: -1, Limit: limit}}
	}
	return data, nil
}
