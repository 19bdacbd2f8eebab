package cli

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/report"
)

func TestReportArgs(t *testing.T) {
	const usage = "; usage: gpuguard report [--json] [--plot FILE] [RUN_DIR|latest]\n"
	for _, tc := range []struct {
		args       []string
		want       *report.Options
		wantStderr string
	}{
		{[]string{"rd"}, &report.Options{RunDir: "rd"}, "gpuguard report: rd: no event\n"},
		{[]string{"--json", "--plot", "m.png", "rd"}, &report.Options{RunDir: "rd", JSON: true, Plot: "m.png"}, "gpuguard report: rd: no event\n"},
		{[]string{"a", "b"}, nil, "gpuguard report: give one run directory" + usage},
		{[]string{"rd", "--plot", "m.png"}, &report.Options{RunDir: "rd", Plot: "m.png"}, "gpuguard report: rd: no event\n"},
		{[]string{"rd", "--json"}, &report.Options{RunDir: "rd", JSON: true}, "gpuguard report: rd: no event\n"},
	} {
		var got *report.Options
		r := gpuguardWith(t, func(s Streams) *cli.Command {
			return newReportCmd(s, func(o report.Options) error {
				if o.Stdout != s.Out || o.Stderr != s.ErrOut {
					t.Errorf("%q: report does not get the streams", tc.args)
				}
				o.Stdout, o.Stderr = nil, nil
				got = &o
				return &exitcode.Error{Code: exitcode.DataErr, Msg: o.RunDir + ": no event"}
			})
		}, append([]string{"report"}, tc.args...)...)
		wantCode := 65
		if tc.want == nil {
			wantCode = 64
		}
		if r.code != wantCode || r.stderr != tc.wantStderr || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("report %q: %+v, options %+v; want exit %d, %q, %+v", tc.args, r, got, wantCode, tc.wantStderr, tc.want)
		}
	}
}

// "latest", or no run directory, is the newest run under .gpuguard/runs.
func TestReportLatest(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	var got []string
	newCmd := func(s Streams) *cli.Command {
		return newReportCmd(s, func(o report.Options) error { got = append(got, o.RunDir); return nil })
	}
	r := gpuguardWith(t, newCmd, "report")
	if r.code != 66 || r.stderr != "gpuguard report: no run directory under .gpuguard/runs here, so no latest run; name a run directory, or start one with `gpuguard run -- COMMAND` (.gpuguard/runs is looked for from here up to the repository's root)\n" {
		t.Errorf("no run: %+v", r)
	}
	for _, name := range []string{"20261125-091500-aaaaaa", "20261125-101500-000000", "20261124-235959-ffffff"} {
		write(t, filepath.Join(dir, ".gpuguard/runs", name, "events.jsonl"), "{}\n")
	}
	for _, args := range [][]string{{"report"}, {"report", "latest"}, {"report", "--json", "latest"}} {
		got = nil
		if r := gpuguardWith(t, newCmd, args...); r.code != 0 || len(got) != 1 || got[0] != ".gpuguard/runs/20261125-101500-000000" {
			t.Errorf("%q: %+v, run dir %q", args, r, got)
		}
	}
}
