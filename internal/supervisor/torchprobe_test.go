package supervisor

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gpuguard/gpuguard/internal/envlist"
	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
	"github.com/gpuguard/gpuguard/internal/probes/torchprobe"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
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
	var phased atomic.Bool
	w := &probeWatch{n: 1, rd: rd, sampler: s, phased: &phased}
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
	if !phased.Load() {
		t.Error("the probe's phases do not drive the sampler")
	}
}

// The probe's place of an OOM (its block among the model's repeated blocks,
// its pass, whether grad was on) goes into the attempt's site and from
// there to fit, when the site is of the phase the verdict names.
func TestProbeBlockReachesThePolicy(t *testing.T) {
	rd, err := createRunDir(filepath.Join(t.TempDir(), "run"), "")
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var errb bytes.Buffer
	w := &probeWatch{n: 1, rd: rd, sampler: memory.NewSampler(memory.SamplerConfig{}), status: newStatus(io.Discard, &errb), phased: new(atomic.Bool)}
	yes, no := true, false
	w.record(torchprobe.Record{Kind: torchprobe.KindOOM, Phase: "train", Step: 2, Pass: "forward", Module: "LLM.layers.5.mlp.2",
		Grad: &yes, Block: &torchprobe.Block{Container: "layers", Index: 5, Of: 8}})
	site := w.oomSite()
	if site == nil || site.Block == nil || *site.Block != (record.ProbeBlock{Container: "layers", Index: 5, Of: 8}) || site.Grad == nil || !*site.Grad {
		t.Fatalf("site %+v", site)
	}
	if !strings.Contains(errb.String(), "torch probe: out of memory in the forward of LLM.layers.5.mlp.2 (train, step 2, block 6 of 8 in layers)\n") {
		t.Errorf("status lines %q", errb.String())
	}
	if b := oomBlock(site, classify.PhaseTrain); b == nil || *b != (policy.OOMBlock{Index: 5, Of: 8}) {
		t.Errorf("train: %+v", b)
	}
	if b := oomBlock(site, classify.PhaseVal); b != nil {
		t.Errorf("a site of another phase than the verdict's: %+v", b)
	}
	back := *site
	back.Pass, back.Grad = "backward", &yes
	if b := oomBlock(&back, classify.PhaseTrain); b == nil || !b.Backward {
		t.Errorf("backward: %+v", b)
	}
	val := *site
	val.Phase, val.Grad = "val", &no
	if b := oomBlock(&val, classify.PhaseVal); b == nil || !b.NoGrad || b.Backward {
		t.Errorf("no grad: %+v", b)
	}
	flat := *site
	flat.Block = nil
	if b := oomBlock(&flat, classify.PhaseTrain); b != nil || oomBlock(nil, classify.PhaseTrain) != nil {
		t.Errorf("no block: %+v", b)
	}
}
