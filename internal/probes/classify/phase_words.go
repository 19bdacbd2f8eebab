package classify

import "strings"

// The words for phases and kinds, in one place: the classifier's advice, the
// policy's reasons, the sampler's warnings, the report's tables, explain's
// headline and the supervisor's status lines all say a phase or a kind with
// these.

// Words is the phase in a sentence: "training", "validation", a phase a
// policy declared by its name. It is "" for PhaseNone, so that the caller
// says what an unknown phase means where it writes it ("start-up", "no
// phase"), e.g. cmp.Or(p.Words(), "start-up (no phase seen)").
func (p Phase) Words() string {
	switch p {
	case PhaseTrain:
		return "training"
	case PhaseVal:
		return "validation"
	}
	return string(p)
}

// Label is the phase as tables and policy files write it ("train", "val", a
// declared phase's name), and "-" for PhaseNone.
func (p Phase) Label() string {
	if p == PhaseNone {
		return "-"
	}
	return string(p)
}

// Less orders phases as every list of them is shown: train, val, the other
// phases by name (case-insensitively), PhaseNone last.
func (p Phase) Less(q Phase) bool {
	return p.order() < q.order()
}

func (p Phase) order() string {
	switch p {
	case PhaseTrain:
		return "0"
	case PhaseVal:
		return "1"
	case PhaseNone:
		return "3"
	}
	return "2" + strings.ToLower(string(p))
}

// Title is the kind as a headline: "GPU out of memory", "killed for host
// memory", ...; "no failure found" for KindNone and for a kind this version
// does not know.
func (k Kind) Title() string {
	switch k {
	case KindGPUOOM:
		return "GPU out of memory"
	case KindCPUAllocOOM:
		return "host memory allocation failed"
	case KindHostOOM:
		return "killed for host memory"
	case KindCrash:
		return "failed, not for memory"
	case KindHang:
		return "hung: stopped for no progress"
	}
	return "no failure found"
}

// Noun is the kind in a sentence, after "died of": "GPU OOM", "a crash that
// is not memory", ...; "an unrecognised failure" for KindNone and a kind this
// version does not know.
func (k Kind) Noun() string {
	switch k {
	case KindGPUOOM:
		return "GPU OOM"
	case KindCPUAllocOOM:
		return "CPU allocator OOM"
	case KindHostOOM:
		return "host OOM"
	case KindCrash:
		return "a crash that is not memory"
	case KindHang:
		return "a hang (no progress within its rhythm: stopped)"
	}
	return "an unrecognised failure"
}
