package cli

import (
	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/explain"
)

// newExplainCmd is `gpuguard explain [--json] LOG|RUN_DIR...`. runF does the
// work; nil means explain.Command.
func newExplainCmd(s Streams, runF func(explain.Options) error) *cli.Command {
	if runF == nil {
		runF = explain.Command
	}
	return &cli.Command{
		Name:      "explain",
		Usage:     "say what a log shows: out-of-memory kind, phase, numbers, and what to change",
		ArgsUsage: "LOG|RUN_DIR... (- for stdin; a run directory is explained attempt by attempt)",
		Flags: []cli.Flag{
			&cli.BoolFlag{Name: "json", Usage: "print one JSON object per log (per attempt for a run directory)"},
		},
		Action: func(c *cli.Context) error {
			if c.NArg() == 0 {
				return usageError("no log given; usage: gpuguard explain [--json] LOG|RUN_DIR... (- for stdin)")
			}
			return runF(explain.Options{
				Paths: c.Args().Slice(), JSON: c.Bool("json"),
				Stdin: s.In, Stdout: s.Out, Stderr: s.ErrOut,
			})
		},
	}
}
