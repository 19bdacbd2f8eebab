package cli

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime/debug"
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
	code := exitStatus(runApp(app, append([]string{"gpuguard"}, args...)), s.ErrOut)
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

// A command line gpuguard cannot follow is one line naming what it does not
// know, with what is close, then the usage line, and 64.
func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		stderr string
	}{
		{[]string{"rnu", "--", "python", "train.py"}, "gpuguard: unknown command \"rnu\" (did you mean \"run\"?)\n" +
			"usage: gpuguard COMMAND [flags] [ARGS...]; commands: run, explain, report, doctor, policy, version, completion, help\n"},
		{[]string{"frobnicate"}, "gpuguard: unknown command \"frobnicate\"\n" +
			"usage: gpuguard COMMAND [flags] [ARGS...]; commands: run, explain, report, doctor, policy, version, completion, help\n"},
		{[]string{"run", "--polcy", "p.yaml", "--", "python", "train.py"}, "gpuguard run: unknown flag --polcy (did you mean \"--policy\"?)\n" +
			"usage: gpuguard run [flags] -- COMMAND [ARGS...]\n"},
		{[]string{"report", "--nope", "rd"}, "gpuguard report: unknown flag --nope\n" +
			"usage: gpuguard report [--json] [--plot FILE] [RUN_DIR|latest]\n"},
		{[]string{"policy", "chek", "p.yaml"}, "gpuguard policy: unknown subcommand of policy \"chek\" (did you mean \"check\"?)\n" +
			"usage: gpuguard policy check|init|list ...\n"},
		{[]string{"--verison"}, "gpuguard: unknown flag --verison (did you mean \"--version\"?)\n" +
			"usage: gpuguard COMMAND [flags] [ARGS...]; commands: run, explain, report, doctor, policy, version, completion, help\n"},
		{[]string{"help", "nosuch"}, "gpuguard: unknown command \"nosuch\"\n" +
			"usage: gpuguard COMMAND [flags] [ARGS...]; commands: run, explain, report, doctor, policy, version, completion, help\n"},
		{[]string{"run", "--grace", "soon", "--", "true"}, "gpuguard run: --grace soon: a duration is written with a unit, e.g. 30s (units: ms, s, m, h)\n" +
			"usage: gpuguard run [flags] -- COMMAND [ARGS...]\n"},
	} {
		if r := gpuguard(t, tc.args...); r != (result{64, "", tc.stderr}) {
			t.Errorf("%q: %+v\nwant stderr %q", tc.args, r, tc.stderr)
		}
	}
	if r := gpuguard(t); r.code != 0 || !strings.Contains(r.stdout, "COMMANDS:") {
		t.Errorf("no command: %+v", r)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		if r := gpuguard(t, args...); r.code != 0 || !strings.Contains(r.stdout, "COMMANDS:") || r.stderr != "" {
			t.Errorf("%q: %+v", args, r)
		}
	}
	for _, args := range [][]string{{"help", "report"}, {"report", "--help"}, {"report", "rd", "-h"}} {
		if r := gpuguard(t, args...); r.code != 0 || !strings.Contains(r.stdout, "gpuguard report - summarise a run directory") || r.stderr != "" {
			t.Errorf("%q: %+v", args, r)
		}
	}
	if r := gpuguard(t, "help", "policy", "check"); r.code != 0 || !strings.Contains(r.stdout, "validate a policy file or preset") {
		t.Errorf("help policy check: %+v", r)
	}
	if r := gpuguard(t, "policy"); r.code != 0 || !strings.Contains(r.stdout, "check") {
		t.Errorf("policy: %+v", r)
	}
}

// Flags go anywhere among a command's arguments, except in the job's
// command line.
func TestNormalize(t *testing.T) {
	cmds := []*cli.Command{
		newRunCmd(Streams{}, nil), newReportCmd(Streams{}, nil), newExplainCmd(Streams{}, nil), newPolicyCmd(Streams{}),
	}
	for _, tc := range []struct{ in, want string }{
		{"report rd --json", "report --json -- rd"},
		{"report --plot m.png rd", "report --plot m.png -- rd"},
		{"report rd --plot=m.png", "report --plot=m.png -- rd"},
		{"explain a.log --json - b.log", "explain --json -- a.log - b.log"},
		{"explain -- --json", "explain -- --json"},
		{"run --policy p -- python t.py --json", "run --policy p -- python t.py --json"},
		{"run python t.py --policy p", "run -- python t.py --policy p"},
		{"run --dry-run python t.py", "run --dry-run -- python t.py"},
		{"run --", "run"},
		{"policy init python t.py --bs 8", "policy init -- python t.py --bs 8"},
		{"policy check p.yaml", "policy check -- p.yaml"},
		{"--version", "version"},
		{"help run", "run --help"},
		{"help policy init", "policy init --help"},
	} {
		got, err := normalize(append([]string{"gpuguard"}, strings.Fields(tc.in)...), cmds)
		if err != nil || strings.Join(got[1:], " ") != tc.want {
			t.Errorf("%s: %q, %v; want %s", tc.in, got, err, tc.want)
		}
	}
}
func TestVersion(t *testing.T) {
	r := gpuguard(t, "version")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "gpuguard v1.2.3 (") || r.stderr != "" {
		t.Errorf("version: %+v", r)
	}
	if r2 := gpuguard(t, "--version"); r2 != r {
		t.Errorf("--version: %+v, version: %+v", r2, r)
	}
	info := func() (*debug.BuildInfo, bool) {
		return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/gpuguard/gpuguard", Version: "v0.4.0"},
			Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "true"}}}, true
	}
	for _, tc := range []struct{ x, want string }{
		{"dev", "gpuguard v0.4.0 (revision 0123456789ab, modified, go1.26.8)"},
		{"v1.2.3", "gpuguard v1.2.3 (module v0.4.0, revision 0123456789ab, modified, go1.26.8)"},
		{"v0.4.0", "gpuguard v0.4.0 (revision 0123456789ab, modified, go1.26.8)"},
	} {
		if got := versionString(tc.x, info); got != tc.want {
			t.Errorf("versionString(%q) = %q, want %q", tc.x, got, tc.want)
		}
	}
	none := func() (*debug.BuildInfo, bool) { return nil, false }
	if got := versionString("dev", none); !strings.HasPrefix(got, "gpuguard devel (go") {
		t.Errorf("without build info: %q", got)
	}
}
