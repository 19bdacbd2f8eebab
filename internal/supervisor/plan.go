package supervisor

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/gpuguard/gpuguard/internal/envinject"
	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/torchprobe"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// The launch plan: what one attempt is started with. Every attempt, the
// first and each relaunch, and `--dry-run` get their command, environment
// and derived config copies from planLaunch, so that a dry run shows what a
// relaunch with the same knob values really gets.

// Environment variables gpuguard sets in every attempt's environment, so that
// `gpuguard doctor` can tell which run a GPU-holding process belongs to.
const (
	envRunDir  = record.EnvRunDir
	envPID     = record.EnvPID
	envAttempt = record.EnvAttempt
)

// planInput is what a launch plan is computed from.
type planInput struct {
	pol     *policy.Policy // nil: the user's command and environment as they are
	job     policy.Job     // the user's command, environment and directory
	values  policy.Values  // the knob values to launch with
	ckpt    string         // the checkpoint to resume from; "" for none
	attempt int
	noEnv   bool   // --no-env: no allocator settings
	probe   string // --probe: "torch" or "" (none: nothing of it in the environment)

	// runDir is the run directory; derived configs go under it. The
	// gpuguard variables name it and gpuguardPID.
	runDir      string
	gpuguardPID int
	readFile    policy.FileReader
}

// launchPlan is one attempt's launch.
type launchPlan struct {
	argv  []string
	env   []string             // complete: the user's, knob values, allocator settings, gpuguard's own
	files []policy.DerivedFile // derived configs to write before the start
	notes []string             // how the command differs from the user's, in words
	alloc envinject.Result     // what the allocator defaults changed
	ckpt  string

	// --probe torch: the probe's Python files (first on PYTHONPATH) and
	// where the attempt's processes write their records; "" without it.
	probeSite, probeRecords string
}

// attemptDerivedDir is where attempt n's derived config copies go.
func attemptDerivedDir(runDir string, n int) string {
	return filepath.Join(runDir, derivedDir, fmt.Sprintf("attempt-%d", n))
}

// planLaunch computes an attempt's launch: the policy renders the knob
// values into the command, its environment and derived config copies
// (pointing the command at them) and passes the checkpoint; then the
// allocator defaults are merged into the user's settings, and gpuguard's
// own variables are set. It writes nothing: see writeDerived.
func planLaunch(in planInput) (launchPlan, error) {
	p := launchPlan{argv: in.job.Argv, env: in.job.Env, ckpt: in.ckpt}
	if in.pol != nil {
		launch, err := in.pol.Render(in.job, in.values, in.ckpt, attemptDerivedDir(in.runDir, in.attempt), in.readFile)
		if err != nil {
			return launchPlan{}, err
		}
		p.argv, p.env, p.files, p.notes = launch.Argv, launch.Env, launch.Files, launch.Notes
	}
	if !in.noEnv {
		merged, err := mergeAlloc(p.env)
		if err != nil {
			return launchPlan{}, err
		}
		p.env, p.alloc = merged.Env, merged
	}
	p.env = envlist.Set(p.env, envRunDir, in.runDir)
	p.env = envlist.Set(p.env, envPID, strconv.Itoa(in.gpuguardPID))
	p.env = envlist.Set(p.env, envAttempt, strconv.Itoa(in.attempt))
	if in.probe != "" {
		p.probeSite, p.probeRecords = torchprobe.Dirs(in.runDir, in.attempt)
		p.env = torchprobe.Env(p.env, p.probeSite, p.probeRecords)
	}
	return p, nil
}

// writeFiles writes the plan's derived config copies.
func (p launchPlan) writeFiles() error {
	for _, f := range p.files {
		if err := writeDerived(f); err != nil {
			return err
		}
	}
	return nil
}

// writeDerived writes a derived config copy. It refuses to write over the
// user's own file whatever the policy computed.
func writeDerived(f policy.DerivedFile) error {
	if f.Source != "" && sameFilePath(f.Path, f.Source) {
		return fmt.Errorf("derived config %s would overwrite the user's file %s", f.Path, f.Source)
	}
	if err := os.MkdirAll(filepath.Dir(f.Path), 0o755); err != nil {
		return fmt.Errorf("cannot write the derived config: %w", err)
	}
	if err := os.WriteFile(f.Path, f.Data, 0o644); err != nil {
		return fmt.Errorf("cannot write the derived config: %w", err)
	}
	return nil
}

func sameFilePath(a, b string) bool {
	ia, err1 := os.Stat(a)
	ib, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(ia, ib)
}

// mergeAlloc merges gpuguard's allocator defaults into env: once into
// gpuguard's own environment (newLoop), and into each attempt's after the
// policy set its knobs there (planLaunch).
func mergeAlloc(env []string) (envinject.Result, error) {
	return envinject.Merge(env, envinject.Defaults(), false)
}
