package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/doctor"
	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/supervisor"
)

// newRunCmd is `gpuguard run [flags] -- COMMAND [ARGS...]`. runF does the
// work; nil means runRun.
func newRunCmd(s Streams, runF func(supervisor.Config) error) *cli.Command {
	if runF == nil {
		runF = runRun
	}
	return &cli.Command{
		Name:      "run",
		Usage:     "run a command under gpuguard",
		UsageText: "gpuguard run [flags] -- COMMAND [ARGS...]",
		Description: "Starts COMMAND with allocator settings, shows its output live, keeps a log in the\n" +
			"run directory, and when it dies of out-of-memory applies the policy and relaunches it\n" +
			"from its last checkpoint. Exit status: the command's own, or 128+N when it died of\n" +
			"signal N; gpuguard's own failures: 64 usage, 70 internal error, 73 run directory, 78 policy,\n" +
			"76 a --group peer lost, 126 not executable, 127 not found. With --exit-codes scheduler, a run that gives up\n" +
			"exits 75 when a retry may help and 79 when it cannot.",
		Flags: runFlags(),
		Action: func(c *cli.Context) error {
			return runAction(c, s, runF)
		},
	}
}

// runFlags are run's flags.
func runFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "pty", Value: "auto", Usage: "run the command under a pseudo-terminal: auto (when stdout is a terminal), always, never"},
		&cli.StringFlag{Name: "run-dir", Usage: "keep this run's log, events and state in `DIR` (default .gpuguard/runs/<time-id>)", EnvVars: []string{"GPUGUARD_RUN_DIR"}},
		&cli.StringFlag{Name: "policy", Usage: "policy `FILE` or built-in preset name (default: gpuguard.yaml from here up to the repository root)", EnvVars: []string{"GPUGUARD_POLICY"}},
		&cli.StringFlag{Name: "resume-run", Usage: "continue the run kept in `DIR` with the settings that fit; the command is the run's own when none is given"},
		&cli.BoolFlag{Name: "resume-finished", Usage: "with --resume-run: continue a run that has ended (by default only a run that did not end is continued)"},
		&cli.BoolFlag{Name: "quiet", Aliases: []string{"q"}, Usage: "print no start lines (run directory, allocator settings); failures, decisions and warnings are still said"},
		&cli.BoolFlag{Name: "no-env", Usage: "do not add allocator settings to the command's environment"},
		&cli.StringFlag{Name: "probe", Usage: "put a probe inside the job: `torch` reports phases, steps, memory and where an out-of-memory error was raised from inside PyTorch (docs/probe.md)"},
		&cli.BoolFlag{Name: "memo", Usage: "start from the knob values that fitted the last run of this command on this device, and remember them after a run that relaunched (the policy's memo: true; kept in the user's cache directory)"},
		&cli.BoolFlag{Name: "no-memo", Usage: "ignore the memo for this run: start from the command's own values, remember nothing"},
		&cli.BoolFlag{Name: "dry-run", Usage: "print the command, environment and derived config the first attempt would get, and what each rule would change; start nothing"},
		&cli.DurationFlag{Name: "grace", Value: 10 * time.Second, Usage: "time the job gets to exit after a stop signal before it is killed"},
		&cli.StringFlag{Name: "notify", Usage: "POST a JSON document to `URL` at the run's start, each relaunch, give-up and the run's end (docs/notify.md)", EnvVars: []string{"GPUGUARD_NOTIFY"}},
		&cli.StringFlag{Name: "notify-command", Usage: "run `CMD` (sh -c) with the same JSON on stdin, for mail, chat or a pager", EnvVars: []string{"GPUGUARD_NOTIFY_COMMAND"}},
		&cli.StringFlag{Name: "exit-codes", Usage: "`MODE` job: exit with the job's status; scheduler: after giving up, 75 when a retry may help, 79 when it cannot (README); default: the policy's exit_codes, else job", EnvVars: []string{"GPUGUARD_EXIT_CODES"}},
		&cli.StringFlag{Name: "group", Usage: "decide as one with the gpuguards of the job's other nodes (docs/slurm.md): `WHERE` is the leader's HOST:PORT (rank 0 listens on its port), or a directory every node sees (the leader writes its address there); auto (the default) forms the group of a Slurm step's tasks (SLURM_PROCID, SLURM_NTASKS) through the run directories' folder; off: decide alone", EnvVars: []string{"GPUGUARD_GROUP"}},
		&cli.IntFlag{Name: "group-rank", DefaultText: "torchrun's --node-rank (--node_rank) in the command, else SLURM_PROCID", Usage: "this gpuguard's `RANK` in the group; 0 leads"},
		&cli.IntFlag{Name: "group-size", DefaultText: "torchrun's --nnodes in the command, else SLURM_NTASKS", Usage: "how many gpuguards (`N`, the leader included) form the group"},
		&cli.DurationFlag{Name: "group-timeout", Value: 60 * time.Second, Usage: "how long the group waits for a peer that does not answer (joining, a lost leader or member); then the run gives up with exit status 76"},
		&cli.StringFlag{Name: "metrics-file", Usage: "also keep the run's Prometheus metrics in `PATH` (for node_exporter's textfile collector)", EnvVars: []string{"GPUGUARD_METRICS_FILE"}},
	}
}

