package procfs

import (
	"bytes"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// This file reads /proc: the list of processes, one process's stat line,
// environment, command line and memory, and the machine's memory.
// Everything takes the proc root as a parameter so that tests can use fake
// trees (testdata/proc/...), and the readers reuse one buffer so that
// sampling at 20 Hz does not churn the heap. Which processes make up a job
// is decided in tree.go.

// procPageSize is the unit of the RSS field of /proc/PID/stat.
var procPageSize = uint64(os.Getpagesize())

// procFS reads files under a proc root with a reusable buffer. Not safe for
// concurrent use.
//
// With hot set (the sampler's reader), files read with readHot stay open and
// are re-read with pread at offset 0, one system call per read instead of
// three; close releases them. Without it every read opens and closes.
type procFS struct {
	root  string
	buf   []byte
	dents []byte // getdents buffer of pids, allocated on first use
	hot   bool
	fds   map[string]int
}

func newProcFS(root string) *procFS {
	if root == "" {
		root = "/proc"
	}
	return &procFS{root: root, buf: make([]byte, 0, 4096), fds: map[string]int{}}
}

// read returns the content of path (valid until the next read). procfs,
// sysfs and cgroupfs files are seq_files, which fill the buffer as far as
// the content goes, so a short read is the end of the file: most files take
// open, one read and close.
func (p *procFS) read(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	return p.pread(fd, path)
}

// readHot is read with the file kept open when p.hot is set. A file that
// fails is closed and opened again on the next call.
func (p *procFS) readHot(path string) ([]byte, error) {
	if !p.hot {
		return p.read(path)
	}
	fd, ok := p.fds[path]
	if !ok {
		var err error
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
		p.fds[path] = fd
	}
	b, err := p.pread(fd, path)
	if err != nil {
		syscall.Close(fd)
		delete(p.fds, path)
	}
	return b, err
}

// pread reads a whole file from offset 0 through an open descriptor.
func (p *procFS) pread(fd int, path string) ([]byte, error) {
	b := p.buf[:0]
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		room := cap(b) - len(b)
		n, err := syscall.Pread(fd, b[len(b):cap(b)], int64(len(b)))
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			p.buf = b
			if err == syscall.ESRCH {
				// The process is gone (its stat file outlives it).
				return nil, &os.PathError{Op: "read", Path: path, Err: fmt.Errorf("%w: %v", os.ErrNotExist, err)}
			}
			return nil, &os.PathError{Op: "read", Path: path, Err: err}
		}
		b = b[:len(b)+n]
		if n < room {
			break
		}
	}
	p.buf = b
	return b, nil
}

// closeUnder releases the kept-open files whose path starts with prefix.
func (p *procFS) closeUnder(prefix string) {
	for path, fd := range p.fds {
		if strings.HasPrefix(path, prefix) {
			syscall.Close(fd)
			delete(p.fds, path)
		}
	}
}

// close releases the files readHot keeps open.
func (p *procFS) close() {
	for path, fd := range p.fds {
		syscall.Close(fd)
		delete(p.fds, path)
	}
}

func (p *procFS) pidPath(pid int, name string) string {
	return p.root + "/" + strconv.Itoa(pid) + "/" + name
}

// Proc is one process as /proc/PID/stat shows it: the fields gpuguard uses.
type Proc struct {
	PID  int
	PPID int
	PGID int    // process group
	SID  int    // session
	Comm string // command name (at most 15 bytes; exec changes it)
	// State is the state letter: R running, S sleeping, D in the kernel,
	// T stopped, Z zombie, X dead, ...
	State    byte
	Threads  int
	Start    uint64 // start time in clock ticks since boot: with PID, identifies a process
	RSSBytes uint64
}

// Zombie reports whether the process has exited and waits to be reaped (or
// is being reaped): it runs nothing and holds no memory.
func (p Proc) Zombie() bool { return p.State == 'Z' || p.State == 'X' }

// ReadStat reads /proc/PID/stat under procRoot ("/proc" when empty). A
// process that is gone gives an error for which errors.Is(err,
// os.ErrNotExist) holds.
func ReadStat(procRoot string, pid int) (Proc, error) {
	return newProcFS(procRoot).stat(pid)
}

// stat reads /proc/PID/stat. A process that is gone gives an error for which
// errors.Is(err, os.ErrNotExist) holds (ENOENT, or ESRCH while it exits).
func (p *procFS) stat(pid int) (Proc, error) {
	b, err := p.read(p.pidPath(pid, "stat"))
	if err != nil {
		if errors.Is(err, syscall.ESRCH) {
			return Proc{}, fmt.Errorf("%w: %v", os.ErrNotExist, err)
		}
		return Proc{}, err
	}
	return ParseStat(pid, b)
}

