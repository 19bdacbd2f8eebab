package supervisor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/policy"
)

// Without --probe nothing of the probe is in the plan; with it the probe's
// directory comes first on PYTHONPATH, before the user's entries.
func TestPlanProbe(t *testing.T) {
	in := planInput{job: policy.Job{Argv: []string{"python", "t.py"}, Env: []string{"PYTHONPATH=/u"}}, noEnv: true, runDir: "/r", attempt: 2}
	p, err := planLaunch(in)
	if err != nil {
		t.Fatal(err)
	}
	if envlist.Get(p.env, "PYTHONPATH") != "/u" || p.probeRecords != "" || strings.Contains(strings.Join(p.env, "\n"), "GPUGUARD_PROBE") {
		t.Fatalf("without --probe: %q", p.env)
	}
	in.probe = "torch"
	if p, err = planLaunch(in); err != nil {
		t.Fatal(err)
	}
	site, rec := filepath.Join("/r", "probe", "site"), filepath.Join("/r", "probe", "attempt-2")
	if envlist.Get(p.env, "PYTHONPATH") != site+":/u" || envlist.Get(p.env, "GPUGUARD_PROBE_DIR") != rec ||
		p.probeSite != site || p.probeRecords != rec {
		t.Fatalf("with --probe torch: %q", p.env)
	}
}
