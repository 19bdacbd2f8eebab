package supervisor

import (
	"fmt"
	"path/filepath"
	"strings"

	"github.com/gpuguard/gpuguard/internal/envlist"
)

// dryRun prints what the next attempt would get: the command, the
// environment changes, the derived config files, and what each rule would
// change. It starts nothing and writes nothing. The launch is planned by the
// same code as a real attempt's (planLaunch): for a new run, attempt 1 with
// the command's own knob values; with --resume-run, the next attempt of
// that run, with the values it learned and the checkpoint it would resume
// from.
func (l *loop) dryRun(status *Status) int {
	l.status = status
	n, runDir, plan, err := l.nextPlan()
	if err != nil {
		status.Printf("%v", err)
		return ExitConfig
	}
	argv, env, files, notes, merged, ckpt := plan.argv, plan.env, plan.files, plan.notes, plan.alloc, plan.ckpt
	usePTY, err := resolvePTY(l.cfg.PTY, l.cfg.Stdout)
	if err != nil {
		status.Printf("%v", err)
		return exitCodeOf(err)
	}
	w := l.cfg.Stdout
	fmt.Fprintf(w, "dry run: nothing is started\n")
	if n > 1 {
		fmt.Fprintf(w, "attempt %d of run %s\n", n, displayPath(runDir, l.wd))
	}
	fmt.Fprintf(w, "command: %s (%s)\n", quoteArgv(argv), launchName(usePTY))
	if ckpt != "" {
		fmt.Fprintf(w, "resumes from: %s\n", displayPath(ckpt, l.wd))
	}
	if l.pol != nil {
		fmt.Fprintf(w, "policy: %s\n", l.pol.File())
		fmt.Fprintf(w, "knobs: %s\n", describeValues(l.state.Policies.Values))
	} else {
		fmt.Fprintln(w, "policy: none (the job runs once; gpuguard policy init -- COMMAND writes a starter)")
	}
	for _, n := range notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	for _, d := range envDiff(l.userEnv, envlist.Unset(env, envRunDir, envPID, envAttempt)) {
		fmt.Fprintf(w, "env: %s\n", d)
	}
	fmt.Fprintf(w, "env: %s, %s and %s are set for each attempt (the run directory, gpuguard's pid, the attempt)\n", envRunDir, envPID, envAttempt)
	for _, warn := range merged.Warnings {
		fmt.Fprintf(w, "warning: %s\n", warn)
	}
	for _, f := range files {
		fmt.Fprintf(w, "derived config %s (from %s):\n", f.Path, f.Source)
		for _, line := range strings.Split(strings.TrimRight(string(f.Data), "\n"), "\n") {
			fmt.Fprintf(w, "  | %s\n", line)
		}
	}
	if l.pol != nil {
		fmt.Fprintln(w, "on failure, the rules would change:")
		for _, p := range l.pol.Preview(l.state.Policies.Values) {
			fmt.Fprintf(w, "  %s\n", p)
		}
		if spec := l.pol.Checkpoint(); len(spec.Globs) > 0 {
			fmt.Fprintf(w, "checkpoints: %s (pass: %s)\n", strings.Join(spec.Globs, ", "), orNone(spec.Pass))
			if exp, err := spec.Expand(l.state.Policies.Values); err == nil {
				if g := UnmatchedGlobs(exp.Globs, l.wd); len(g) > 0 {
					fmt.Fprintln(w, UnmatchedGlobWarning(g))
				}
			}
		}
	}
	return 0
}

// nextPlan plans the attempt a dry run shows: attempt n of the run in
// runDir (a placeholder for a new run, whose directory does not exist yet).
func (l *loop) nextPlan() (n int, runDir string, p launchPlan, err error) {
	n, runDir, ckpt := 1, filepath.Join(l.wd, ".gpuguard", "runs", "<run>"), ""
	if l.cfg.ResumeRun != "" {
		n, runDir = l.state.Attempt+1, l.cfg.ResumeRun
		if l.expandSpec() {
			ckpt = l.latestCheckpoint(false)
		}
	}
	p, err = l.plan(n, ckpt, runDir)
	return n, runDir, p, err
}
