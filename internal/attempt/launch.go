package attempt

import (
	"errors"
	"fmt"
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// LookPathIn finds the program for argv0 the way a shell does, but in the
// job's PATH (pathEnv) rather than gpuguard's, resolving relative names and
// PATH entries against dir (the job's working directory). It returns the
// path to execute, or an *Error: exitcode.NotFound (127) when nothing by that name
// exists, exitcode.NotRunnable (126) when the only matches cannot be executed.
func LookPathIn(argv0, pathEnv, dir string) (string, error) {
	resolve := func(p string) string {
		if dir != "" && !filepath.IsAbs(p) {
			return filepath.Join(dir, p)
		}
		return p
	}
	if strings.Contains(argv0, "/") {
		err := checkExecutable(resolve(argv0))
		switch {
		case err == nil:
			return argv0, nil
		case errors.Is(err, fs.ErrNotExist):
			return "", &exitcode.Error{Code: exitcode.NotFound, Err: err,
				Msg: fmt.Sprintf("command not found: %q: no such file; check the path (relative paths start from %s)", argv0, describeDir(dir))}
		default:
			return "", notRunnable(argv0, err)
		}
	}
	var denied error
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "." // an empty PATH entry is the working directory
		}
		cand := filepath.Join(d, argv0)
		err := checkExecutable(resolve(cand))
		if err == nil {
			if !filepath.IsAbs(cand) && !strings.HasPrefix(cand, ".") {
				cand = "./" + cand
			}
			return cand, nil
		}
		if !errors.Is(err, fs.ErrNotExist) && denied == nil {
			denied = fmt.Errorf("%s: %w", cand, err)
		}
	}
	if denied != nil {
		return "", notRunnable(argv0, denied)
	}
	return "", &exitcode.Error{Code: exitcode.NotFound, Err: fs.ErrNotExist,
		Msg: fmt.Sprintf("command not found: %q (searched PATH=%s); check the spelling, install it, or give its full path", argv0, pathEnv)}
}

var errIsDir = errors.New("is a directory")

// checkExecutable returns nil when p is a file the caller may execute.
func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() {
		return errIsDir
	}
	if err := unix.Access(p, unix.X_OK); err != nil {
		return err
	}
	if st.Mode()&0o111 == 0 {
		return syscall.EACCES
	}
	return nil
}

func notRunnable(argv0 string, err error) error {
	msg := fmt.Sprintf("cannot run %q: %v", argv0, err)
	switch {
	case errors.Is(err, errIsDir):
		msg = fmt.Sprintf("cannot run %q: it is a directory; name the program to run", argv0)
	case errors.Is(err, syscall.EACCES):
		msg = fmt.Sprintf("cannot run %q: permission denied (not executable); run `chmod +x %s`, or name its interpreter (python %s)", argv0, argv0, argv0)
	}
	return &exitcode.Error{Code: exitcode.NotRunnable, Err: err, Msg: msg}
}

// startError maps the error of exec.Cmd.Start for a program LookPathIn found,
// started with argv and env.
func startError(argv, env []string, path string, err error) error {
	argv0 := argv[0]
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		return &exitcode.Error{Code: exitcode.NotRunnable, Err: err,
			Msg: fmt.Sprintf("cannot run %q: not a program the kernel can execute (exec format error); if it is a script, add a #! line or name its interpreter", argv0)}
	case errors.Is(err, syscall.ENOENT):
		return &exitcode.Error{Code: exitcode.NotRunnable, Err: err,
			Msg: fmt.Sprintf("cannot run %q (%s): its interpreter, named on its #! line, was not found; fix that line or name the interpreter", argv0, path)}
	case errors.Is(err, syscall.E2BIG):
		return &exitcode.Error{Code: exitcode.NotRunnable, Err: err,
			Msg: fmt.Sprintf("cannot run %q: its arguments and environment are too long for the kernel (argument list too long: %s); pass long values in a file instead", argv0, argvSize(argv, env))}
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return &exitcode.Error{Code: exitcode.NotRunnable, Err: err,
			Msg: fmt.Sprintf("cannot run %q (%s): permission denied (a noexec mount, or an interpreter that is not executable)", argv0, path)}
	}
	return &exitcode.Error{Code: exitcode.Software, Err: err, Msg: fmt.Sprintf("cannot start %q: %v", argv0, err)}
}

func describeDir(dir string) string {
	if dir != "" {
		return dir
	}
	if wd, err := os.Getwd(); err == nil {
		return wd
	}
	return "the working directory"
}

// argvSize describes the size of what exec hands the kernel: the total, and
// the longest single string (Linux refuses one over 128 KiB, and the whole
// over a quarter of the stack limit).
func argvSize(argv, env []string) string {
	total, longest, which := 0, 0, ""
	for i, a := range argv {
		total += len(a) + 1
		if len(a) > longest {
			longest, which = len(a), fmt.Sprintf("argument %d", i)
		}
	}
	for _, e := range env {
		total += len(e) + 1
		if len(e) > longest {
			name, _, _ := strings.Cut(e, "=")
			longest, which = len(e), "environment variable "+name
		}
	}
	return fmt.Sprintf("%d bytes in all, the longest %s with %d bytes", total, which, longest)
}
