package policy

import (
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// BenchmarkParse measures reading a policy file of realistic size.
func BenchmarkParse(b *testing.B) {
	for b.Loop() {
		if _, err := Parse("p.yaml", []byte(fullPolicy)); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecideRender measures one decision after an OOM plus the
// relaunch command with a derived config, the policy's whole share of the
// time between two attempts.
func BenchmarkDecideRender(b *testing.B) {
	p := mustParse(b, fullPolicy)
	fsys := files{"/w/c.yaml": []byte(strings.Replace(cfgYAML, "VAL_CROP_SIZE: 512", "VAL_CROP_SIZE: null", 1))}
	job := Job{Argv: []string{"py", "t.py", "--batch-size", "64", "--config", "c.yaml"}, Dir: "/w"}
	vals, err := p.Start(job, fsys.read)
	if err != nil {
		b.Fatal(err)
	}
	out := Outcome{Attempt: 1, Exit: classify.Exit{Code: 1}, Verdict: classify.Verdict{Kind: classify.KindGPUOOM, Phase: classify.PhaseVal}, Rand: 0.5}
	for b.Loop() {
		d := p.Decide(NewState(vals), out)
		if d.Verb != Relaunch {
			b.Fatal(d.Reason)
		}
		if _, err := p.Render(job, d.State.Values, "/ck", "/d", fsys.read); err != nil {
			b.Fatal(err)
		}
	}
}
