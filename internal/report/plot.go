package report

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// plotBuckets bounds the points per line: each bucket keeps its minimum and
// maximum sample, so peaks survive the thinning of a 24-hour timeline.
const plotBuckets = 1500

var (
	gpuColors = []color.Color{
		color.RGBA{31, 119, 180, 255}, color.RGBA{44, 160, 44, 255}, color.RGBA{148, 103, 189, 255},
		color.RGBA{23, 190, 207, 255}, color.RGBA{188, 189, 34, 255}, color.RGBA{140, 86, 75, 255},
		color.RGBA{227, 119, 194, 255}, color.RGBA{127, 127, 127, 255},
	}
	hostColor   = color.RGBA{40, 40, 40, 255}
	cgroupColor = color.RGBA{255, 127, 14, 255}
	ramColor    = color.RGBA{160, 160, 160, 255}
	valColor    = color.NRGBA{255, 165, 0, 60}   // translucent: lines stay visible
	waitColor   = color.NRGBA{128, 128, 128, 50} // the time between two attempts
	oomColor    = color.RGBA{214, 39, 40, 255}
	startColor  = color.RGBA{90, 90, 90, 255}
)

// series is one device's line in one attempt, thinned to min/max buckets.
type series struct {
	dev     string
	attempt int
	pts     plotter.XYs
	// the open bucket
	bucket         int64
	minX, maxX     float64
	minY, maxY     float64
	haveMin, order bool // order: the minimum came first
}

func (s *series) add(x, y float64, bucket int64) {
	if s.haveMin && bucket != s.bucket {
		s.flush()
	}
	if !s.haveMin {
		s.bucket, s.minX, s.maxX, s.minY, s.maxY, s.haveMin = bucket, x, x, y, y, true
		s.order = true
		return
	}
	if y < s.minY {
		s.minX, s.minY = x, y
		s.order = s.minX <= s.maxX
	}
	if y > s.maxY {
		s.maxX, s.maxY = x, y
		s.order = s.minX <= s.maxX
	}
}

func (s *series) flush() {
	if !s.haveMin {
		return
	}
	a, b := plotter.XY{X: s.minX, Y: s.minY}, plotter.XY{X: s.maxX, Y: s.maxY}
	if !s.order {
		a, b = b, a
	}
	s.pts = append(s.pts, a)
	if b != a {
		s.pts = append(s.pts, b)
	}
	s.haveMin = false
}

// plotRun draws memory against time: a GPU panel (each device, capacity
// lines) above a host panel (the job's processes, the cgroup's working set,
// the machine's RAM in use, their limits), validation shaded, OOMs and
// relaunches marked. The format follows out's extension (.png or .svg).
func plotRun(run *Run, ti *timelineInfo, timelinePath, out string) error {
	panels, err := buildPanels(run, ti, timelinePath)
	if err != nil {
		return err
	}
	width, height := plotWidth, 4*vg.Inch*vg.Length(len(panels))+0.6*vg.Inch
	return drawPanels(panels, width, height, out)
}

