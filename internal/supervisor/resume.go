package supervisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuguard/gpuguard/internal/fsutil"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/presets"
	"github.com/gpuguard/gpuguard/internal/probes/slurmenv"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// StateFile is the run directory's record of where the run stands, written
// atomically after every decision, so that `gpuguard run --resume-run DIR`
// (or a Slurm requeue) continues with the settings that fit rather than
// starting again at those that failed. Its schema is record.RunState.
const StateFile = record.State

// derivedDir is the run directory's folder for derived config copies.
const derivedDir = record.Derived

// timelineFile is the run directory's memory timeline.
const timelineFile = record.Timeline

// maxHistory bounds state.json on runs with many relaunches.
const maxHistory = 20

// loadPolicy finds and parses the policy (--policy, a preset, or
// gpuguard.yaml up to the repository root) and reads the knobs' starting
// values from the command. No policy file is fine: the job runs once.
func (l *loop) loadPolicy(status *Status) int {
	name, data, err := presets.Load(l.cfg.Policy, l.wd)
	if err != nil {
		status.Printf("%v", err)
		return ExitConfig
	}
	if data == nil {
		return 0
	}
	pol, err := policy.Parse(name, data)
	if err != nil {
		printErrors(status, err)
		return ExitConfig
	}
	vals, err := pol.Start(l.pjob, os.ReadFile)
	if err != nil {
		printErrors(status, err)
		return ExitConfig
	}
	l.pol = pol
	if n := pol.Notify(); l.cfg.Notify == "" && l.cfg.NotifyCommand == "" { // the flags replace the policy's notify:
		l.cfg.Notify, l.cfg.NotifyCommand = n.URL, n.Command
	}
	l.state = runState{Version: 1, Argv: l.cfg.Argv, Policy: pol.File(), Policies: policy.NewState(vals), Started: l.origin}
	return 0
}

// resolveRunDir decides whether this run continues an earlier one: with
// --resume-run, or under Slurm after a requeue (SLURM_RESTART_COUNT > 0),
// where the run directory is keyed by the job id so that the requeued job
// finds it again.
func (l *loop) resolveRunDir(status *Status) int {
	explicit := l.cfg.ResumeRun != ""
	if l.cfg.ResumeRun == "" && l.cfg.RunDir == "" {
		sc := slurmenv.FromEnv(l.pjob.Env)
		if id := sc.RunID(); id != "" {
			l.cfg.RunDir = filepath.Join(l.wd, ".gpuguard", "runs", "slurm-"+id)
			if sc.Restarts() > 0 {
				if _, err := os.Stat(filepath.Join(l.cfg.RunDir, StateFile)); err == nil {
					l.cfg.ResumeRun, l.cfg.RunDir = l.cfg.RunDir, ""
				}
			}
		}
	}
	if l.cfg.ResumeRun == "" {
		return 0
	}
	data, err := fsutil.ReadFileLimit(filepath.Join(l.cfg.ResumeRun, StateFile), record.MaxStateBytes)
	if err != nil {
		status.Printf("cannot resume: %v (give the directory of an earlier gpuguard run)", err)
		return ExitCantCreate
	}
	var st runState
	if err := json.Unmarshal(data, &st); err != nil || st.Version != 1 {
		status.Printf("cannot resume: %s is not a gpuguard state file (%v); start a new run instead", filepath.Join(l.cfg.ResumeRun, StateFile), err)
		return ExitConfig
	}
	if l.pol == nil {
		status.Printf("cannot resume %s without its policy: pass --policy %s", l.cfg.ResumeRun, st.Policy)
		return ExitConfig
	}
	// The knobs the run learned replace the command's own; knobs the policy
	// no longer has are dropped by Render.
	start := l.state.Policies.Values
	l.state = st
	l.state.Argv = l.cfg.Argv
	l.state.Policy = l.pol.File()
	l.state.Done = false
	for k, v := range start {
		if _, ok := l.state.Policies.Values[k]; !ok {
			l.state.Policies.Values[k] = v
		}
	}
	how := "budgets carried over (Slurm requeue)"
	if explicit {
		how = l.resumeBudgets(st, slurmenv.FromEnv(l.pjob.Env).Restarts() > 0) // budgets.go
	}
	with := describeValues(l.state.Policies.Values)
	if with == "" {
		with = "no knobs"
	}
	status.Printf("resuming run %s at attempt %d with %s (%s)%s", l.cfg.ResumeRun, st.Attempt+1, with, how, carriedText(l.state.Restarts))
	return 0
}

// saveState writes state.json atomically.
func (l *loop) saveState() error {
	if l.pol == nil {
		return nil
	}
	data, err := json.MarshalIndent(l.state, "", "  ")
	if err != nil {
		return err
	}
	if err := l.job.RunDir.WriteFileAtomic(StateFile, append(data, '\n')); err != nil {
		return fmt.Errorf("cannot save %s (a later --resume-run would start from the first settings): %w", StateFile, err)
	}
	return nil
}
