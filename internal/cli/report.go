package cli

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/report"
)

const reportUsage = "gpuguard report [--json] [--plot FILE] [RUN_DIR|latest]"

// newReportCmd is `gpuguard report [--json] [--plot FILE] [RUN_DIR|latest]`.
// Without a run directory, or with "latest", it reports the newest run under
// .gpuguard/runs. runF does the work; nil means report.Command.
func newReportCmd(s Streams, runF func(report.Options) error) *cli.Command {
	if runF == nil {
		runF = report.Command
	}
	return &cli.Command{
		Name:      "report",
		Usage:     "summarise a run directory (default: the latest run): attempts, verdicts, memory peaks, and a plot",
		UsageText: reportUsage,
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print JSON"},
			&cli.StringFlag{Name: "plot", Usage: "draw memory against time into `FILE` (.png or .svg)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() > 1 {
				return usageError("give one run directory; usage: %s", reportUsage)
			}
			wd, _ := os.Getwd()
			dir, above, err := resolveRun(c.Args().First(), wd)
			if err != nil {
				return err
			}
			if above {
				sayFound(s.ErrOut, "report", "latest run", dir)
			}
			return runF(report.Options{
				RunDir: dir, JSON: c.Bool("json"), Plot: c.String("plot"),
				Stdout: s.stdout(), Stderr: s.ErrOut,
			})
		},
	}
}
