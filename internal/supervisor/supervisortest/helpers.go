package supervisortest

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gpuguard/gpuguard/internal/probes/procfs"
)

// A test binary plays the programs its tests need (a fake trainer, gpuguard
// itself, a watchdog) by re-executing itself, as os/exec's tests do: each
// program is a Helper, registered by name in one table, and the binary's
// first argument names the helper to run. A package's TestMain is one line:
//
//	func TestMain(m *testing.M) { supervisortest.Main(m, helpers) }
//
// where helpers is the package's table, the fake trainer's modes it uses
// (Modes) with its own helpers added (With). Tests build a helper's command
// line with Argv, or write it out: [os.Executable(), NAME, ARGS...].
//
// A helper that no test ran fails the run (when the whole package ran and
// passed), so that the table holds no dead programs; a helper name that is
// not in the table is an error when Argv builds it.

// Helper is one program of a test binary: it gets the arguments after its
// name and returns the exit status.
type Helper func(args []string) int

// Helpers is a test binary's table of helpers, by the name that selects one.
// A name may be a word ("print") or a flag-like word ("-gpuguard"); go test's
// own arguments all begin "-test.", so none is taken for a helper's.
type Helpers map[string]Helper

// With returns the union of h and more; a name in both is a mistake and
// panics.
func (h Helpers) With(more Helpers) Helpers {
	out := maps.Clone(h)
	if out == nil {
		out = Helpers{}
	}
	for name, f := range more {
		if _, dup := out[name]; dup {
			panic(fmt.Sprintf("supervisortest: helper %q registered twice", name))
		}
		out[name] = f
	}
	return out
}

// Option changes what Main sets up around the tests.
type Option func(*setup)

type setup struct {
	subreaper bool
	programs  []string
}

// Subreaper makes the test process a child subreaper before the tests run:
// orphans of the gpuguard subprocesses the tests kill come back to it, to be
// reaped (and waited for) by the tests.
func Subreaper() Option { return func(s *setup) { s.subreaper = true } }

// Programs puts the named helpers first in PATH as programs of those names
// (links to the test binary), for commands written out as a user types them
// (testscript sessions: `exec gpuguard run -- fake-trainer print 3`).
// TrainerProgram is one of them: `fake-trainer MODE ARGS...` runs the
// helper MODE.
func Programs(names ...string) Option {
	return func(s *setup) { s.programs = append(s.programs, names...) }
}

// TrainerProgram is the program that runs any helper of the table by the
// name in its first argument: `fake-trainer print 3`.
const TrainerProgram = "fake-trainer"

// usedEnv names the directory where helper processes record that they ran
// (an empty file per helper), for the parent's check.
const usedEnv = "SUPERVISORTEST_USED_DIR"

// table is this binary's helpers, set by Main.
var table Helpers

// usedHere records the helpers Argv built a command line for in this
// process.
var usedHere = map[string]bool{}

// Main is a test binary's TestMain. When the binary was started as one of
// its helpers (its first argument, or its name for a program), it runs that
// helper and exits with its status. Otherwise it runs the tests, and when the
// whole package ran (no -run, -skip or -list) and passed, fails the run for
// each helper that no test ran.
func Main(m *testing.M, helpers Helpers, opts ...Option) {
	table = helpers
	var s setup
	for _, o := range opts {
		o(&s)
	}
	if name, args, ok := invoked(s.programs); ok {
		os.Exit(run(name, args))
	}
	os.Exit(runTests(m, s))
}

// invoked says which helper this process is to run, if any.
func invoked(programs []string) (name string, args []string, ok bool) {
	switch base := filepath.Base(os.Args[0]); {
	case base == TrainerProgram && slices.Contains(programs, base):
		if len(os.Args) < 2 {
			return base, nil, true // run reports the missing mode
		}
		return os.Args[1], os.Args[2:], true
	case slices.Contains(programs, base):
		os.Args[0] = base // as a user's shell would name it
		return base, os.Args[1:], true
	}
	if len(os.Args) > 1 {
		if _, ok := table[os.Args[1]]; ok {
			return os.Args[1], os.Args[2:], true
		}
	}
	return "", nil, false
}

// run runs helper name, recording that it ran.
func run(name string, args []string) int {
	f, ok := table[name]
	if !ok {
		if name == TrainerProgram {
			fmt.Fprintf(os.Stderr, "%s: no mode (one of %s)\n", TrainerProgram, strings.Join(names(), ", "))
		} else {
			fmt.Fprintf(os.Stderr, "%s: unknown mode %q: this test binary's helpers are %s\n", TrainerProgram, name, strings.Join(names(), ", "))
		}
		return 2
	}
	markRan(name)
	return f(args)
}

