package report

import (
	"image/color"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"

	"github.com/gpuguard/gpuguard/internal/probes/classify"
)

// gpuFromMessages names the GPU panel drawn from the job's out-of-memory
// messages when no sampler saw the GPU (no NVML, a CPU-only machine, the
// example's simulated GPU): what each message said of the device at the
// moment it ran out — the memory the process had in use, what it asked
// for on top, what was free, and the device's total.
const gpuFromMessages = "GPU memory in OOM messages"

var (
	inUseColor = color.NRGBA{31, 119, 180, 200}
	askedColor = color.NRGBA{214, 39, 40, 90}
)

// oomFigure is what one attempt's GPU out-of-memory message said, and when.
type oomFigure struct {
	attempt                   int
	start, at                 time.Time // the attempt's start (zero: unknown) and the failure's time
	inUse, asked, free, total float64   // GiB; a figure the message did not give is 0
}

// top is the highest memory the figure reaches: in use and asked, or the total.
func (f oomFigure) top() float64 { return max(f.inUse+f.asked, f.total) }

// oomFigures are the attempts' GPU out-of-memory figures, for attempts that
// have a time for their failure and at least one figure.
func oomFigures(run *Run) []oomFigure {
	var out []oomFigure
	for _, a := range run.Attempts {
		v := a.Verdict
		if v == nil || v.Kind != classify.KindGPUOOM || v.OOM == nil {
			continue
		}
		at := oomTime(a)
		if at.IsZero() {
			continue
		}
		o := v.OOM
		g := func(b *int64) float64 {
			if b == nil || *b < 0 {
				return 0
			}
			return toGiB(uint64(*b))
		}
		f := oomFigure{attempt: a.N, at: at, asked: g(o.RequestedBytes), free: g(o.FreeBytes), total: g(o.TotalBytes), inUse: g(o.InUseBytes)}
		if o.InUseBytes == nil && o.TotalBytes != nil && o.FreeBytes != nil && *o.TotalBytes >= *o.FreeBytes {
			f.inUse = f.total - f.free // the device's memory in use, this process's or not
		}
		if a.Start != nil {
			f.start = *a.Start
		}
		if f.top() > 0 {
			out = append(out, f)
		}
	}
	return out
}

// oomTime is when attempt a ran out of memory: its first OOM failure, or
// its end when its verdict is an OOM that no failure event timed.
func oomTime(a *Attempt) time.Time {
	for _, f := range a.Failures {
		if strings.HasSuffix(f.Kind, "oom") {
			return f.Time
		}
	}
	if a.Verdict != nil && strings.HasSuffix(string(a.Verdict.Kind), "oom") && a.End != nil {
		return *a.End
	}
	return time.Time{}
}

// drawOOMFigures draws each figure where its message was printed: a bar of
// the memory in use, the request stacked on it (in red: it did not fit),
// and the device's total as a dashed line over the attempt that ran out.
func drawOOMFigures(p *plot.Plot, run *Run, figs []oomFigure, x func(int64) float64, xmin, xmax, yScale float64) error {
	bw := (xmax - xmin) / 80
	bar := func(x0, x1, y0, y1 float64, c color.NRGBA) (*plotter.Polygon, error) {
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: y0}, {X: x1, Y: y0}, {X: x1, Y: y1}, {X: x0, Y: y1}})
		if err != nil {
			return nil, err
		}
		poly.Color = c
		poly.LineStyle.Width = vg.Points(0.8)
		c.A = 255
		poly.LineStyle.Color = c
		return poly, nil
	}
	seenUse, seenAsk, seenTotal := false, false, false
	for _, f := range figs {
		xo := x(f.at.Sub(run.origin).Milliseconds())
		x0 := max(xmin, xo-bw)
		if f.total > 0 {
			from := xmin
			if !f.start.IsZero() {
				from = x(f.start.Sub(run.origin).Milliseconds())
			}
			l, err := plotter.NewLine(plotter.XYs{{X: from, Y: f.total * yScale}, {X: xo, Y: f.total * yScale}})
			if err != nil {
				return err
			}
			l.Color, l.Width = gpuColors[0], vg.Points(1)
			l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
			p.Add(l)
			if !seenTotal {
				p.Legend.Add("GPU total, as the message said", l)
				seenTotal = true
			}
		}
		if f.inUse > 0 {
			b, err := bar(x0, xo, 0, f.inUse*yScale, inUseColor)
			if err != nil {
				return err
			}
			p.Add(b)
			if !seenUse {
				p.Legend.Add("in use when it ran out", b)
				seenUse = true
			}
		}
		if f.asked > 0 {
			b, err := bar(x0, xo, f.inUse*yScale, (f.inUse+f.asked)*yScale, askedColor)
			if err != nil {
				return err
			}
			p.Add(b)
			if !seenAsk {
				p.Legend.Add("asked for, on top (did not fit)", b)
				seenAsk = true
			}
		}
	}
	return nil
}

// valSpans are the run's validation intervals, in milliseconds from the
// timeline's origin: from the journal's phase events, which mark each
// change when the job prints it (a validation of a few milliseconds that
// dies of it included), or else from the timeline's samples.
func valSpans(run *Run, ti *timelineInfo) []span {
	if run.origin.IsZero() {
		return ti.valSpans
	}
	var out []span
	marked := false
	for _, a := range run.Attempts {
		for i, m := range a.Phases {
			marked = true
			if m.Phase != string(classify.PhaseVal) {
				continue
			}
			end := time.Time{}
			switch {
			case i+1 < len(a.Phases):
				end = a.Phases[i+1].Time
			case a.End != nil:
				end = *a.End
			}
			if end.Before(m.Time) {
				continue // still validating when the journal ends: the samples say how far
			}
			out = append(out, span{attempt: a.N, start: m.Time.Sub(run.origin).Milliseconds(), end: end.Sub(run.origin).Milliseconds()})
		}
	}
	if !marked {
		return ti.valSpans
	}
	return out
}
