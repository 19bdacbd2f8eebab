package supervisor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/torchprobe"
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

// The main rank's phases, as the probe reports them, drive the sampler;
// another rank's do not, nor does a phase the probe does not know.
func TestProbePhaseDrivesTheSampler(t *testing.T) {
	s := memory.NewSampler(memory.SamplerConfig{})
	rd, err := createRunDir(filepath.Join(t.TempDir(), "run"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	w := &probeWatch{n: 1, rd: rd, sampler: s}
	one := 1
	for _, c := range []struct {
		r    torchprobe.Record
		want classify.Phase
	}{
		{torchprobe.Record{Kind: torchprobe.KindPhase, Phase: "train", How: "train()"}, classify.PhaseTrain},
		{torchprobe.Record{Kind: torchprobe.KindPhase, Phase: "val", Rank: &one, How: "eval()"}, classify.PhaseTrain},
		{torchprobe.Record{Kind: torchprobe.KindPhase, Phase: "val", How: "eval()"}, classify.PhaseVal},
		{torchprobe.Record{Kind: torchprobe.KindPhase, Phase: "", How: "?"}, classify.PhaseVal},
	} {
		w.record(c.r)
		if got := s.Phase(); got != c.want {
			t.Errorf("after %+v the sampler samples in %q, want %q", c.r, got, c.want)
		}
	}
	if !w.drivesPhase() {
		t.Error("the probe's phases do not drive the sampler")
	}
}
