package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/gpuguard/gpuguard/internal/exitcode"
	"github.com/gpuguard/gpuguard/internal/fsutil"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/presets"
	"github.com/gpuguard/gpuguard/internal/redact"
	"github.com/gpuguard/gpuguard/internal/rundir"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// checkChoice refuses a value of an enumerated flag that is not one of
// choices, naming the nearest.
func checkChoice(flag, value string, choices ...string) error {
	if slices.Contains(choices, value) {
		return nil
	}
	return usageError("--%s %q is not one of %s%s", flag, value, strings.Join(choices, ", "), policy.DidYouMean(value, choices))
}

// checkNewRunDir refuses a --run-dir that already holds a run
// (rundir.CheckNew): a new run never appends to an earlier one. A Slurm job
// requeued onto its own run directory (SLURM_RESTART_COUNT > 0) continues
// it, as before.
func checkNewRunDir(dir string) error {
	n := os.Getenv("SLURM_RESTART_COUNT")
	err := rundir.CheckNew(dir, n != "" && n != "0")
	var held *rundir.HeldError
	if !errors.As(err, &held) {
		return err
	}
	return &exitcode.Error{Code: exitcode.CantCreate, Msg: fmt.Sprintf(
		"--run-dir %s already holds a run (%s): a new run never appends to one; give a new directory, leave --run-dir out (a new one under %s), or continue that run with --resume-run %s",
		held.Dir, held.File, runsDir, held.Dir)}
}

// projectRunDir is where a run started in wd keeps its records when the
// project's runs are above wd (projectRunsDir, or the folder of the
// project's policy): a new directory there (rundir.NewPath), relative to
// wd. It is "" when the runs are kept in wd itself, as the supervisor does
// by default.
func projectRunDir(wd string) (string, error) {
	root := projectRunsDir(wd)
	if sameDir(root, wd) {
		if p := projectPolicy(wd); p != "" {
			root = filepath.Join(wd, filepath.Dir(p))
		}
	}
	if sameDir(root, wd) {
		return "", nil
	}
	p, err := rundir.NewPath(root)
	if err != nil {
		return "", err
	}
	return relTo(wd, p), nil
}

// resumeCommand is the command `run --resume-run DIR` runs: argv when one
// is given (what differs from the run's own is said on w), else the run's
// own from its state.json, unless that holds a masked secret. A run that
// finished (its job exited 0) is continued only when finished allows it; a
// run that gave up is what --resume-run is for.
func resumeCommand(w io.Writer, dir string, argv []string, policyArg, wd string, finished bool) ([]string, error) {
	if rundir.Live(dir) && len(argv) > 0 {
		return argv, nil // the run refuses it, naming the gpuguard that holds it
	}
	path := filepath.Join(dir, record.State)
	data, err := fsutil.ReadFileLimit(path, record.MaxStateBytes)
	var st record.RunState[policy.State]
	if err == nil {
		err = json.Unmarshal(data, &st)
	}
	if err != nil || st.Version != 1 {
		if len(argv) > 0 {
			return argv, nil // the run says what is wrong with DIR
		}
		return nil, usageError("no command given, and none to take from %s (%s cannot be read); give the command after --", dir, path)
	}
	if st.Done && st.ExitCode == 0 && !finished {
		return nil, &exitcode.Error{Code: exitcode.CantCreate, Msg: fmt.Sprintf(
			"%s has finished: its job exited 0, there is nothing to resume; start a new run, or give --resume-finished to run it again from where it ended", dir)}
	}
	saved := []string(st.Argv)
	if len(argv) == 0 {
		if slices.ContainsFunc(saved, func(w string) bool { return strings.Contains(w, redact.Mask) }) {
			return nil, usageError("the command saved in %s has a secret masked (%s), so it cannot be run again from there: give the command after --, e.g. gpuguard run --resume-run %s -- %s",
				path, redact.Mask, dir, strings.Join(saved, " "))
		}
		if len(saved) == 0 {
			return nil, usageError("%s holds no command: give it after --", path)
		}
		fmt.Fprintf(w, "gpuguard run: resuming with the run's own command: %s\n", strings.Join(saved, " "))
		return saved, nil
	}
	if d := argvDiff(saved, redact.Argv(argv)); d != "" {
		fmt.Fprintf(w, "gpuguard run: the command differs from the run's (%s): %s\n", path, d)
	}
	for _, line := range knobOverrides(st, argv, policyArg, wd) {
		fmt.Fprintf(w, "gpuguard run: %s\n", line)
	}
	return argv, nil
}

// argvDiff says which words of now differ from saved, or "".
func argvDiff(saved, now []string) string {
	if slices.Equal(saved, now) {
		return ""
	}
	var gone, added []string
	for _, w := range saved {
		if !slices.Contains(now, w) {
			gone = append(gone, w)
		}
	}
	for _, w := range now {
		if !slices.Contains(saved, w) {
			added = append(added, w)
		}
	}
	switch {
	case len(gone) == 0 && len(added) == 0:
		return "the same words in another order"
	case len(gone) == 0:
		return "adds " + strings.Join(added, " ")
	case len(added) == 0:
		return "leaves out " + strings.Join(gone, " ")
	}
	return "has " + strings.Join(added, " ") + " where the run had " + strings.Join(gone, " ")
}

// knobOverrides are the knobs whose value the run learned replaces the
// command's own, one sentence each: the resumed run starts from the
// learned value, and says so.
func knobOverrides(st record.RunState[policy.State], argv []string, policyArg, wd string) []string {
	name, data, err := presets.Load(policyArg, wd)
	if err != nil || data == nil {
		return nil // the supervisor says what is wrong with the policy
	}
	p, err := policy.Parse(name, data)
	if err != nil {
		return nil
	}
	vals, err := p.Start(policy.Job{Argv: argv, Env: os.Environ(), Dir: wd}, os.ReadFile)
	if err != nil {
		return nil
	}
	var out []string
	for _, k := range p.Knobs() {
		learned, ok := st.Policies.Values[k]
		cmd, given := vals[k]
		if ok && given && learned.String() != cmd.String() {
			out = append(out, fmt.Sprintf("%s: the run's %s replaces the command's %s (the value the run reached); to start from %s, start a new run without --resume-run",
				k, learned, cmd, cmd))
		}
	}
	return out
}

// misplacedFlagHint is the hint for a job that failed with one of run's own
// flags among its arguments (`gpuguard run python3 train.py --dry-run`):
// every word after the job's first is the job's, so the flag went to it.
func misplacedFlagHint(argv []string, cmd *cli.Command) string {
	if len(argv) < 2 {
		return ""
	}
	specs := flagSpecs(cmd)
	for _, a := range argv[1:] {
		if !strings.HasPrefix(a, "--") || a == "--" {
			continue
		}
		name, _, _ := strings.Cut(a[2:], "=")
		if _, ok := specs[name]; ok && name != "help" {
			return fmt.Sprintf("gpuguard run: hint: %s went to the job, as every word after the job's first does; if it was meant for gpuguard, put it before the command: gpuguard run %s -- %s ...", a, a, argv[0])
		}
	}
	return ""
}
