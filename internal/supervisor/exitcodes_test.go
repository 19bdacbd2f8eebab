package supervisor

import (
	"testing"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Which give-ups a scheduler's retry may help (exitcodes.go).
func TestClassifyGiveUp(t *testing.T) {
	for _, c := range []struct {
		v      classify.Verdict
		budget bool
		want   giveUp
	}{
		{classify.Verdict{Kind: classify.KindGPUOOM}, false, giveUpCannotHelp},
		{classify.Verdict{Kind: classify.KindGPUOOM}, true, giveUpMayHelp},
		{classify.Verdict{Kind: classify.KindCrash, Reason: "CUDA illegal memory access"}, false, giveUpCannotHelp},
		{classify.Verdict{Kind: classify.KindNone}, false, giveUpCannotHelp},
		{classify.Verdict{Kind: classify.KindHang}, false, giveUpMayHelp},
		{classify.Verdict{Kind: classify.KindCrash, Reason: "NCCL timeout", Machine: true}, false, giveUpMayHelp},
	} {
		if got := classifyGiveUp(c.v, c.budget); got != c.want {
			t.Errorf("%+v (budget spent %v): %d, want %d", c.v, c.budget, got, c.want)
		}
	}
}
