package cli

import (
	"os"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/explain"
)

// newExplainCmd is `gpuguard explain [--json] LOG|RUN_DIR|latest...`
// ("latest" is the newest run under .gpuguard/runs). runF does the
// work; nil means explain.Command.
func newExplainCmd(s Streams, runF func(explain.Options) error) *cli.Command {
	if runF == nil {
		runF = explain.Command
	}
	return &cli.Command{
		Name:      "explain",
		Usage:     "say what a log shows: out-of-memory kind, phase, numbers, and what to change",
		UsageText: "gpuguard explain [--json] [LOG|RUN_DIR|latest...] (default: the latest run; - for stdin; a run directory, or a console log holding gpuguard's lines, is explained attempt by attempt)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per log (per attempt for a run directory)"},
		},
		Action: func(c *cli.Context) error {
			paths := c.Args().Slice()
			if len(paths) == 0 {
				// Like report: no argument is the latest run.
				paths = []string{Latest}
			}
			wd, _ := os.Getwd()
			for i, p := range paths {
				if p == Latest {
					dir, above, err := resolveRun(p, wd)
					if err != nil {
						return err
					}
					if above {
						sayFound(s.ErrOut, "explain", "latest run", dir)
					}
					paths[i] = dir
				}
			}
			return runF(explain.Options{
				Paths: paths, JSON: c.Bool("json"),
				Stdin: s.In, Stdout: s.stdout(), Stderr: s.ErrOut,
			})
		},
	}
}
