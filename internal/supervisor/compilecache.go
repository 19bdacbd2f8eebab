package supervisor

import (
	"os"
	"path/filepath"
	"strings"

	"github.com/gpuguard/gpuguard/internal/envlist"
)

// Compile caches kept across relaunches. torch.compile (Inductor) and
// Triton cache what they compile under /tmp by default: a relaunch on the
// same machine finds it only if /tmp survived, and under Slurm /tmp is
// often per job, so a requeued job compiles from scratch again, minutes
// each time. Where the job does not set them, gpuguard points
// TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR at a directory under the
// run directory, which every attempt, a requeue and --resume-run share. A
// setting of the job's own is left alone.

// compileCaches are the variables and the directory under the run
// directory each gets.
var compileCaches = []struct{ env, dir string }{
	{"TORCHINDUCTOR_CACHE_DIR", "compile-cache/inductor"},
	{"TRITON_CACHE_DIR", "compile-cache/triton"},
}

// keepCompileCaches sets the compile cache variables the job leaves unset
// in the environment every attempt starts from, and says so. It is called
// once, from register, when relaunches can happen (a policy) and the
// environment is gpuguard's to add to (no --no-env).
func (l *loop) keepCompileCaches() {
	if l.pol == nil || l.cfg.NoEnv {
		return
	}
	var set []string
	for _, c := range compileCaches {
		if _, ok := envlist.Lookup(l.pjob.Env, c.env); ok {
			continue
		}
		dir := filepath.Join(l.job.RunDir.Path(), c.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			l.job.Status.Printf("compile cache: cannot create %s (%v): %s left to its default", dir, err, c.env)
			continue
		}
		l.pjob.Env = envlist.Set(l.pjob.Env, c.env, dir)
		set = append(set, c.env)
	}
	if len(set) > 0 {
		l.job.Status.Printf("compile caches kept across relaunches: %s %s into the run directory's compile-cache/ (set them yourself to choose another place)",
			strings.Join(set, " and "), plural(len(set), "points", "point"))
	}
}
