package policy

import (
	"fmt"
	"math"
)

// scaleAction is `halve: knob`, `scale: knob` with `by:`, and
// `cut_workers: knob` (a halve with a floor of 0, for DataLoader workers): it
// multiplies a knob's number by a factor, and acts unless the result is the
// old value (its floor or ceiling) or the value is not a positive number.
// With compensate it also changes a second knob so that their product, the
// effective batch, stays as it is.
type scaleAction struct {
	name string // halve, scale or cut_workers
	knob string
	actionOptions
}

func parseHalve(w *walker, in actionInput) action {
	return w.readScale(in, func(a *scaleAction) { a.by = 0.5 })
}

func parseScale(w *walker, in actionInput) action {
	return w.readScale(in, func(a *scaleAction) {
		if !in.has("by") {
			w.at(in.verb.key, "%s: scale needs by: (the factor, e.g. 0.75)", in.what)
		}
	})
}

func parseCutWorkers(w *walker, in actionInput) action {
	return w.readScale(in, func(a *scaleAction) {
		a.by = 0.5
		if a.min == nil {
			zero := 0.0
			a.min = &zero
		}
	})
}

// readScale reads what the scaling verbs share: the knob and the options.
// setup fills in what the verb itself decides (its factor, its floor) before
// the options are checked against each other.
func (w *walker) readScale(in actionInput, setup func(a *scaleAction)) *scaleAction {
	a := &scaleAction{
		name:          in.verb.name,
		knob:          w.knobRef(in.verb.val, in.what+": "+in.verb.name, in.p),
		actionOptions: in.opts,
	}
	setup(a)
	if a.min != nil && a.max != nil && *a.min > *a.max {
		w.at(in.verb.key, "%s: min %g is above max %g", in.what, *a.min, *a.max)
	}
	if a.compensate != "" && a.compensate == a.knob {
		w.at(in.verb.key, "%s: a knob cannot compensate itself", in.what)
	}
	return a
}

func (a *scaleAction) verb() string      { return a.name }
func (a *scaleAction) envVars() []string { return nil }

// numericKnobs are the knob and the one that compensates it.
func (a *scaleAction) numericKnobs() []string {
	var out []string
	for _, name := range []string{a.knob, a.compensate} {
		if name != "" {
			out = append(out, name)
		}
	}
	return out
}

// apply multiplies the knob by the factor. For a whole number the result is
// rounded (round: down by default, up or nearest), then to a multiple of
// multiple_of in the same direction, then held within min and max. Whole
// numbers have an implicit min of 1 (cut_workers' min is 0 unless it says
// otherwise) so that a batch is never halved to nothing. When the result
// equals the old value the knob is at its floor (or ceiling) and the action
// cannot act.
//
// With compensate, the other knob is changed so that the product of the
// two (the effective batch: batch size × accumulation steps) stays the
// same: its new value is product ÷ new value when that divides evenly, and
// otherwise the nearest whole number (halves round up, so the effective
// batch never shrinks by rounding), with a Note saying by how much the
// product moved. Both knobs must hold positive whole numbers.
// positiveValue is knob's value in vals as a positive number, or why it is
// not one (unset, not a number, zero or below): what every action that
// scales a knob needs first.
func positiveValue(p *Policy, vals Values, knob string) (number, string) {
	cur, had := vals[knob]
	if !had {
		return number{}, knob + " has no value (the command does not set it)"
	}
	n, ok := parseNumber(cur)
	if !ok {
		return number{}, fmt.Sprintf("%s is %s, not a number", knob, p.knobByName[knob].show(cur, true))
	}
	if n.f <= 0 {
		return number{}, fmt.Sprintf("%s is %s, not a positive number", knob, cur.Text)
	}
	return n, ""
}

func (a *scaleAction) apply(p *Policy, vals Values, _ *Outcome) ([]Change, string) {
	n, why := positiveValue(p, vals, a.knob)
	if why != "" {
		return nil, why
	}
	cur := vals[a.knob]
	next := n.f * a.by
	if n.isInt {
		next = roundTo(next, 1, a.round)
		if a.multipleOf > 1 {
			next = roundTo(next, float64(a.multipleOf), a.round)
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
	rounded := next
	next = min(max(next, lo), hi)
	switch {
	case (next-n.f)*(a.by-1) < 0:
		// min or max pulls the value the wrong way (it is already below min
		// or above max): leave it rather than grow what should shrink.
		if next > n.f {
			return nil, fmt.Sprintf("%s is %s, already below min %s", a.knob, cur.Text, formatNumber(lo, n.isInt))
		}
		return nil, fmt.Sprintf("%s is %s, already above max %s", a.knob, cur.Text, formatNumber(hi, n.isInt))
	case next != n.f:
	case rounded != next && a.by < 1:
		return nil, fmt.Sprintf("%s is %s, at its floor (min %s)", a.knob, cur.Text, formatNumber(lo, n.isInt))
	case rounded != next:
		return nil, fmt.Sprintf("%s is %s, at its ceiling (max %s)", a.knob, cur.Text, formatNumber(hi, n.isInt))
	default:
		return nil, fmt.Sprintf("%s is %s, and ×%g rounds back to it", a.knob, cur.Text, a.by)
	}
	return a.change(p, vals, a.knob, cur, n, next)
}

// change sets knob from cur (the number n) to next and, with compensate,
// changes the compensating knob so that the product of the two stays as it
// is: its new value is product ÷ next when that divides evenly, and
// otherwise the nearest whole number (halves round up, so the effective
// batch never shrinks by rounding), with a Note saying by how much the
// product moved. Both knobs must hold positive whole numbers. vals is
// changed only when it returns no reason.
func (o actionOptions) change(p *Policy, vals Values, knob string, cur Value, n number, next float64) ([]Change, string) {
	newVal := Value{Text: formatNumber(next, n.isInt)}
	changes := []Change{{Knob: knob, Old: cur.Text, New: newVal.Text}}
	if o.compensate != "" {
		ck := p.knobByName[o.compensate]
		ccur, chad := vals[o.compensate]
		if !chad {
			return nil, fmt.Sprintf("%s cannot compensate: it has no value", o.compensate)
		}
		cn, ok := parseNumber(ccur)
		if !ok || !cn.isInt || cn.f < 1 || !n.isInt {
			return nil, fmt.Sprintf("cannot keep %s × %s: both must be positive whole numbers (%s, %s)", knob, o.compensate, cur.Text, ck.show(ccur, true))
		}
		product := n.f * cn.f
		cnext := math.Max(1, math.Floor(product/next+0.5))
		c := Change{Knob: o.compensate, Old: ccur.Text, New: formatNumber(cnext, true), Compensation: true}
		if got := next * cnext; got != product {
			c.Note = fmt.Sprintf("effective batch %s → %s: %s is not divisible by %s", formatNumber(product, true), formatNumber(got, true), formatNumber(product, true), newVal.Text)
		}
		vals[o.compensate] = Value{Text: c.New}
		changes = append(changes, c)
	}
	vals[knob] = newVal
	return changes, ""
}

func roundTo(x, m float64, how string) float64 {
	q := x / m
	switch how {
	case "up":
		q = math.Ceil(q - 1e-9)
	case "nearest":
		q = math.Floor(q + 0.5)
	default:
		q = math.Floor(q + 1e-9)
	}
	return q * m
}
