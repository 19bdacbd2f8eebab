package attempt

import (
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"os"
	"strconv"

	"github.com/creack/pty"
	"github.com/gpuguard/gpuguard/internal/envlist"
	"golang.org/x/sys/unix"
	"golang.org/x/term"
)

// IsTerminal reports whether f is a terminal. A nil f is not.
func IsTerminal(f *os.File) bool {
	if f == nil {
		return false
	}
	is := false
	_ = withFd(f, func(fd int) error { is = term.IsTerminal(fd); return nil })
	return is
}

// inForeground reports whether gpuguard's process group is the foreground
// group of the terminal f. Changing the mode of a terminal from a background
// group stops the process with SIGTTOU, so raw mode is only for the
// foreground.
func inForeground(f *os.File) bool {
	pgrp := -1
	_ = withFd(f, func(fd int) error {
		var err error
		pgrp, err = unix.IoctlGetInt(fd, unix.TIOCGPGRP)
		return err
	})
	return pgrp == unix.Getpgrp()
}

// ResolvePTY turns the --pty flag into a launch mode: "always" and "never"
// are what they say; "auto" (or "") picks a pseudo-terminal when stdout is a
// terminal. Any other value is a usage error.
func ResolvePTY(mode string, stdout *os.File) (bool, error) {
	switch mode {
	case "", "auto":
		return IsTerminal(stdout), nil
	case "always":
		return true, nil
	case "never":
		return false, nil
	}
	return false, &exitcode.Error{Code: exitcode.Usage, Msg: "gpuguard run: --pty " + strconv.Quote(mode) + " is not one of auto, always, never"}
}

// windowSize is the size a new pseudo-terminal gets: that of the terminal
// src when it has one, else $COLUMNS × $LINES from the job's environment,
// else 80×24. A pty left at 0×0 makes tqdm and rich draw badly.
func windowSize(src *os.File, env []string) *pty.Winsize {
	if IsTerminal(src) {
		var ws *unix.Winsize
		_ = withFd(src, func(fd int) error {
			var err error
			ws, err = unix.IoctlGetWinsize(fd, unix.TIOCGWINSZ)
			return err
		})
		if ws != nil && ws.Row > 0 && ws.Col > 0 {
			return &pty.Winsize{Rows: ws.Row, Cols: ws.Col, X: ws.Xpixel, Y: ws.Ypixel}
		}
	}
	ws := &pty.Winsize{Rows: 24, Cols: 80}
	if v, ok := envlist.Lookup(env, "COLUMNS"); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 1<<16 {
			ws.Cols = uint16(n)
		}
	}
	if v, ok := envlist.Lookup(env, "LINES"); ok {
		if n, err := strconv.Atoi(v); err == nil && n > 0 && n < 1<<16 {
			ws.Rows = uint16(n)
		}
	}
	return ws
}

// rawOutput reports whether output processing is off on the terminal f (raw
// mode): a '\n' written there then needs a '\r' to return the carriage.
func rawOutput(f *os.File) bool {
	if !IsTerminal(f) {
		return false
	}
	raw := false
	_ = withFd(f, func(fd int) error {
		t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
		raw = err == nil && t.Oflag&unix.OPOST == 0
		return err
	})
	return raw
}
