package cli

import (
	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/doctor"
)

// newDoctorCmd is `gpuguard doctor [--json]`. runF does the work; nil means
// doctor.Command.
func newDoctorCmd(s Streams, runF func(doctor.Options) error) *cli.Command {
	if runF == nil {
		runF = doctor.Command
	}
	return &cli.Command{
		Name:      "doctor",
		UsageText: "gpuguard doctor [--json]",
		Usage:     "check GPUs, who holds their memory, host and cgroup memory, Slurm context, allocator settings",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
		},
		Action: func(c *cli.Context) error {
			return runF(doctor.Options{JSON: c.Bool("json"), Stdout: s.stdout()})
		},
	}
}
