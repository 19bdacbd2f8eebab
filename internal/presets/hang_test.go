package presets

import (
	"testing"
	"time"

	"github.com/gpuguard/gpuguard/internal/policy"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// Every preset ships the hang watchdog on, with limits safe for real jobs
// (an idle job gets at least 10 minutes, a silent working one 2 hours), and
// a hang is resumed: the rule relaunches it.
func TestPresetsShipHangOn(t *testing.T) {
	for _, name := range Names() {
		data, _ := Lookup(name)
		p, err := policy.Parse(PresetPrefix+name, data)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		h, ok := p.Hang()
		if !ok {
			t.Errorf("%s: no hang: section", name)
			continue
		}
		if h.Min < 10*time.Minute || h.Max < 2*time.Hour || h.Factor < 10 {
			t.Errorf("%s: hang %+v is below min 10m, factor 10, max 2h", name, h)
		}
		d := p.Decide(policy.NewState(nil), policy.Outcome{Verdict: classify.Verdict{Kind: classify.KindHang, Phase: classify.PhaseTrain, Stall: "idle"},
			Exit: classify.Exit{Code: 143}, Attempt: 1})
		if d.Verb != policy.Relaunch {
			t.Errorf("%s: an idle hang is not relaunched: %s", name, d.Describe())
		}
	}
}
