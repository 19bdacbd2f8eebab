package cli

import (
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/report"
)

// newReportCmd is `gpuguard report [--json] [--plot FILE] RUN_DIR`. runF
// does the work; nil means report.Command.
func newReportCmd(s Streams, runF func(report.Options) error) *cli.Command {
	if runF == nil {
		runF = report.Command
	}
	return &cli.Command{
		Name:      "report",
		Usage:     "summarise a run directory: attempts, verdicts, memory peaks, and a plot",
		ArgsUsage: "RUN_DIR",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.StringFlag{Name: "plot", Usage: "draw memory against time into `FILE` (.png or .svg)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() != 1 {
				hint := ""
				if c.NArg() > 1 && strings.HasPrefix(c.Args().Get(1), "-") {
					hint = " (flags go before RUN_DIR)"
				}
				return usageError("give one run directory%s; usage: gpuguard report [--json] [--plot FILE] RUN_DIR", hint)
			}
			return runF(report.Options{
				RunDir: c.Args().First(), JSON: c.Bool("json"), Plot: c.String("plot"),
				Stdout: s.Out, Stderr: s.ErrOut,
			})
		},
	}
}
