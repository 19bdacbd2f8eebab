package policy

import (
	"cmp"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// fitAction is `fit: knob`: after an out-of-memory error it sets the knob
// (a batch size, a crop size) to the value that the figures say fits,
// instead of halving and trying again. With figures it cannot use it acts
// like halve, and says so.
//
// The figures: the error's total, free and requested memory (classify.OOM),
// what was in use when the failing phase began (Outcome.Starts: the fixed
// part) and the phase's measured peak (Outcome.Peaks), and the run's
// earlier failures (State.Seen). estimate says how they are read.
//
// The new value is rounded down to a whole number and to multiple_of, held
// within min and max; compensate keeps the effective batch as halve does.
type fitAction struct {
	knob string
	actionOptions
}

const defaultHeadroom = 0.10

func parseFit(w *walker, in actionInput) action {
	a := &fitAction{knob: w.knobRef(in.verb.val, in.what+": fit", in.p), actionOptions: in.opts}
	if a.min != nil && a.max != nil && *a.min > *a.max {
		w.at(in.verb.key, "%s: min %g is above max %g", in.what, *a.min, *a.max)
	}
	if a.compensate != "" && a.compensate == a.knob {
		w.at(in.verb.key, "%s: a knob cannot compensate itself", in.what)
	}
	if a.headroom == nil {
		h := defaultHeadroom
		a.headroom = &h
	}
	return a
}

func (a *fitAction) verb() string      { return "fit" }
func (a *fitAction) envVars() []string { return nil }

func (a *fitAction) numericKnobs() []string {
	if a.compensate != "" {
		return []string{a.knob, a.compensate}
	}
	return []string{a.knob}
}

// fitFigures are one failed attempt's memory figures, in bytes: the
// ceiling (the device's total), what was in use when the failing request
// was made, the request, what was in use when the failing phase began (0:
// unknown) and the phase's measured peak (0: unknown).
type fitFigures struct {
	total, inUse, req, start, peak float64
	from                           string // where the ceiling comes from, for host memory ("RLIMIT_DATA"); "" for the GPU
}

// of is the ceiling in words: "4.00 GiB" or "4.00 GiB of RLIMIT_DATA".
func (f fitFigures) of() string {
	if f.from == "" {
		return humanize.Size(int64(f.total))
	}
	return humanize.Size(int64(f.total)) + " of " + f.from
}

// figuresOf reads the figures of out, or says why they cannot be used.
func figuresOf(out *Outcome) (fitFigures, string) {
	if out == nil {
		return fitFigures{}, "no out-of-memory figures yet"
	}
	o := out.Verdict.OOM
	if f, ok := hostFigures(out); ok {
		return f, ""
	}
	if o == nil || o.TotalBytes == nil || o.RequestedBytes == nil || *o.TotalBytes <= 0 || *o.RequestedBytes <= 0 {
		if k := out.Verdict.Kind; k == classify.KindCPUAllocOOM || k == classify.KindHostOOM {
			return fitFigures{}, "no host memory ceiling was found (no RLIMIT_DATA or RLIMIT_AS, memory cgroup limit or Slurm --mem below the machine's RAM) and no phase's use of it measured"
		}
		return fitFigures{}, "the error gave no total and requested memory"
	}
	f := fitFigures{total: float64(*o.TotalBytes), req: float64(*o.RequestedBytes)}
	switch {
	case o.FreeBytes != nil:
		f.inUse = f.total - float64(*o.FreeBytes)
	case o.InUseBytes != nil:
		f.inUse = float64(*o.InUseBytes)
	case o.AllocatedBytes != nil:
		f.inUse = float64(*o.AllocatedBytes)
		if o.ReservedUnallocatedBytes != nil {
			f.inUse += float64(*o.ReservedUnallocatedBytes)
		}
	default:
		return fitFigures{}, "the error gave neither free nor allocated memory"
	}
	ph := out.Verdict.Phase
	if s := out.Starts[ph]; s > 0 && s < 1 {
		f.start = s * f.total
	}
	if pk := out.Peaks[ph]; pk > 0 {
		f.peak = pk * f.total
	}
	return f, ""
}

// hostFigures are the figures of a host or CPU-allocator OOM: the ceiling
// that applies to the job (Outcome.Host: an rlimit, the memory cgroup's
// limit, Slurm's --mem), the request the allocator's message gave (none
// for a kill), what was in use at the last reading before the failure, and
// the failing phase's first and highest readings, all counted as the
// ceiling counts. false when there is no ceiling or no reading of the
// failing phase.
func hostFigures(out *Outcome) (fitFigures, bool) {
	h, k := out.Host, out.Verdict.Kind
	if h == nil || h.Ceiling <= 0 || k != classify.KindCPUAllocOOM && k != classify.KindHostOOM {
		return fitFigures{}, false
	}
	ph := out.Verdict.Phase
	f := fitFigures{total: float64(h.Ceiling), from: h.CeilingFrom, inUse: float64(h.Last),
		start: float64(h.Starts[ph]), peak: float64(h.Peaks[ph])}
	if o := out.Verdict.OOM; o != nil && o.RequestedBytes != nil && *o.RequestedBytes > 0 {
		f.req = float64(*o.RequestedBytes)
	}
	if f.inUse <= 0 {
		f.inUse = f.peak
	}
	if f.inUse <= 0 || f.req <= 0 && f.peak <= 0 {
		return fitFigures{}, false
	}
	if f.req <= 0 && k == classify.KindHostOOM {
		// A kill gives no request: the job died at the ceiling, so the
		// growth seen runs up to it.
		f.peak = max(f.peak, f.total)
	}
	return f, true
}

// FitSeen is what one failed attempt's figures said about the memory its
// failing phase needed, kept in the State so that fit can combine the
// attempts of a run: at Values (the numeric knobs' values then), the phase
// needed at least Need bytes of Total, of which Fixed (0: unknown) were in
// use when the phase began.
type FitSeen struct {
	Attempt int               `json:"attempt"`
	Phase   classify.Phase    `json:"phase"`
	Values  map[string]string `json:"values"`
	Total   int64             `json:"total"`
	Need    int64             `json:"need"`
	Fixed   int64             `json:"fixed,omitempty"`
}

// maxFitSeen bounds the history a State keeps.
const maxFitSeen = 8

// fitSeen is the record Decide keeps of out (false without usable figures).
func (p *Policy) fitSeen(vals Values, out *Outcome) (FitSeen, bool) {
	f, why := figuresOf(out)
	if why != "" {
		return FitSeen{}, false
	}
	s := FitSeen{Attempt: out.Attempt, Phase: out.Verdict.Phase, Values: map[string]string{},
		Total: int64(f.total), Need: int64(math.Max(f.inUse+f.req, f.peak)), Fixed: int64(f.start)}
	for _, k := range p.knobs {
		if v, ok := vals[k.name]; ok && !v.Null {
			if _, err := strconv.ParseFloat(v.Text, 64); err == nil {
				s.Values[k.name] = v.Text
			}
		}
	}
	return s, true
}

// estimate is the value the figures of out say fits, unrounded, and the
// figures it used in words; or why the figures cannot be used.
//
// At value v the failing phase needed at least N = M + R: what was in use
// when the failing request was made, and the request (or the phase's
// measured peak, when higher). An out-of-memory error always comes near the
// ceiling, so N alone says little; what matters is how N splits into a
// fixed part and a part that grows with the knob, and how much of the
// step's growth came before the failing request:
//
//   - The fixed part F is what was in use when the phase began (the
//     sampler's first sample of the phase: weights, CUDA context, and the
//     optimizer states once made). The growth seen is N − F, a lower bound
//     of what the step adds at v: allocations after the failing one are not
//     seen.
//   - When the failing request is at least half of that growth, it is the
//     step's one large allocation (logits, a feature map): the growth is
//     known, and the estimate is the value whose F + growth stays under the
//     ceiling less the headroom, even above half.
//   - When it is one of a series (a layer's activations), what follows it
//     is unknown, and the figures only bound the value from above (all
//     that was seen counted as all that grows). fit then halves the memory
//     the knob drives, as a blind retry would, unless even the bound is
//     lower. (Reading the series as half seen, or the bound as the
//     estimate, was measured worse: docs/performance.md.)
//   - When the torch probe saw the failure in a forward with grad, at
//     block k (0-based) of L repeated blocks (Outcome.Block), the forward
//     keeps each block's activations for the backward pass, so the growth
//     seen covers about (k+1)/L of the forward's: the step's growth is
//     taken as seen·L/(k+1) (the end of the forward is the step's peak:
//     backward frees activations as it makes gradients), and the estimate
//     is the value whose fixed part + growth stays under the ceiling less
//     the headroom. It is never above the bound (all seen counted as all
//     that grows), and anything in the growth seen that does not grow with
//     the knob (optimizer states made after the phase began) is scaled up
//     with it, which errs towards the smaller value. In backward, or in a
//     forward without grad (whose blocks free what the one before held),
//     the position says nothing of what is to come.
//   - Earlier attempts of the run that failed in the same phase at other
//     values (State.Seen) each give a line through (0, F) and (value,
//     need): fit keeps the steepest, and the largest fixed part.
//
// Without the phase's start the fixed part is unknown, and fit reads the
// error's figures alone (estimateNoStart).
func (a *fitAction) estimate(out *Outcome, v float64) (float64, string, string) {
	f, why := figuresOf(out)
	if why != "" {
		return 0, "", why
	}
	ceiling := f.total * (1 - *a.headroom)
	need := f.inUse + f.req
	used := "in use"
	if f.peak > need {
		need, used = f.peak, "the measured peak"
	}
	under := fmt.Sprintf("the %s ceiling (%s less %s headroom)", humanize.Size(int64(ceiling)), f.of(), pct(*a.headroom))
	val := formatNumber(v, v == math.Trunc(v))
	if need <= ceiling {
		return 0, "", fmt.Sprintf("%s needed at least %s, within %s: the figures do not explain the failure", val, humanize.Size(int64(need)), under)
	}
	// On the host the phase's first reading may be its last before the
	// failure (the first step's request failed): what grew is the request.
	if f.start <= 0 || f.from == "" && f.start >= f.inUse || f.start >= need {
		return a.estimateNoStart(out, f, v)
	}
	units, per := a.units(v), "per unit"
	if a.scaling == "quadratic" {
		per = "per unit²"
	}
	fixed := f.start
	seen := need - fixed
	series := f.req < seen/2
	slope := seen / units
	bound := a.root((ceiling - fixed) / slope)
	b := out.Block
	blocks := series && b != nil && !b.Backward && !b.NoGrad && b.Of >= 2 && b.Index >= 0 && b.Index < b.Of
	if blocks {
		slope = seen * float64(b.Of) / float64(b.Index+1) / units
	}
	figures := fmt.Sprintf("%s needed at least %s (%s + the %s request), over %s; %s of it in use when %s began (fixed), %s grew with %s",
		val, humanize.Size(int64(need)), used, humanize.Size(int64(f.req)), under,
		humanize.Size(int64(fixed)), cmp.Or(string(out.Verdict.Phase), "the phase"), humanize.Size(int64(seen)), a.knob)
	for _, s := range out.seen {
		sv, err := strconv.ParseFloat(s.Values[a.knob], 64)
		if err != nil || s.Phase != out.Verdict.Phase || s.Fixed <= 0 || sv <= 0 || sv == v || s.Attempt >= out.Attempt {
			continue
		}
		if sl := float64(s.Need-s.Fixed) / a.units(sv); sl > slope {
			slope = sl
			figures += fmt.Sprintf("; attempt %d at %s needed %s over its %s fixed, a steeper line", s.Attempt, s.Values[a.knob], humanize.Size(s.Need), humanize.Size(s.Fixed))
		}
		fixed = math.Max(fixed, float64(s.Fixed))
	}
	if fixed >= ceiling {
		return v / 2, figures + "; the fixed part alone is over the ceiling: taking half the value", ""
	}
	next := a.root((ceiling - fixed) / slope)
	figures += fmt.Sprintf("; ~%s %s", humanize.Bytes(uint64(slope)), per)
	if blocks {
		next = math.Min(next, bound)
		return next, figures + fmt.Sprintf("; block %d of %d in forward: what grew so far is about %d/%d of the forward's activations, so the step grows by ~%s: taking %s, the largest whose estimate stays under the ceiling (at most %s counting only what was seen)",
			b.Index+1, b.Of, b.Index+1, b.Of, humanize.Size(int64(seen*float64(b.Of)/float64(b.Index+1))), formatNumber(math.Floor(next+1e-9), true), formatNumber(math.Floor(bound+1e-9), true)), ""
	}
	if !series {
		return next, figures + fmt.Sprintf("; the failing request is most of that growth, so the step's growth is known: taking %s, the largest whose estimate stays under the ceiling", formatNumber(math.Floor(next), true)), ""
	}
	// The failing request is one of a series (a layer's activations) seen
	// only in part: what follows it is unknown, and an out-of-memory error
	// always comes near the ceiling, so the figures say only that nothing
	// above the estimate can fit. fit then halves the memory the knob
	// drives, as a blind retry would, unless even that is above the
	// estimate.
	half := a.root(units / 2)
	if next < half {
		return next, figures + fmt.Sprintf("; the %s request is one of several, and even counting only what was seen, no more than %s fits: taking it", humanize.Size(int64(f.req)), formatNumber(math.Floor(next), true)), ""
	}
	return half, figures + fmt.Sprintf("; the %s request is one of several and what follows it is unknown, so that only bounds the value (at most %s): taking %s, half the memory %s drives",
		humanize.Size(int64(f.req)), formatNumber(math.Floor(next), true), formatNumber(math.Floor(half), true), a.knob), ""
}

func (a *fitAction) units(v float64) float64 {
	if a.scaling == "quadratic" {
		return v * v
	}
	return v
}

func (a *fitAction) root(x float64) float64 {
	if a.scaling == "quadratic" {
		return math.Sqrt(x)
	}
	return x
}

// estimateNoStart is the estimate from the error's figures alone, when the
// phase's start was not measured (no GPU sampling). Two readings bound the
// value. If all of N grows with the knob (no fixed part), the largest value
// is v·C/N (v·√(C/N) with quadratic scaling); any fixed part only lowers
// it, so nothing above it can fit: this is the upper bound. If all of M is
// fixed and the request alone grows with the knob, the largest value is
// (C − M)/(R/v): the reading with the largest fixed part, so the smaller
// estimate, unless the step allocates more after the failing request. fit
// takes that estimate, but not below half the value (the reading is
// pessimistic when several allocations before the request grew with the
// knob too, and halving is what a blind retry would do) unless the request
// is at least all that PyTorch had allocated (then no allocation like it
// came before, and what was in use is mostly fixed), and never above the
// upper bound.
func (a *fitAction) estimateNoStart(out *Outcome, f fitFigures, v float64) (float64, string, string) {
	o := out.Verdict.OOM
	total, req, inUse := f.total, f.req, f.inUse
	used := "in use"
	if f.peak > inUse {
		inUse, used = f.peak, "in use at the measured peak"
	}
	ceiling := total * (1 - *a.headroom)
	need := inUse + req
	under := fmt.Sprintf("the %s ceiling (%s less %s headroom)", humanize.Size(int64(ceiling)), f.of(), pct(*a.headroom))
	figures := fmt.Sprintf("%s needed at least %s (%s %s + the %s request), over %s",
		formatNumber(v, v == math.Trunc(v)), humanize.Size(int64(need)), humanize.Size(int64(inUse)), used, humanize.Size(int64(req)), under)
	units, per := a.units(v), "per unit"
	if a.scaling == "quadratic" {
		per = "per unit²"
	}
	upper := v * a.root(ceiling/need)
	next := v / 2
	why := "half the value: the figures say no more"
	if inUse < ceiling {
		perUnit := req / units
		fixed := a.root((ceiling - inUse) / perUnit)
		figures += fmt.Sprintf("; ~%s if what was in use is fixed and the request grows by ~%s %s", formatNumber(math.Floor(fixed), true), humanize.Bytes(uint64(perUnit)), per)
		// A request at least as large as all PyTorch held before it cannot
		// have been preceded by another like it: what was in use is then
		// mostly fixed, and the estimate is taken even below half.
		big := o != nil && o.AllocatedBytes != nil && req >= float64(*o.AllocatedBytes)
		switch {
		case fixed > next:
			next, why = fixed, "that estimate"
		case big:
			next, why = fixed, "that estimate: the request is larger than all PyTorch had allocated, so little of what was in use grows with "+a.knob
		default:
			why = "half the value: that estimate is lower, and pessimistic when more than the request grows with " + a.knob
		}
	}
	figures += fmt.Sprintf("; at most %s if all of it grows with %s", formatNumber(math.Floor(upper), true), a.knob)
	if upper < next {
		next, why = upper, "the most"
	}
	return next, figures + "; taking " + why, ""
}

func pct(f float64) string {
	return strconv.FormatFloat(f*100, 'f', -1, 64) + "%"
}

// apply sets the knob to the estimate, or halves it when the figures are
// unusable; the first change's Note says which, and with what figures.
func (a *fitAction) apply(p *Policy, vals Values, out *Outcome) ([]Change, string) {
	n, why := positiveValue(p, vals, a.knob)
	if why != "" {
		return nil, why
	}
	cur := vals[a.knob]
	next, figures, why := a.estimate(out, n.f)
	note := "fit: " + figures
	if why != "" {
		next, note = n.f/2, "fit: halving, the figures are unusable: "+why
	} else if s, ok := a.failedBefore(out, n.f); ok && next > n.f/2 {
		// The figures are a lower bound (what was in use when one request
		// failed): a value they said fits has failed in this phase, so
		// they under-estimate this job's need, and fit moves at least as
		// far as halving would.
		next = n.f / 2
		note += fmt.Sprintf("; but attempt %d failed in %s at %s, and %s, reduced from it, failed too: the figures under-estimate the need, so taking half, as halving would",
			s.Attempt, cmp.Or(string(out.Verdict.Phase), "the same phase"), s.Values[a.knob], vals[a.knob].Text)
	}
	if n.isInt {
		next = math.Floor(next + 1e-9)
		if a.multipleOf > 1 {
			next = roundTo(next, float64(a.multipleOf), "down")
		}
	}
	lo := math.Inf(-1)
	if a.min != nil {
		lo = *a.min
	} else if n.isInt {
		lo = 1
	}
	hi := math.Inf(1)
	if a.max != nil {
		hi = *a.max
	}
	switch {
	case n.f <= lo:
		if n.f < lo {
			return nil, fmt.Sprintf("%s is %s, already below min %s", a.knob, cur.Text, formatNumber(lo, n.isInt))
		}
		return nil, fmt.Sprintf("%s is %s, at its floor (min %s)", a.knob, cur.Text, formatNumber(lo, n.isInt))
	case next < lo:
		next = lo
		note += fmt.Sprintf("; held at min %s", formatNumber(lo, n.isInt))
	case next > hi:
		next = hi
	}
	if next >= n.f {
		return nil, fmt.Sprintf("%s is %s, and the fit rounds back to it", a.knob, cur.Text)
	}
	changes, why := a.change(p, vals, a.knob, cur, n, next)
	if why != "" {
		return nil, why
	}
	changes[0].Note = note
	return changes, ""
}

// failedBefore finds an earlier failure in the same phase at a larger value
// of the knob: the value now was reached by reducing it, and failed again.
func (a *fitAction) failedBefore(out *Outcome, v float64) (FitSeen, bool) {
	for _, s := range out.seen {
		sv, err := strconv.ParseFloat(s.Values[a.knob], 64)
		if err == nil && s.Phase == out.Verdict.Phase && s.Attempt < out.Attempt && sv > v {
			return s, true
		}
	}
	return FitSeen{}, false
}

// readHeadroom reads headroom: a fraction of the ceiling kept free, 0.1 or
// "10%", in [0, 0.9].
func (w *walker) readHeadroom(f field, what string, o *actionOptions) {
	s, ok := w.scalar(f.val, what+": headroom")
	if !ok {
		return
	}
	var h float64
	var err error
	if p, isPct := strings.CutSuffix(strings.TrimSpace(s), "%"); isPct {
		h, err = strconv.ParseFloat(strings.TrimSpace(p), 64)
		h /= 100
	} else if f.val.Tag == "!!int" || f.val.Tag == "!!float" {
		h, err = strconv.ParseFloat(s, 64)
	} else {
		err = fmt.Errorf("not a number")
	}
	if err != nil || !(h >= 0 && h <= 0.9) {
		w.at(f.val, "%s: headroom must be the fraction of GPU memory to keep free, from 0 to 0.9, such as 0.1 or \"10%%\", not %q", what, s)
		return
	}
	o.headroom = &h
}