// runAction checks the flags, finds the command (the run's own with
// --resume-run) and the run directory, says what the job should know before
// it starts, and runs it.
func runAction(c *cli.Context, s Streams, runF func(supervisor.Config) error) error {
	wd, _ := os.Getwd()
	if err := checkRunFlags(c); err != nil {
		return err
	}
	argv, err := runArgv(c, s.ErrOut, wd)
	if err != nil {
		return err
	}
	runDir, resume := c.String("run-dir"), c.String("resume-run")
	if runDir != "" && resume == "" && !c.Bool("dry-run") {
		if err := checkNewRunDir(runDir); err != nil {
			return err
		}
	}
	if !c.Bool("no-env") {
		// What doctor finds wrong (78) is said before the job starts:
		// PyTorch refuses the whole variable at its first allocation.
		for _, p := range doctor.AllocConfProblems(os.Environ()) {
			fmt.Fprintf(s.ErrOut, "gpuguard: warning: %s (gpuguard doctor says the same); fix the variable, or the job will fail\n", p)
		}
	}
	if !c.Bool("dry-run") && resume == "" && runDir == "" && os.Getenv("SLURM_JOB_ID") == "" {
		if runDir, err = projectRunDir(wd); err != nil {
			return &exitcode.Error{Code: exitcode.CantCreate, Err: err}
		}
	}
	if c.String("policy") == "" && !c.Bool("quiet") {
		if p := projectPolicy(wd); p != "" && filepath.Dir(p) != "." {
			sayFound(s.ErrOut, "run", "policy", p)
		}
	}
	cfg, err := runConfig(c, s, argv, runDir)
	if err != nil {
		return err
	}
	err = runF(cfg)
	if st := exitcode.Of(err); err != nil && !gpuguardStatus[st] {
		if h := misplacedFlagHint(argv, c.Command); h != "" {
			fmt.Fprintln(s.ErrOut, h)
		}
	}
	return err
}

// checkRunFlags refuses the flags' values that cannot be: an unknown
// choice, a negative duration.
func checkRunFlags(c *cli.Context) error {
	if err := checkChoice("pty", c.String("pty"), "auto", "always", "never"); err != nil {
		return err
	}
	if pr := c.String("probe"); pr != "" && pr != "torch" {
		return usageError("unknown probe %q (there is one: torch)", pr)
	}
	if ec := c.String("exit-codes"); ec != "" {
		if err := checkChoice("exit-codes", ec, policy.ExitCodeModes...); err != nil {
			return err
		}
	}
	if err := supervisor.CheckExitCodes(c.String("exit-codes")); err != nil {
		return err
	}
	// A negative duration would be taken for the default further
	// down (the watchdog's 10 s): it is refused here.
	for _, f := range []struct{ name, def string }{{"grace", "10s"}, {"group-timeout", "60s"}} {
		if d := c.Duration(f.name); d < 0 {
			return usageError("--%s %s: a duration must not be negative; give one such as %s (the default)", f.name, d, f.def)
		}
	}
	return nil
}

// runArgv is the job's command: the arguments, or with --resume-run the
// run's own when none are given.
func runArgv(c *cli.Context, errOut io.Writer, wd string) ([]string, error) {
	argv := c.Args().Slice()
	resume := c.String("resume-run")
	if c.Bool("resume-finished") && resume == "" {
		return nil, usageError("--resume-finished goes with --resume-run DIR")
	}
	if resume != "" {
		var err error
		if argv, err = resumeCommand(errOut, resume, argv, c.String("policy"), wd, c.Bool("resume-finished")); err != nil {
			return nil, err
		}
	}
	if len(argv) == 0 {
		return nil, usageError("no command given; usage: gpuguard run [flags] -- COMMAND [ARGS...]")
	}
	return argv, nil
}

// runConfig is the supervisor's configuration from the flags.
func runConfig(c *cli.Context, s Streams, argv []string, runDir string) (supervisor.Config, error) {
	memo := ""
	switch {
	case c.Bool("memo") && c.Bool("no-memo"):
		return supervisor.Config{}, usageError("--memo and --no-memo contradict each other; give one")
	case c.Bool("memo"):
		memo = "on"
	case c.Bool("no-memo"):
		memo = "off"
	}
	var rank, size *int
	if c.IsSet("group-rank") {
		v := c.Int("group-rank")
		rank = &v
	}
	if c.IsSet("group-size") {
		v := c.Int("group-size")
		size = &v
	}
	var groupTimeout time.Duration
	if c.IsSet("group-timeout") {
		groupTimeout = c.Duration("group-timeout")
	}
	return supervisor.Config{
		Argv:      argv,
		Quiet:     c.Bool("quiet"),
		PTY:       c.String("pty"),
		RunDir:    runDir,
		Policy:    c.String("policy"),
		ResumeRun: c.String("resume-run"),
		NoEnv:     c.Bool("no-env"),
		Probe:     c.String("probe"),
		DryRun:    c.Bool("dry-run"),
		Memo:      memo,
		Grace:     c.Duration("grace"),
		Stdin:     s.In,
		Stdout:    s.Out,
		Stderr:    s.ErrOut,

		Notify:        c.String("notify"),
		NotifyCommand: c.String("notify-command"),
		MetricsFile:   c.String("metrics-file"),

		Group:        c.String("group"),
		GroupRank:    rank,
		GroupSize:    size,
		GroupTimeout: groupTimeout,
		ExitCodes:    c.String("exit-codes"),
	}, nil
}

// gpuguardStatus are the statuses of gpuguard's own failures, where the
// job did not run (or not as the command line said).
var gpuguardStatus = map[int]bool{exitcode.Usage: true, exitcode.Software: true, exitcode.CantCreate: true,
	exitcode.GroupLost: true, exitcode.Config: true}

// runRun supervises the job. The supervisor says itself what went wrong,
// so its status is returned with nothing more to print: the job's own
// status, or one of gpuguard's (see the README's table).
func runRun(cfg supervisor.Config) error {
	return exitcode.Status(supervisor.Run(cfg))
}
