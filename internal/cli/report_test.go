package cli

import (
	"reflect"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/report"
)

func TestReportArgs(t *testing.T) {
	const usage = "; usage: gpuguard report [--json] [--plot FILE] RUN_DIR\n"
	for _, tc := range []struct {
		args       []string
		want       *report.Options
		wantStderr string
	}{
		{[]string{"rd"}, &report.Options{RunDir: "rd"}, "gpuguard report: rd: no event\n"},
		{[]string{"--json", "--plot", "m.png", "rd"}, &report.Options{RunDir: "rd", JSON: true, Plot: "m.png"}, "gpuguard report: rd: no event\n"},
		{nil, nil, "gpuguard report: give one run directory" + usage},
		{[]string{"a", "b"}, nil, "gpuguard report: give one run directory" + usage},
		{[]string{"rd", "--plot", "m.png"}, nil, "gpuguard report: give one run directory (flags go before RUN_DIR)" + usage},
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
