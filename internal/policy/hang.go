package policy

import (
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Hang is the policy's hang: section, the stall watchdog's bounds. A job is
// hung when it prints no training step for longer than Factor times its
// usual interval between steps in the phase it is in, never less than Min,
// and at most Max. Where the job has no rhythm yet (start-up, validation,
// checkpoint saving: phases without steps) Max applies.
type Hang struct {
	Min    time.Duration // hang min (default 5m)
	Factor float64       // hang factor (default 10)
	Max    time.Duration // hang max (default 2h)
}

// DefaultHang is the watchdog's bounds where the hang: section leaves a key out.
var DefaultHang = Hang{Min: 5 * time.Minute, Factor: 10, Max: 2 * time.Hour}

// Hang returns the stall watchdog's bounds; ok is false when the policy has
// no hang: section (the watchdog is off).
func (p *Policy) Hang() (h Hang, ok bool) {
	if p.hang == nil {
		return Hang{}, false
	}
	return *p.hang, true
}

// Limit is how long a job may go without a step: Factor times its usual
// interval (0: none known, Max applies), held within Min and Max.
func (h Hang) Limit(usual time.Duration) time.Duration {
	if usual <= 0 {
		return h.Max
	}
	d := time.Duration(h.Factor * float64(usual))
	if d < h.Min || d < 0 {
		d = h.Min
	}
	return min(d, h.Max)
}

// hangSpec reads the hang: section: min and max durations above zero with
// min <= max, and a factor of at least 1.
func (w *walker) hangSpec(n *yaml.Node) *Hang {
	h := DefaultHang
	var minNode, maxNode *yaml.Node
	for _, f := range w.mapping(n, "hang", "min", "factor", "max") {
		switch f.name {
		case "min":
			h.Min, minNode = w.duration(f.val, "hang min"), f.val
			if h.Min == 0 {
				w.at(f.val, "hang min must be above 0")
			}
		case "max":
			h.Max, maxNode = w.duration(f.val, "hang max"), f.val
			if h.Max == 0 {
				w.at(f.val, "hang max must be above 0")
			}
		case "factor":
			h.Factor = w.float(f.val, "hang factor")
			if h.Factor < 1 {
				w.at(f.val, "hang factor must be at least 1 (a stall is longer than the usual interval between steps), not %s", f.val.Value)
			}
		}
	}
	if h.Min > 0 && h.Max > 0 && h.Max < h.Min {
		at := maxNode
		if at == nil {
			at = minNode
		}
		if at == nil {
			at = n
		}
		w.at(at, "hang max (%s) is below min (%s)", h.Max, h.Min)
	}
	return &h
}

// Stalls are the values of a rule's when: stall, what a hung job's
// processes did while it was silent (classify.Verdict.Stall).
var Stalls = []string{"idle", "working", "spinning", "dataloader"}

// stallCond reads when: stall, one of Stalls or a list of them.
func (w *walker) stallCond(n *yaml.Node, what string) []string {
	var out []string
	for _, s := range w.strList(n, what) {
		if !slices.Contains(Stalls, s) {
			w.at(n, "%s: unknown stall %q%s; stalls: %s", what, s, didYouMean(s, Stalls), strings.Join(Stalls, ", "))
		}
		out = append(out, s)
	}
	return out
}
