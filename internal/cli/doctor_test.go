package cli

import (
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/doctor"
	"github.com/gpuguard/gpuguard/internal/exitcode"
)

func TestDoctorFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		json bool
	}{
		{nil, false},
		{[]string{"--json"}, true},
	} {
		var got *doctor.Options
		r := gpuguardWith(t, func(s Streams) *cli.Command {
			return newDoctorCmd(s, func(o doctor.Options) error {
				if o.Stdout != s.Out {
					t.Errorf("%q: doctor does not get stdout", tc.args)
				}
				got = &o
				return exitcode.Status(exitcode.Busy) // a GPU is taken, and doctor said so
			})
		}, append([]string{"doctor"}, tc.args...)...)
		if r != (result{1, "", ""}) || got == nil || got.JSON != tc.json {
			t.Errorf("doctor %q: %+v, options %+v", tc.args, r, got)
		}
	}
}