// statmRSS reads the resident set size from a /proc/PID/statm opened
// earlier ("size resident shared text lib data dt", in pages). The
// descriptor keeps naming the process it was opened for: once that process
// is reaped the read fails with an error matching os.ErrNotExist.
func (p *procFS) statmRSS(pid, fd int) (uint64, error) {
	b, err := p.pread(fd, "statm of process "+strconv.Itoa(pid))
	if err != nil {
		return 0, err
	}
	sp := bytes.IndexByte(b, ' ')
	if sp < 0 {
		return 0, fmt.Errorf("/proc/%d/statm: unexpected format %q", pid, procTrim(b))
	}
	rest := b[sp+1:]
	if e := bytes.IndexByte(rest, ' '); e >= 0 {
		rest = rest[:e]
	}
	return procAtoi(rest) * procPageSize, nil
}

// ParseStat parses the content of /proc/PID/stat. The command name is in
// parentheses and may itself contain spaces and parentheses, so fields are
// counted from the last ')'.
func ParseStat(pid int, b []byte) (Proc, error) {
	st := Proc{PID: pid}
	comm, rest, ok := splitStat(b)
	if !ok {
		return st, fmt.Errorf("/proc/%d/stat: unexpected format %q", pid, procTrim(b))
	}
	st.Comm = comm
	// Fields after the comm, 0-based: 0 state, 1 ppid, 2 pgrp, 3 session,
	// 17 num_threads, 19 starttime, 21 rss (pages).
	n := 0
	for field, f := range statFields(rest) {
		n = field + 1
		switch field {
		case 0:
			if len(f) > 0 {
				st.State = f[0]
			}
		case 1:
			st.PPID = int(procAtoi(f))
		case 2:
			st.PGID = int(procAtoi(f))
		case 3:
			st.SID = int(procAtoi(f))
		case 17:
			st.Threads = int(procAtoi(f))
		case 19:
			st.Start = procAtoi(f)
		case 21:
			st.RSSBytes = procAtoi(f) * procPageSize
			return st, nil
		}
	}
	return st, fmt.Errorf("/proc/%d/stat: only %d fields after the command name", pid, n)
}

// splitStat splits the content of /proc/PID/stat at the command name, which
// is in parentheses and may itself contain spaces and parentheses: rest is
// what follows the last ')'. false when there is no command name or nothing
// after it.
func splitStat(b []byte) (comm string, rest []byte, ok bool) {
	open := bytes.IndexByte(b, '(')
	closeAt := bytes.LastIndexByte(b, ')')
	if open < 0 || closeAt < open || closeAt+2 >= len(b) {
		return "", nil, false
	}
	return string(b[open+1 : closeAt]), b[closeAt+2:], true
}

// statFields yields the fields of rest (the stat line after the command
// name), each with its 0-based index: split at spaces and at the newline.
func statFields(rest []byte) iter.Seq2[int, []byte] {
	return func(yield func(int, []byte) bool) {
		field, start := 0, 0
		for i := 0; i <= len(rest); i++ {
			if i < len(rest) && rest[i] != ' ' && rest[i] != '\n' {
				continue
			}
			if !yield(field, rest[start:i]) {
				return
			}
			start = i + 1
			field++
		}
	}
}

func procAtoi(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			if c == '-' { // negative values (a few signed fields) read as 0
				return 0
			}
			break
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

// procLines yields the lines of b, without their '\n', for the flat files
// of /proc and of cgroups read line by line (status, meminfo, limits, io,
// smaps_rollup, memory.stat).
func procLines(b []byte) iter.Seq[[]byte] {
	return func(yield func([]byte) bool) {
		for len(b) > 0 {
			line := b
			if i := bytes.IndexByte(b, '\n'); i >= 0 {
				line, b = b[:i], b[i+1:]
			} else {
				b = nil
			}
			if !yield(line) {
				return
			}
		}
	}
}

func procTrim(b []byte) []byte {
	if len(b) > 80 {
		return b[:80]
	}
	return b
}

// pids lists the processes under the proc root (thread-group leaders: the
// numeric entries), appending to out. It reads the directory with getdents
// into a reusable buffer, so a listing allocates nothing.
func (p *procFS) pids(out []int) ([]int, error) {
	out = out[:0]
	fd, err := syscall.Open(p.root, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return out, &os.PathError{Op: "open", Path: p.root, Err: err}
	}
	defer syscall.Close(fd)
	if len(p.dents) == 0 {
		p.dents = make([]byte, 32<<10)
	}
	for {
		n, err := syscall.Getdents(fd, p.dents)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return out, &os.PathError{Op: "getdents", Path: p.root, Err: err}
		}
		if n <= 0 {
			return out, nil
		}
		// struct linux_dirent64: ino u64, off s64, reclen u16, type u8,
		// then the name, NUL-terminated.
		for b := p.dents[:n]; len(b) >= 19; {
			reclen := int(b[16]) | int(b[17])<<8
			if reclen < 19 || reclen > len(b) {
				break
			}
			pid, ok := 0, true
			for _, c := range b[19:reclen] {
				if c == 0 {
					break
				}
				if c < '0' || c > '9' {
					ok = false
					break
				}
				pid = pid*10 + int(c-'0')
			}
			if ok && pid > 0 {
				out = append(out, pid)
			}
			b = b[reclen:]
		}
	}
}

