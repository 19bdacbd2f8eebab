package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
)

// result is what a command line did: its exit status and its output.
type result struct {
	code           int
	stdout, stderr string
}

// testStreams are streams for one test: stdin is empty, stdout a file (run
// needs files), stderr a buffer. out reads what stdout got.
func testStreams(t *testing.T) (s Streams, out func() string) {
	t.Helper()
	dir := t.TempDir()
	in, err := os.Create(filepath.Join(dir, "stdin"))
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := os.Create(filepath.Join(dir, "stdout"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); stdout.Close() })
	return Streams{In: in, Out: stdout, ErrOut: &bytes.Buffer{}}, func() string {
		b, err := os.ReadFile(stdout.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
}

// gpuguard runs the whole command line, as a user does.
func gpuguard(t *testing.T, args ...string) result {
	t.Helper()
	s, out := testStreams(t)
	code := Main(append([]string{"gpuguard"}, args...), s, "v1.2.3")
	return result{code, out(), s.ErrOut.(*bytes.Buffer).String()}
}

// gpuguardWith runs a command line that has the one command newCmd builds
// (whose runF the test has replaced).
func gpuguardWith(t *testing.T, newCmd func(Streams) *cli.Command, args ...string) result {
	t.Helper()
	s, out := testStreams(t)
	app := newApp(s, "v1.2.3", newCmd(s))
	code := exitStatus(app.Run(append([]string{"gpuguard"}, args...)), s.ErrOut)
	return result{code, out(), s.ErrOut.(*bytes.Buffer).String()}
}

// returning is a command that fails with err.
func returning(err error) func(Streams) *cli.Command {
	return func(Streams) *cli.Command {
		return &cli.Command{Name: "policy", Subcommands: []*cli.Command{{
			Name:   "check",
			Action: func(*cli.Context) error { return err },
		}}}
	}
}

func TestExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want result
	}{
		{"success", nil, result{0, "", ""}},
		{"an error with a status", &exitcode.Error{Code: exitcode.Config, Msg: "bad policy"}, result{78, "", "gpuguard policy check: bad policy\n"}},
		{"a wrapped cause", &exitcode.Error{Code: exitcode.NoInput, Err: os.ErrNotExist}, result{66, "", "gpuguard policy check: file does not exist\n"}},
		{"a status only", exitcode.Status(137), result{137, "", ""}},
		{"an error without a status", errors.New("boom"), result{70, "", "gpuguard policy check: boom\n"}},
	} {
		if got := gpuguardWith(t, returning(tc.err), "policy", "check"); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
}

// urfave/cli's own errors are usage errors, said once.
func TestUsageErrors(t *testing.T) {
	r := gpuguard(t, "report", "--nope", "rd")
	if r.code != 64 || !strings.HasPrefix(r.stderr, "gpuguard: flag provided but not defined: -nope\n") {
		t.Errorf("unknown flag: %+v", r)
	}
	r = gpuguard(t, "run", "--grace", "soon", "--", "true")
	if r.code != 64 || !strings.Contains(r.stderr, "gpuguard: invalid value \"soon\" for flag -grace") {
		t.Errorf("bad flag value: %+v", r)
	}
	if r := gpuguard(t, "help", "nosuch"); r.code != 3 {
		t.Errorf("help on an unknown topic: %+v", r)
	}
	if r := gpuguard(t); r.code != 0 || !strings.Contains(r.stdout, "COMMANDS:") {
		t.Errorf("no command: %+v", r)
	}
}

func TestVersion(t *testing.T) {
	if r := gpuguard(t, "version"); r != (result{0, "gpuguard v1.2.3\n", ""}) {
		t.Errorf("version: %+v", r)
	}
	if r := gpuguard(t, "--version"); r != (result{0, "gpuguard version v1.2.3\n", ""}) {
		t.Errorf("--version: %+v", r)
	}
}
