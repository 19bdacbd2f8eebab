package policy

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/gpuguard/gpuguard/internal/humanize"
)

// fitAction is `fit: knob`: after an out-of-memory error it sets the knob
// (a batch size, a crop size) to the largest value that the error's figures
// say fits, instead of halving and trying again. With figures it cannot use
// it acts like halve, and says so.
//
// The figures: the device's total memory T, its free memory F and the
// failing request R (classify.OOM), and the attempt's measured peak in the
// failing phase (Outcome.Peaks). What was in use before the request, M = T
// − F (or the measured peak when higher), is counted as the fixed part, and
// the request as what the current value v needs beyond it: R/v per unit
// (R/v² with scaling: quadratic, for a crop size). Of every straight line
// through the point the figures give, this one has the largest fixed part,
// so the value it chooses errs towards the smaller one. It cannot see the
// allocations the step makes after the failing one: when the next attempt
// fails again, fit reads that attempt's figures.
//
// The new value is the largest whose estimate stays under the ceiling T
// less headroom (default 10%), rounded down to a whole number and to
// multiple_of, held within min and max; compensate keeps the effective
// batch as halve does.
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

// estimate is the value the figures of out say fits, unrounded, and the
// figures it used in words; or why the figures cannot be used.
//
// At value v the step needed at least N = M + R: what was in use before the
// failing request, and the request. Two readings bound what fits under the
// ceiling C. If all of N grows with the knob (no fixed part), the largest
// value is v·C/N (v·√(C/N) with quadratic scaling); any fixed part only
// lowers it, so nothing above it can fit: this is the upper bound. If all
// of M is fixed and the request alone grows with the knob, the largest
// value is (C − M)/(R/v): the reading with the largest fixed part, so the
// smaller estimate, unless the step allocates more after the failing
// request. fit takes that estimate, but not below half the value (the
// reading is pessimistic when several allocations before the request grew
// with the knob too, and halving is what a blind retry would do) unless the
// request is at least all that PyTorch had allocated (then no allocation
// like it came before, and what was in use is mostly fixed), and never
// above the upper bound.
func (a *fitAction) estimate(out *Outcome, v float64) (float64, string, string) {
	if out == nil {
		return 0, "", "no out-of-memory figures yet"
	}
	o := out.Verdict.OOM
	if o == nil || o.TotalBytes == nil || o.RequestedBytes == nil || *o.TotalBytes <= 0 || *o.RequestedBytes <= 0 {
		return 0, "", "the error gave no total and requested memory"
	}
	total, req := float64(*o.TotalBytes), float64(*o.RequestedBytes)
	var inUse float64
	switch {
	case o.FreeBytes != nil:
		inUse = total - float64(*o.FreeBytes)
	case o.InUseBytes != nil:
		inUse = float64(*o.InUseBytes)
	case o.AllocatedBytes != nil:
		inUse = float64(*o.AllocatedBytes)
		if o.ReservedUnallocatedBytes != nil {
			inUse += float64(*o.ReservedUnallocatedBytes)
		}
	default:
		return 0, "", "the error gave neither free nor allocated memory"
	}
	used := "in use"
	if pk := out.Peaks[out.Verdict.Phase]; pk > 0 && pk*total > inUse {
		inUse, used = pk*total, "in use at the measured peak"
	}
	ceiling := total * (1 - *a.headroom)
	need := inUse + req
	under := fmt.Sprintf("the %s ceiling (%s less %s headroom)", humanize.Size(int64(ceiling)), humanize.Size(int64(total)), pct(*a.headroom))
	figures := fmt.Sprintf("%s needed at least %s (%s %s + the %s request), over %s",
		formatNumber(v, v == math.Trunc(v)), humanize.Size(int64(need)), humanize.Size(int64(inUse)), used, humanize.Size(int64(req)), under)
	if need <= ceiling {
		return 0, "", fmt.Sprintf("%s needed at least %s, within %s: the figures do not explain the failure", formatNumber(v, v == math.Trunc(v)), humanize.Size(int64(need)), under)
	}
	root := func(x float64) float64 {
		if a.scaling == "quadratic" {
			return math.Sqrt(x)
		}
		return x
	}
	units, per := v, "per unit"
	if a.scaling == "quadratic" {
		units, per = v*v, "per unit²"
	}
	upper := v * root(ceiling/need)
	next := v / 2
	why := "half the value: the figures say no more"
	if inUse < ceiling {
		perUnit := req / units
		fixed := root((ceiling - inUse) / perUnit)
		figures += fmt.Sprintf("; ~%s if what was in use is fixed and the request grows by ~%s %s", formatNumber(math.Floor(fixed), true), humanize.Bytes(uint64(perUnit)), per)
		// A request at least as large as all PyTorch held before it cannot
		// have been preceded by another like it: what was in use is then
		// mostly fixed, and the estimate is taken even below half.
		big := o.AllocatedBytes != nil && req >= float64(*o.AllocatedBytes)
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
