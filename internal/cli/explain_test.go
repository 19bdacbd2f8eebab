package cli

import (
	"reflect"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/explain"
)

func TestExplainArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want explain.Options
	}{
		{[]string{"train.log"}, explain.Options{Paths: []string{"train.log"}}},
		{[]string{"--json", "a.log", "-", "rd"}, explain.Options{Paths: []string{"a.log", "-", "rd"}, JSON: true}},
	} {
		var got *explain.Options
		r := gpuguardWith(t, func(s Streams) *cli.Command {
			return newExplainCmd(s, func(o explain.Options) error {
				if o.Stdin != s.In || o.Stdout != s.Out || o.Stderr != s.ErrOut {
					t.Errorf("%q: explain does not get the streams", tc.args)
				}
				o.Stdin, o.Stdout, o.Stderr = nil, nil, nil
				got = &o
				return exitcode.Status(exitcode.NoInput) // a log could not be read, and explain said so
			})
		}, append([]string{"explain"}, tc.args...)...)
		if r != (result{66, "", ""}) || got == nil || !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("explain %q: %+v, options %+v, want %+v", tc.args, r, got, tc.want)
		}
	}
	// No log: the latest run, as for report.
	t.Chdir(t.TempDir())
	r := gpuguard(t, "explain", "--json")
	if r.code != 66 || r.stderr != "gpuguard explain: no run directory under .gpuguard/runs here, so no latest run; name a run directory, or start one with `gpuguard run -- COMMAND` (.gpuguard/runs is looked for from here up to the repository's root)\n" {
		t.Errorf("no log: %+v", r)
	}
}