// markRan records in the parent's directory that helper name ran. The
// directory is named in the environment; a helper started with an
// environment of its own (a testscript session's programs, the supervisor's
// watchdog) finds it beside the test binary, under the pid of the nearest
// ancestor that is a test run.
func markRan(name string) {
	dir := os.Getenv(usedEnv)
	if dir == "" {
		dir = ancestorsDir()
	}
	if dir == "" {
		return
	}
	if f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY, 0o644); err == nil {
		f.Close()
	}
}

// besideBinary is the directory beside the test binary where a test run
// with pid keeps the records of helpers without its environment.
func besideBinary(pid int) string {
	return filepath.Join(filepath.Dir(self()), ".supervisortest-used", strconv.Itoa(pid))
}

// ancestorsDir is besideBinary of the nearest ancestor that has one, "" when
// none has.
func ancestorsDir() string {
	for pid, i := os.Getppid(), 0; pid > 1 && i < 64; i++ {
		if dir := besideBinary(pid); isDir(dir) {
			return dir
		}
		st, err := procfs.ReadStat("", pid)
		if err != nil {
			return ""
		}
		pid = st.PPID
	}
	return ""
}

func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func names() []string { return slices.Sorted(maps.Keys(table)) }

// Argv returns the command line that runs helper name with args: this test
// binary, re-executed. The helper counts as used. A name that is not in the
// binary's table panics: register it in the package's TestMain.
func Argv(name string, args ...string) []string {
	if _, ok := table[name]; !ok {
		panic(fmt.Sprintf("supervisortest: helper %q is not in this test binary's table (supervisortest.Main); it has %s", name, strings.Join(names(), ", ")))
	}
	if !usedHere[name] {
		usedHere[name] = true
		markRan(name) // for a helper starting another: the parent cannot see usedHere
	}
	return append([]string{self(), name}, args...)
}

func self() string {
	exe, err := os.Executable()
	if err != nil {
		panic(fmt.Sprintf("supervisortest: the test binary's path: %v", err))
	}
	return exe
}

// runTests runs the tests and checks that every helper ran.
func runTests(m *testing.M, s setup) int {
	tmp, err := os.MkdirTemp("", "supervisortest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "supervisortest: a directory for the helpers' records:", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	used := filepath.Join(tmp, "used")
	if err := os.Mkdir(used, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "supervisortest:", err)
		return 1
	}
	os.Setenv(usedEnv, used)
	// Best effort: where the test binary's directory is not writable, only
	// the helpers that inherit the environment are seen.
	beside := besideBinary(os.Getpid())
	os.RemoveAll(beside)
	if os.MkdirAll(beside, 0o755) == nil {
		defer func() {
			os.RemoveAll(beside)
			os.Remove(filepath.Dir(beside)) // when no other run uses it
		}()
	}
	if len(s.programs) > 0 {
		bin := filepath.Join(tmp, "bin")
		if err := os.Mkdir(bin, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "supervisortest:", err)
			return 1
		}
		for _, p := range s.programs {
			if _, ok := table[p]; !ok && p != TrainerProgram {
				fmt.Fprintf(os.Stderr, "supervisortest: program %q is not a helper of this binary's table\n", p)
				return 1
			}
			if err := os.Symlink(self(), filepath.Join(bin, p)); err != nil {
				fmt.Fprintln(os.Stderr, "supervisortest: installing the programs:", err)
				return 1
			}
		}
		os.Setenv("PATH", bin+string(filepath.ListSeparator)+os.Getenv("PATH"))
	}
	if s.subreaper {
		if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
			fmt.Fprintln(os.Stderr, "supervisortest: cannot become a child subreaper:", err)
			return 1
		}
	}
	code := m.Run()
	if code != 0 || filtered() {
		return code
	}
	ran := map[string]bool{}
	for _, dir := range []string{used, beside} {
		ents, _ := os.ReadDir(dir)
		for _, e := range ents {
			ran[e.Name()] = true
		}
	}
	for _, name := range names() {
		if !ran[name] && !usedHere[name] {
			fmt.Fprintf(os.Stderr, "supervisortest: helper %q is registered but no test ran it: remove it from the package's table (and from supervisortest, if no package uses it)\n", name)
			code = 1
		}
	}
	return code
}

// filtered says whether only part of the tests ran (-run, -skip, -list):
// then an unused helper proves nothing.
func filtered() bool {
	for _, name := range []string{"test.run", "test.skip", "test.list"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" {
			return true
		}
	}
	return false
}