// buildPanels makes the panels of plotRun's figure, GPU above host.
func buildPanels(run *Run, ti *timelineInfo, timelinePath string) ([]*plot.Plot, error) {
	span := ti.maxMs - ti.minMs
	unit, div := "minutes", 60000.0
	switch {
	case span < 3*60*1000:
		unit, div = "seconds", 1000
	case span > 6*3600*1000:
		unit, div = "hours", 3600000
	}
	x := func(ms int64) float64 { return float64(ms) / div }
	bucketMs := max(span/plotBuckets, 1)

	// Second pass over the timeline: the thinned lines.
	f, err := os.Open(timelinePath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	lines := map[[2]string]*series{}
	var order [][2]string
	err = record.ReadTimeline(f, func(r record.TimelineRow) error {
		k := [2]string{r.Device, fmt.Sprint(r.Attempt)}
		s := lines[k]
		if s == nil {
			s = &series{dev: r.Device, attempt: r.Attempt}
			lines[k] = s
			order = append(order, k)
		}
		s.add(x(r.ElapsedMs), float64(r.UsedBytes)/(1<<30), (r.ElapsedMs-ti.minMs)/bucketMs)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, s := range lines {
		s.flush()
	}
	sort.SliceStable(order, func(i, j int) bool { return deviceLess(order[i][0], order[j][0]) })

	var gpuDevs, hostDevs []string
	hasCgroup := false
	for _, d := range ti.devices {
		hasCgroup = hasCgroup || d == "cgroup"
	}
	for _, d := range ti.devices {
		switch {
		case d == "ram" && hasCgroup:
			// The cgroup's limit is the ceiling; the whole machine's RAM
			// would only squash the lines that matter.
		case isHostDevice(d):
			hostDevs = append(hostDevs, d)
		default:
			gpuDevs = append(gpuDevs, d)
		}
	}
	sort.Slice(gpuDevs, func(i, j int) bool { return deviceLess(gpuDevs[i], gpuDevs[j]) })
	sort.Slice(hostDevs, func(i, j int) bool { return deviceLess(hostDevs[i], hostDevs[j]) })

	xmin, xmax := x(ti.minMs), x(ti.maxMs)
	if xmax <= xmin {
		xmax = xmin + 1
	}
	name := filepath.Base(filepath.Clean(run.RunDir))
	var panels []*plot.Plot
	if len(gpuDevs) > 0 {
		p, err := panel(run, ti, lines, order, gpuDevs, "GPU memory", unit, x, xmin, xmax, true)
		if err != nil {
			return nil, err
		}
		p.Title.Text = "gpuguard memory timeline: " + name
		panels = append(panels, p)
	}
	if len(hostDevs) > 0 || len(gpuDevs) == 0 {
		// With no sample at all the host panel still shows the attempts.
		p, err := panel(run, ti, lines, order, hostDevs, "host memory", unit, x, xmin, xmax, len(gpuDevs) == 0)
		if err != nil {
			return nil, err
		}
		if len(gpuDevs) == 0 {
			p.Title.Text = "gpuguard memory timeline: " + name + " (no GPU sampled)"
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return nil, fmt.Errorf("the timeline has no rows")
	}
	return panels, nil
}

// drawPanels: see plotRun.
func drawPanels(panels []*plot.Plot, width, height vg.Length, out string) error {
	format := strings.TrimPrefix(strings.ToLower(filepath.Ext(out)), ".")
	c, err := draw.NewFormattedCanvas(width, height, format)
	if err != nil {
		return err
	}
	grid := make([][]*plot.Plot, len(panels))
	for i, p := range panels {
		grid[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(panels), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6),
		PadRight: vg.Points(12), PadY: vg.Points(14)}
	// The legends stand in a column of their own, right of the panels,
	// where they cover no line and no label.
	legendW := plotLegendWidth
	whole := draw.New(c)
	canvases := plot.Align(grid, tiles, draw.Crop(whole, 0, -legendW, 0, 0))
	for i, p := range panels {
		legend := p.Legend
		p.Legend = plot.NewLegend()
		p.Draw(canvases[i][0])
		area := draw.Canvas{Canvas: whole.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: canvases[i][0].Max.X + vg.Points(4), Y: canvases[i][0].Min.Y},
			Max: vg.Point{X: whole.Max.X - vg.Points(4), Y: canvases[i][0].Max.Y - vg.Points(24)},
		}}
		legend.Draw(area)
	}
	w, err := os.Create(out)
	if err != nil {
		return err
	}
	if _, err := c.WriteTo(w); err != nil {
		w.Close()
		return err
	}
	return w.Close()
}

func isHostDevice(d string) bool { return d == "host" || d == "cgroup" || d == "ram" }

// The figure's width, its legend column's, and about the width of a panel's
// data area (less the y axis).
const (
	plotWidth       = 12.5 * vg.Inch
	plotLegendWidth = 3 * vg.Inch
	plotDataWidth   = plotWidth - plotLegendWidth - 0.7*vg.Inch
)

// nearLimit: a limit is drawn, and the panel scaled to it, only when the
// memory came within this share of it (or ran out); a limit far above the
// data would squash the lines that matter into the bottom of the panel.
const nearLimit = 0.4

// panel draws one panel: the devices' lines, the limits that apply,
// validation shading, each attempt's span and its out-of-memory failure with
// its figures (labelled on the top panel). Its legend is drawn apart, right
// of the panel (see plotRun). Its scale follows the data: GiB, or MiB when
// the job used less than 1 GiB.
func panel(run *Run, ti *timelineInfo, lines map[[2]string]*series, order [][2]string, devs []string,
	what, unit string, x func(int64) float64, xmin, xmax float64, labels bool) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "time since the run started (" + unit + ")"
	p.X.Min, p.X.Max = xmin, xmax
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())

	gpuPanel := len(devs) > 0 && !isHostDevice(devs[0])
	ranOut := false // an out-of-memory failure of this panel's memory
	for _, a := range run.Attempts {
		if a.Verdict != nil {
			k := string(a.Verdict.Kind)
			ranOut = ranOut || (gpuPanel && k == "gpu_oom") || (!gpuPanel && (k == "host_oom" || k == "cpu_alloc_oom"))
		}
	}
	peakOf := func(dev string) float64 { // GiB
		m := 0.0
		for _, k := range order {
			if s := lines[k]; s.dev == dev {
				for _, pt := range s.pts {
					m = max(m, pt.Y)
				}
			}
		}
		return m
	}
	// The machine's RAM in use is drawn only when the machine came short
	// of memory: otherwise it is other programs' business, and would set
	// the scale instead of the job.
	want := map[string]bool{}
	ramNote := ""
	for _, d := range devs {
		if d == "ram" && !ranOut && peakOf(d) < nearLimit*toGiB(ti.capacity[d]) {
			ramNote = fmt.Sprintf("RAM in use: at most %s of %s (not drawn)",
				humanize.Bytes(uint64(peakOf(d)*(1<<30))), humanize.Bytes(ti.capacity[d]))
			continue
		}
		want[d] = true
	}
	peak := 0.0 // GiB
	for d := range want {
		peak = max(peak, peakOf(d))
	}

	colorOf := map[string]color.Color{}
	gi := 0
	for _, d := range devs {
		switch d {
		case "host":
			colorOf[d] = hostColor
		case "cgroup":
			colorOf[d] = cgroupColor
		case "ram":
			colorOf[d] = ramColor
		default:
			colorOf[d] = gpuColors[gi%len(gpuColors)]
			gi++
		}
	}

	// The limits that apply: a GPU's capacity, the cgroup's limit (which
	// the job's processes share), not the machine's RAM, which bounds no
	// job in particular. One line per distinct limit.
	type limit struct {
		dev   string
		bytes uint64
		draw  bool
	}
	var limits []limit
	seen := map[uint64]bool{}
	for _, d := range devs {
		if !want[d] {
			continue
		}
		capBytes := ti.capacity[d]
		applies := !isHostDevice(d) || d == "cgroup" || (d == "host" && ti.capacity["cgroup"] > 0 && capBytes == ti.capacity["cgroup"]) ||
			(d == "host" && capBytes < ti.capacity["ram"]) // the job's rlimit
		if capBytes == 0 || !applies || seen[capBytes] {
			continue
		}
		seen[capBytes] = true
		limits = append(limits, limit{d, capBytes, ranOut || peak >= nearLimit*toGiB(capBytes)})
	}
	ymax := peak
	for _, l := range limits {
		if l.draw {
			ymax = max(ymax, toGiB(l.bytes))
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	yUnit, yScale := "GiB", 1.0
	if ymax < 1 {
		yUnit, yScale = "MiB", 1024
	}
	ymax *= yScale * 1.12 // room above the highest line for the labels
	p.Y.Label.Text = what + " (" + yUnit + ")"
	p.Y.Min, p.Y.Max = 0, ymax
	scaled := func(pts plotter.XYs) plotter.XYs {
		out := make(plotter.XYs, len(pts))
		for i, pt := range pts {
			out[i] = plotter.XY{X: pt.X, Y: pt.Y * yScale}
		}
		return out
	}

	// Validation first, under the lines.
	first := true
	for _, sp := range ti.valSpans {
		x0, x1 := x(sp.start), x(sp.end)
		if x1-x0 < (xmax-xmin)/400 {
			x1 = x0 + (xmax-xmin)/400
		}
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
		if err != nil {
			return nil, err
		}
		poly.Color = valColor
		poly.LineStyle.Width = 0
		poly.LineStyle.Color = nil
		p.Add(poly)
		if first {
			p.Legend.Add("validation", poly)
			first = false
		}
	}

	// The waits between attempts (checkpoint, GPU memory, backoff), grey,
	// under the lines too.
	waitSeen := false
	for i := 1; i < len(run.Attempts); i++ {
		prev, a := run.Attempts[i-1], run.Attempts[i]
		if prev.End == nil || a.Start == nil || run.origin.IsZero() || !a.Start.After(*prev.End) {
			continue
		}
		x0, x1 := x(prev.End.Sub(run.origin).Milliseconds()), x(a.Start.Sub(run.origin).Milliseconds())
		poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
		if err != nil {
			return nil, err
		}
		poly.Color = waitColor
		poly.LineStyle.Width = 0
		poly.LineStyle.Color = nil
		p.Add(poly)
		if !waitSeen {
			p.Legend.Add("waiting to relaunch", poly)
			waitSeen = true
		}
	}

	for _, l := range limits {
		name := "GPU capacity"
		switch l.dev {
		case "host", "cgroup":
			name = "cgroup limit"
			if l.dev == "host" && l.bytes != ti.capacity["cgroup"] {
				name = "host ceiling (rlimit)"
			}
		}
		line, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: toGiB(l.bytes) * yScale}, {X: xmax, Y: toGiB(l.bytes) * yScale}})
		if err != nil {
			return nil, err
		}
		line.Color = colorOf[l.dev]
		line.Width = vg.Points(1)
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		label := fmt.Sprintf("%s %s", name, humanize.Bytes(l.bytes))
		if l.draw {
			p.Add(line)
		} else {
			line.Color = color.Transparent
			label += " (far above)"
		}
		p.Legend.Add(label, line)
	}

	// The devices' lines, one per attempt, one legend entry per device.
	inLegend := map[string]bool{}
	for _, k := range order {
		s := lines[k]
		if !want[s.dev] || len(s.pts) == 0 {
			continue
		}
		pts := scaled(s.pts)
		if len(pts) == 1 {
			pts = append(pts, pts[0])
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return nil, err
		}
		l.Color = colorOf[s.dev]
		l.Width = vg.Points(1.4)
		if s.dev == "ram" {
			l.Width = vg.Points(1)
		}
		p.Add(l)
		if !inLegend[s.dev] {
			inLegend[s.dev] = true
			label := deviceLabel(s.dev)
			if s.dev == "ram" && ti.capacity["ram"] > 0 {
				label += " (of " + humanize.Bytes(ti.capacity["ram"]) + ")"
			}
			p.Legend.Add(label, l)
		}
	}

	if ramNote != "" {
		l, _ := plotter.NewLine(plotter.XYs{{X: xmin, Y: -1}, {X: xmin, Y: -1}})
		l.Color = color.Transparent
		p.Legend.Add(ramNote, l)
	}

	// Each attempt: a bar along the top from its start to its end, dashed
	// lines at both; its out-of-memory failure in red, with its figures.
	origin := run.origin
	var marks plotter.XYLabels
	var leftOK []bool // the label goes left of its line when there is room
	vline := func(xv float64, c color.Color, dashes []vg.Length, width vg.Length) error {
		l, err := plotter.NewLine(plotter.XYs{{X: xv, Y: 0}, {X: xv, Y: ymax}})
		if err != nil {
			return err
		}
		l.Color, l.Width, l.Dashes = c, width, dashes
		p.Add(l)
		return nil
	}
	// label writes s right of the line at xv or, if left and there is
	// room, left of it.
	label := func(xv, height float64, s string, left bool) {
		if !labels {
			return
		}
		marks.XYs = append(marks.XYs, plotter.XY{X: xv, Y: ymax * height})
		marks.Labels = append(marks.Labels, s)
		leftOK = append(leftOK, left)
	}
	if !origin.IsZero() {
		dashed := []vg.Length{vg.Points(3), vg.Points(3)}
		oomSeen, spanSeen := false, false
		for _, a := range run.Attempts {
			if a.Start == nil {
				continue
			}
			x0 := x(a.Start.Sub(origin).Milliseconds())
			x1 := xmax
			if a.End != nil {
				x1 = x(a.End.Sub(origin).Milliseconds())
			}
			if err := vline(x0, startColor, dashed, vg.Points(1)); err != nil {
				return nil, err
			}
			if a.End != nil {
				if err := vline(x1, startColor, dashed, vg.Points(1)); err != nil {
					return nil, err
				}
			}
			bar, err := plotter.NewLine(plotter.XYs{{X: x0, Y: ymax * 0.995}, {X: x1, Y: ymax * 0.995}})
			if err != nil {
				return nil, err
			}
			bar.Color, bar.Width = startColor, vg.Points(3)
			p.Add(bar)
			if !spanSeen {
				p.Legend.Add("attempt (start to end)", bar)
				spanSeen = true
			}
			name := fmt.Sprintf(" attempt %d ", a.N)
			if a.ExitCode != nil {
				name += fmt.Sprintf("(exit %d) ", *a.ExitCode)
			}
			if what := changedFor(run, a.N); what != "" {
				// What the attempt was relaunched with, beside its name.
				name += "with " + what + " "
			}
			label(x0, 0.955, name, false)

			oomAt := time.Time{}
			for _, f := range a.Failures {
				if strings.HasSuffix(f.Kind, "oom") {
					oomAt = f.Time
					break // one mark per attempt
				}
			}
			if oomAt.IsZero() && a.Verdict != nil && strings.HasSuffix(string(a.Verdict.Kind), "oom") && a.End != nil {
				oomAt = *a.End
			}
			if oomAt.IsZero() {
				continue
			}
			xo := x(oomAt.Sub(origin).Milliseconds())
			if err := vline(xo, oomColor, nil, vg.Points(1.4)); err != nil {
				return nil, err
			}
			oomSeen = true
			// Left of its line, over the attempt it ended.
			label(xo, 0.90, " "+oomLabel(a)+" ", true)
		}
		if oomSeen {
			sw, _ := plotter.NewLine(plotter.XYs{{X: xmin, Y: -1}, {X: xmin, Y: -1}})
			sw.Color, sw.Width = oomColor, vg.Points(1.4)
			p.Legend.Add("out of memory", sw)
		}
	}
	if len(marks.XYs) > 0 {
		lb, err := plotter.NewLabels(marks)
		if err != nil {
			return nil, err
		}
		prevEnd := math.Inf(-1) // where the last OOM label ends, on the x axis
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(8)
			lb.TextStyle[i].Color = startColor
			// The panel's data area is about plotDataWidth wide.
			room := float64(lb.TextStyle[i].Width(marks.Labels[i])/plotDataWidth) * (xmax - xmin)
			x0 := marks.XYs[i].X
			if leftOK[i] && x0-xmin > room {
				lb.TextStyle[i].XAlign = text.XRight
				x0 -= room
			}
			if leftOK[i] {
				// Lower, clear of the OOM label before, when they meet.
				if x0 < prevEnd {
					lb.XYs[i].Y = ymax * 0.80
				}
				prevEnd = x0 + room
			}
			if strings.Contains(marks.Labels[i], "oom") {
				lb.TextStyle[i].Color = oomColor
			}
		}
		p.Add(lb)
	}
	return p, nil
}

