package supervisor

import (
	"fmt"

	"github.com/gpuguard/gpuguard/internal/envinject"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
)

// gpuguard adds expandable_segments:True to PYTORCH_CUDA_ALLOC_CONF, which
// PyTorch knows from 2.1 on. An older one refuses the whole variable at its
// first CUDA allocation ("Unrecognized CachingAllocator option:
// expandable_segments") and the job dies before it trains. That failure is
// gpuguard's own doing, not the job's: the attempt is run again, once,
// without gpuguard's allocator settings (as --no-env would have), and the
// user is told. An option the user set themselves is theirs to fix: the run
// goes on to the policy, which sees a crash.

// allocRetryHook relaunches without gpuguard's allocator settings when an
// attempt died because its PyTorch refused one of them. Registered when
// gpuguard sets allocator settings and runs alone (a group's nodes must
// relaunch alike).
type allocRetryHook struct{ l *loop }

func (h allocRetryHook) settle(o *outcome) (int, action) {
	if o.terminated || o.res.Code == 0 || !h.l.dropRefusedDefaults(o.n, o.v) {
		return 0, goOn
	}
	o.row.decision = "relaunch without gpuguard's allocator settings"
	h.l.rows = append(h.l.rows, o.row)
	return 0, relaunch
}

// dropRefusedDefaults relaunches without gpuguard's allocator settings when
// attempt n died because its PyTorch refused one of them; it reports
// whether it did (the caller then starts the next attempt).
func (l *loop) dropRefusedDefaults(n int, v classify.Verdict) bool {
	opt := v.RefusedAllocOption
	if opt == "" || l.cfg.NoEnv || !addedByGpuguard(l.alloc, opt) {
		return false
	}
	l.cfg.NoEnv = true
	l.pjob.Env = l.userEnv
	msg := fmt.Sprintf("attempt %d: this PyTorch does not know the allocator option %s, which gpuguard added to the job's allocator settings (PyTorch before 2.1 has no expandable_segments): relaunching without gpuguard's allocator settings (--no-env does so from the start)", n, opt)
	l.job.Status.Printf("%s", msg)
	l.job.RunDir.Write(record.Warning{Attempt: n, Kind: record.WarnAllocOption, Message: msg})
	return true
}

// addedByGpuguard reports whether gpuguard's allocator defaults added opt
// (m: what they changed in gpuguard's environment) rather than kept the
// user's own value of it.
func addedByGpuguard(m envinject.Result, opt string) bool {
	for _, c := range m.Changes {
		if c.Option == opt && c.Old == "" && c.From == "" {
			return true
		}
	}
	return false
}
