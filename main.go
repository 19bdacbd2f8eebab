// Command gpuguard runs a training command, watches it for out-of-memory
// failures, and relaunches it from its last checkpoint with settings that fit.
//
// This file only wires the command line to the packages that do the work;
// every deferred cleanup lives below Main, so os.Exit is called in one place.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/doctor"
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/explain"
	"github.com/gpuguard/gpuguard/internal/presets"
	"github.com/gpuguard/gpuguard/internal/report"
	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() { os.Exit(Main(os.Args)) }

// Main runs gpuguard with args (args[0] is the program name) and returns the
// process exit status.
func Main(args []string) int {
	return run(args, os.Stdin, os.Stdout, os.Stderr)
}

func run(args []string, stdin, stdout *os.File, stderr io.Writer) int {
	code := 0
	// set records the status an action wants and tells urfave/cli that all is
	// well, so that urfave/cli never calls os.Exit itself.
	set := func(c int) error { code = c; return nil }

	app := &cli.App{
		Name:      "gpuguard",
		Usage:     "run a training job, recover it from out-of-memory failures",
		Version:   version,
		Writer:    stdout,
		ErrWriter: stderr,
		// Errors are mapped to exit codes below, never by urfave/cli.
		ExitErrHandler:         func(*cli.Context, error) {},
		HideHelpCommand:        true,
		UseShortOptionHandling: false,
		Commands: []*cli.Command{
			{
				Name:      "run",
				Usage:     "run a command under gpuguard",
				ArgsUsage: "[flags] -- COMMAND [ARGS...]",
				Description: "Starts COMMAND with allocator settings, shows its output live, keeps a log in the\n" +
					"run directory, and when it dies of out-of-memory applies the policy and relaunches it\n" +
					"from its last checkpoint. Exit status: the command's own, or 128+N when it died of\n" +
					"signal N; gpuguard's own failures: 64 usage, 73 run directory, 78 policy,\n" +
					"126 not executable, 127 not found.",
				Flags: []cli.Flag{
					&cli.StringFlag{Name: "pty", Value: "auto", Usage: "run the command under a pseudo-terminal: auto (when stdout is a terminal), always, never"},
					&cli.StringFlag{Name: "run-dir", Usage: "keep this run's log, events and state in `DIR` (default .gpuguard/runs/<time-id>)", EnvVars: []string{"GPUGUARD_RUN_DIR"}},
					&cli.StringFlag{Name: "policy", Usage: "policy `FILE` or built-in preset name (default: gpuguard.yaml from here up to the repository root)", EnvVars: []string{"GPUGUARD_POLICY"}},
					&cli.StringFlag{Name: "resume-run", Usage: "continue the run kept in `DIR` with the settings that fit"},
					&cli.BoolFlag{Name: "no-env", Usage: "do not add allocator settings to the command's environment"},
					&cli.BoolFlag{Name: "dry-run", Usage: "print the command, environment and derived config the first attempt would get, and what each rule would change; start nothing"},
					&cli.DurationFlag{Name: "grace", Value: 10 * time.Second, Usage: "time the job gets to exit after a stop signal before it is killed"},
				},
				Action: func(c *cli.Context) error {
					argv := c.Args().Slice()
					if len(argv) == 0 {
						fmt.Fprintln(stderr, "gpuguard run: no command given; usage: gpuguard run [flags] -- COMMAND [ARGS...]")
						return set(supervisor.ExitUsage)
					}
					return set(supervisor.Run(supervisor.Config{
						Argv:      argv,
						PTY:       c.String("pty"),
						RunDir:    c.String("run-dir"),
						Policy:    c.String("policy"),
						ResumeRun: c.String("resume-run"),
						NoEnv:     c.Bool("no-env"),
						DryRun:    c.Bool("dry-run"),
						Grace:     c.Duration("grace"),
						Stdin:     stdin,
						Stdout:    stdout,
						Stderr:    stderr,
					}))
				},
			},
			{
				Name:      "explain",
				Usage:     "say what a log shows: out-of-memory kind, phase, numbers, and what to change",
				ArgsUsage: "LOG|RUN_DIR... (- for stdin; a run directory is explained attempt by attempt)",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "json", Usage: "print one JSON object per log (per attempt for a run directory)"},
				},
				Action: func(c *cli.Context) error {
					if c.NArg() == 0 {
						fmt.Fprintln(stderr, "gpuguard explain: no log given; usage: gpuguard explain [--json] LOG|RUN_DIR... (- for stdin)")
						return set(supervisor.ExitUsage)
					}
					err := explain.Command(explain.Options{
						Paths: c.Args().Slice(), JSON: c.Bool("json"),
						Stdin: stdin, Stdout: stdout, Stderr: stderr,
					})
					if err != nil && !exitcode.Silent(err) {
						fmt.Fprintf(stderr, "gpuguard explain: %v\n", err)
					}
					return set(exitcode.Of(err))
				},
			},
			{
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
						fmt.Fprintf(stderr, "gpuguard report: give one run directory%s; usage: gpuguard report [--json] [--plot FILE] RUN_DIR\n", hint)
						return set(supervisor.ExitUsage)
					}
					err := report.Command(report.Options{
						RunDir: c.Args().First(), JSON: c.Bool("json"), Plot: c.String("plot"),
						Stdout: stdout, Stderr: stderr,
					})
					if err != nil && !exitcode.Silent(err) {
						fmt.Fprintf(stderr, "gpuguard report: %v\n", err)
					}
					return set(exitcode.Of(err))
				},
			},
			{
				Name:  "doctor",
				Usage: "check GPUs, who holds their memory, host and cgroup memory, Slurm context, allocator settings",
				Flags: []cli.Flag{
					&cli.BoolFlag{Name: "json", Usage: "print JSON"},
				},
				Action: func(c *cli.Context) error {
					err := doctor.Command(doctor.Options{JSON: c.Bool("json"), Stdout: stdout})
					if err != nil && !exitcode.Silent(err) {
						fmt.Fprintf(stderr, "gpuguard doctor: %v\n", err)
					}
					return set(exitcode.Of(err))
				},
			},
			{
				Name:  "policy",
				Usage: "check, create or list policy files",
				Subcommands: []*cli.Command{
					{
						Name:      "check",
						Usage:     "validate a policy file or preset",
						ArgsUsage: "FILE|PRESET",
						Action: func(c *cli.Context) error {
							if c.NArg() != 1 {
								fmt.Fprintln(stderr, "gpuguard policy check: give one policy file; usage: gpuguard policy check FILE")
								return set(supervisor.ExitUsage)
							}
							return set(presets.Check(c.Args().First(), stdout, stderr))
						},
					},
					{
						Name:      "init",
						Usage:     "print a commented starter policy for a command",
						ArgsUsage: "-- COMMAND [ARGS...]",
						Action: func(c *cli.Context) error {
							return set(presets.Init(c.Args().Slice(), stdout, stderr))
						},
					},
					{
						Name:  "list",
						Usage: "list the built-in presets",
						Action: func(c *cli.Context) error {
							return set(presets.List(stdout))
						},
					},
				},
			},
			{
				Name:  "version",
				Usage: "print gpuguard's version",
				Action: func(c *cli.Context) error {
					fmt.Fprintln(stdout, "gpuguard", version)
					return nil
				},
			},
		},
	}
	if err := app.Run(args); err != nil {
		// Only urfave/cli's own errors reach here (unknown flag, bad value):
		// actions report through set.
		var exitErr cli.ExitCoder
		if errors.As(err, &exitErr) {
			return exitErr.ExitCode()
		}
		fmt.Fprintf(stderr, "gpuguard: %v\n", err)
		return supervisor.ExitUsage
	}
	return code
}