// oomLabel is an attempt's out-of-memory failure, with the figures its
// message gave: "gpu_oom in val, step 50\nasked 4.00 GiB, 1.50 GiB free of
// 16.00 GiB".
func oomLabel(a *Attempt) string {
	v := a.Verdict
	if v == nil {
		return "out of memory"
	}
	s := string(v.Kind)
	if v.Phase != "" {
		s += " in " + string(v.Phase)
	}
	if v.Step != nil {
		s += fmt.Sprintf(", step %d", *v.Step)
	}
	if o := v.OOM; o != nil {
		var fig []string
		if o.RequestedBytes != nil {
			fig = append(fig, "asked "+humanize.Size(*o.RequestedBytes))
		}
		switch {
		case o.FreeBytes != nil && o.TotalBytes != nil:
			fig = append(fig, humanize.Size(*o.FreeBytes)+" free of "+humanize.Size(*o.TotalBytes))
		case o.FreeBytes != nil:
			fig = append(fig, humanize.Size(*o.FreeBytes)+" free")
		}
		if len(fig) > 0 {
			s += "\n" + strings.Join(fig, ", ")
		}
	}
	return s
}

func toGiB(b uint64) float64 { return float64(b) / (1 << 30) }

func deviceLabel(d string) string {
	switch d {
	case "host":
		return "job's processes (PSS)"
	case "cgroup":
		return "cgroup working set"
	case "ram":
		return "machine RAM in use"
	}
	return d
}

// changedFor says what the decision before attempt n changed ("val_crop_size
// unset→512"), cut to fit over a short attempt; "" for the first attempt or
// when the journal has no such decision.
func changedFor(run *Run, n int) string {
	for _, a := range run.Attempts {
		if a.N != n-1 || a.Decision == nil || len(a.Decision.Changes) == 0 {
			continue
		}
		var parts []string
		for _, c := range a.Decision.Changes {
			parts = append(parts, fmt.Sprintf("%s %v→%v", c.Name, c.Old, c.New))
		}
		s := strings.Join(parts, ", ")
		if r := []rune(s); len(r) > 48 {
			s = string(r[:47]) + "…"
		}
		return s
	}
	return ""
}
