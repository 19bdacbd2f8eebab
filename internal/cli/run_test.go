package cli

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// Flags and arguments → supervisor.Config.
func TestRunFlags(t *testing.T) {
	defaults := supervisor.Config{PTY: "auto", Grace: 10 * time.Second}
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want func(*supervisor.Config)
	}{
		{[]string{"--", "python", "train.py", "--bs", "8"}, nil, func(c *supervisor.Config) {
			c.Argv = []string{"python", "train.py", "--bs", "8"}
		}},
		{[]string{"python", "train.py"}, nil, func(c *supervisor.Config) { c.Argv = []string{"python", "train.py"} }},
		{[]string{"--pty", "never", "--run-dir", "rd", "--policy", "lightning", "--resume-run", "old", "--no-env", "--dry-run", "--grace", "3s", "--", "t"}, nil,
			func(c *supervisor.Config) {
				*c = supervisor.Config{Argv: []string{"t"}, PTY: "never", RunDir: "rd", Policy: "lightning", ResumeRun: "old", NoEnv: true, DryRun: true, Grace: 3 * time.Second}
			}},
		{[]string{"--", "t"}, map[string]string{"GPUGUARD_RUN_DIR": "/runs/x", "GPUGUARD_POLICY": "p.yaml"}, func(c *supervisor.Config) {
			c.Argv, c.RunDir, c.Policy = []string{"t"}, "/runs/x", "p.yaml"
		}},
		{[]string{"--run-dir", "flag", "--", "t"}, map[string]string{"GPUGUARD_RUN_DIR": "/runs/x"}, func(c *supervisor.Config) {
			c.Argv, c.RunDir = []string{"t"}, "flag"
		}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var got *supervisor.Config
			r := gpuguardWith(t, func(s Streams) *cli.Command {
				return newRunCmd(s, func(c supervisor.Config) error {
					if c.Stdin != s.In || c.Stdout != s.Out || c.Stderr != s.ErrOut {
						t.Errorf("%q: the job does not get the streams", tc.args)
					}
					c.Stdin, c.Stdout, c.Stderr = nil, nil, nil
					got = &c
					return nil
				})
			}, append([]string{"run"}, tc.args...)...)
			want := defaults
			tc.want(&want)
			if r.code != 0 || got == nil || !reflect.DeepEqual(*got, want) {
				t.Errorf("run %q: exit %d, config %+v, want %+v", tc.args, r.code, got, want)
			}
		})
	}
}

func TestRunStatus(t *testing.T) {
	r := gpuguard(t, "run")
	if r.code != 64 || r.stderr != "gpuguard run: no command given; usage: gpuguard run [flags] -- COMMAND [ARGS...]\n" {
		t.Errorf("no command: %+v", r)
	}
	// The job's status passes through, and the supervisor has said why.
	r = gpuguardWith(t, func(s Streams) *cli.Command {
		return newRunCmd(s, func(supervisor.Config) error { return exitcode.Status(137) })
	}, "run", "--", "t")
	if r != (result{137, "", ""}) {
		t.Errorf("job killed: %+v", r)
	}
}

// Issue 23, finding 10: --grace -1s and --group-timeout -1s were accepted,
// and the watchdog then used 10 s.
func TestRunRefusesNegativeDurations(t *testing.T) {
	for _, tc := range []struct{ args, want string }{
		{"--grace -1s", "gpuguard run: --grace -1s: a duration must not be negative; give one such as 10s (the default)\n"},
		{"--grace=-500ms", "gpuguard run: --grace -500ms: a duration must not be negative; give one such as 10s (the default)\n"},
		{"--group-timeout -1s", "gpuguard run: --group-timeout -1s: a duration must not be negative; give one such as 60s (the default)\n"},
	} {
		ran := false
		r := gpuguardWith(t, func(s Streams) *cli.Command {
			return newRunCmd(s, func(supervisor.Config) error { ran = true; return nil })
		}, append(append([]string{"run"}, strings.Fields(tc.args)...), "--", "t")...)
		if ran || r.code != 64 || r.stderr != tc.want {
			t.Errorf("%s: ran %v, %+v, want 64 and %q", tc.args, ran, r, tc.want)
		}
	}
	// Zero is a duration: no grace.
	r := gpuguardWith(t, func(s Streams) *cli.Command {
		return newRunCmd(s, func(supervisor.Config) error { return nil })
	}, "run", "--grace", "0s", "--", "t")
	if r.code != 0 {
		t.Errorf("--grace 0s: %+v", r)
	}
}