// hasEnv reports whether the initial environment of pid holds entry
// ("KEY=VALUE") as a whole entry. known is false when the environment reads
// empty, which a process shows for a moment while it execs (the new program's
// environment is not in place yet), and a zombie for good: look again later.
// An environment that cannot be read (another user's process, without root)
// holds nothing.
func (p *procFS) hasEnv(pid int, entry []byte) (has, known bool) {
	b, err := p.read(p.pidPath(pid, "environ"))
	if err != nil {
		return false, true
	}
	if len(b) == 0 {
		return false, false
	}
	for len(b) > 0 {
		e := b
		if i := bytes.IndexByte(b, 0); i >= 0 {
			e, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if bytes.Equal(e, entry) {
			return true, true
		}
	}
	return false, true
}

// cmdline returns /proc/PID/cmdline with NULs as spaces ("" for kernel
// threads, zombies and processes that are gone).
func (p *procFS) cmdline(pid int) string {
	b, err := p.read(p.pidPath(pid, "cmdline"))
	if err != nil {
		return ""
	}
	b = bytes.TrimRight(b, "\x00")
	return strings.ReplaceAll(string(b), "\x00", " ")
}

// exe returns the base name of the process's executable, "" when it cannot
// be read (another user's process, a kernel thread).
func (p *procFS) exe(pid int) string {
	t, err := os.Readlink(p.pidPath(pid, "exe"))
	if err != nil {
		return ""
	}
	return filepath.Base(strings.TrimSuffix(t, " (deleted)"))
}

// pss returns the Pss and Rss lines of /proc/PID/smaps_rollup in bytes.
// Reading it needs ptrace-read access to the process (same user, or root).
func (p *procFS) pss(pid int) (pss, rss uint64, err error) {
	b, err := p.read(p.pidPath(pid, "smaps_rollup"))
	if err != nil {
		return 0, 0, err
	}
	gotPss := false
	for line := range procLines(b) {
		switch {
		case bytes.HasPrefix(line, []byte("Pss:")):
			pss, gotPss = procKB(line[4:]), true
		case bytes.HasPrefix(line, []byte("Rss:")):
			rss = procKB(line[4:])
		}
	}
	if !gotPss {
		return 0, 0, fmt.Errorf("/proc/%d/smaps_rollup: no Pss line", pid)
	}
	return pss, rss, nil
}

// procKB parses "   1234 kB" into bytes.
func procKB(b []byte) uint64 {
	return procAtoi(bytes.TrimSpace(bytes.TrimSuffix(bytes.TrimSpace(b), []byte("kB")))) * 1024
}

// meminfo returns MemTotal and MemAvailable of /proc/meminfo in bytes.
func (p *procFS) meminfo() (total, avail uint64, err error) {
	b, err := p.readHot(p.root + "/meminfo")
	if err != nil {
		return 0, 0, err
	}
	for line := range procLines(b) {
		switch {
		case bytes.HasPrefix(line, []byte("MemTotal:")):
			total = procKB(line[len("MemTotal:"):])
		case bytes.HasPrefix(line, []byte("MemAvailable:")):
			avail = procKB(line[len("MemAvailable:"):])
		}
	}
	if total == 0 {
		return 0, 0, fmt.Errorf("%s/meminfo: no MemTotal line", p.root)
	}
	return total, avail, nil
}

// isPythonName says whether an executable or command name is a Python
// interpreter (python, python3, python3.11) or one of the names PyTorch gives
// its threads, which ps shows for PyTorch processes (pt_main_thread,
// pt_data_worker).
func isPythonName(name string) bool {
	return strings.HasPrefix(name, "python") || strings.HasPrefix(name, "pt_")
}

// isMultiprocessingChild says whether a command line is that of a process
// Python's multiprocessing started with the spawn method.
func isMultiprocessingChild(cmdline string) bool {
	return strings.Contains(cmdline, "multiprocessing.spawn") || strings.Contains(cmdline, "--multiprocessing-fork")
}
