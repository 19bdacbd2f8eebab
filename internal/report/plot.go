package report

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/rundir/record"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
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
	// The time axis starts at the run (the timeline's origin), and goes on
	// to the last attempt's end when no sample came after it.
	startMs, endMs := min(ti.minMs, 0), ti.maxMs
	for _, a := range run.Attempts {
		if a.End != nil && !run.origin.IsZero() {
			endMs = max(endMs, a.End.Sub(run.origin).Milliseconds())
		}
	}
	span := endMs - startMs
	unit, div := "minutes", 60000.0
	switch {
	case span < 3*60*1000:
		unit, div = "seconds", 1000
	case span > 6*3600*1000:
		unit, div = "hours", 3600000
	}
	x := func(ms int64) float64 { return float64(ms) / div }
	bucketMs := max((ti.maxMs-ti.minMs)/plotBuckets, 1)

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

	xmin, xmax := x(startMs), x(endMs)
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
	if len(gpuDevs) == 0 && len(oomFigures(run)) > 0 {
		// No sampler saw the GPU; its out-of-memory messages did.
		p, err := panel(run, ti, lines, order, nil, gpuFromMessages, unit, x, xmin, xmax, true)
		if err != nil {
			return nil, err
		}
		p.Title.Text = "gpuguard memory timeline: " + name + " (GPU not sampled: its OOM messages' figures)"
		panels = append(panels, p)
	}
	if len(hostDevs) > 0 || len(panels) == 0 {
		// With no sample at all the host panel still shows the attempts.
		p, err := panel(run, ti, lines, order, hostDevs, "host memory", unit, x, xmin, xmax, len(panels) == 0)
		if err != nil {
			return nil, err
		}
		if len(panels) == 0 {
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
	whole := draw.New(c)
	legendW := legendWidth(panels, whole)
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

// The figure's width.
const plotWidth = 12.5 * vg.Inch

// legendWidth is the width of the legends' column, right of the panels: as
// wide as the widest legend, so that the panels get the rest.
func legendWidth(panels []*plot.Plot, c draw.Canvas) vg.Length {
	w := vg.Length(0)
	for _, p := range panels {
		r := p.Legend.Rectangle(c)
		w = max(w, r.Max.X-r.Min.X)
	}
	return w + vg.Points(12)
}

// nearLimit: a limit is drawn, and the panel scaled to it, only when the
// memory came within this share of it (or ran out); a limit far above the
// data would squash the lines that matter into the bottom of the panel.
const nearLimit = 0.4

// panelDraw is one panel while panel draws it: the figure, what it draws
// from, and what the steps settle on the way (the devices drawn and their
// colours, the vertical scale, the attempts' labels).
type panelDraw struct {
	p          *plot.Plot
	run        *Run
	ti         *timelineInfo
	lines      map[[2]string]*series
	order      [][2]string
	x          func(int64) float64 // milliseconds since the run to the time axis
	xmin, xmax float64
	labels     bool // label the attempts (the top panel)

	want    map[string]bool // the devices whose lines are drawn
	colorOf map[string]color.Color
	yScale  float64 // GiB to the vertical axis' unit
	ymax    float64 // the vertical axis' top
	marks   *labelLayer
}

// plotLimit is a limit a panel shows: draw, when the memory came near it.
type plotLimit struct {
	dev   string
	bytes uint64
	draw  bool
}

// panel draws one panel: the devices' lines, the limits that apply,
// validation shading, each attempt's span and its out-of-memory failure with
// its figures (labelled on the top panel). Its legend is drawn apart, right
// of the panel (see plotRun). Its scale follows the data: GiB, or MiB when
// the job used less than 1 GiB.
func panel(run *Run, ti *timelineInfo, lines map[[2]string]*series, order [][2]string, devs []string,
	what, unit string, x func(int64) float64, xmin, xmax float64, labels bool) (*plot.Plot, error) {
	d := &panelDraw{p: newPanelPlot(unit, xmin, xmax), run: run, ti: ti, lines: lines, order: order,
		x: x, xmin: xmin, xmax: xmax, labels: labels, marks: &labelLayer{}}

	ranOut := ranOutOf(run, len(devs) > 0 && !isHostDevice(devs[0]))
	ramNote := d.chooseDevices(devs, ranOut)
	peak := 0.0 // GiB
	for dev := range d.want {
		peak = max(peak, d.peakOf(dev))
	}
	var figs []oomFigure
	if what == gpuFromMessages {
		figs = oomFigures(run)
		for _, f := range figs {
			peak = max(peak, f.top())
		}
	}
	d.colorOf = deviceColors(devs)
	limits := d.limits(devs, ranOut, peak)
	d.scaleY(what, peak, limits)

	// Validation and the waits under the lines, then the limits, the
	// lines, the OOM messages' figures; the attempts over all.
	steps := []func() error{
		d.shadeValidation,
		d.shadeWaits,
		func() error { return d.drawLimits(limits) },
		d.drawLines,
		func() error { return drawOOMFigures(d.p, run, figs, x, xmin, xmax, d.yScale) },
		func() error { d.noteInLegend(ramNote); return nil },
		d.markAttempts,
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	if len(d.marks.items) > 0 {
		d.p.Add(d.marks)
		run.labels = append(run.labels, d.marks)
	}
	return d.p, nil
}

// newPanelPlot is an empty panel: its time axis, its grid, its legend's style.
func newPanelPlot(unit string, xmin, xmax float64) *plot.Plot {
	p := plot.New()
	p.X.Label.Text = "time since the run started (" + unit + ")"
	p.X.Min, p.X.Max = xmin, xmax
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Legend.Padding = vg.Points(2)
	p.Add(plotter.NewGrid())
	return p
}

// ranOutOf says whether an attempt failed for want of the panel's memory:
// the GPU's on the GPU panel, the host's on the host panel.
func ranOutOf(run *Run, gpuPanel bool) bool {
	ranOut := false
	for _, a := range run.Attempts {
		if a.Verdict != nil {
			k := string(a.Verdict.Kind)
			ranOut = ranOut || (gpuPanel && k == "gpu_oom") || (!gpuPanel && (k == "host_oom" || k == "cpu_alloc_oom"))
		}
	}
	return ranOut
}

// peakOf is a device's highest thinned sample over all attempts, in GiB.
func (d *panelDraw) peakOf(dev string) float64 {
	m := 0.0
	for _, k := range d.order {
		if s := d.lines[k]; s.dev == dev {
			for _, pt := range s.pts {
				m = max(m, pt.Y)
			}
		}
	}
	return m
}

// chooseDevices sets the devices whose lines the panel draws, and returns a
// note for the legend when the machine's RAM is left out. The machine's RAM
// in use is drawn only when the machine came short of memory: otherwise it
// is other programs' business, and would set the scale instead of the job.
func (d *panelDraw) chooseDevices(devs []string, ranOut bool) (ramNote string) {
	d.want = map[string]bool{}
	for _, dev := range devs {
		if dev == "ram" && !ranOut && d.peakOf(dev) < nearLimit*toGiB(d.ti.capacity[dev]) {
			ramNote = fmt.Sprintf("RAM in use: at most %s of %s (not drawn)",
				humanize.Bytes(uint64(d.peakOf(dev)*(1<<30))), humanize.Bytes(d.ti.capacity[dev]))
			continue
		}
		d.want[dev] = true
	}
	return ramNote
}

// deviceColors gives each device its line's colour: the host's three fixed,
// the GPUs' in turn from gpuColors.
func deviceColors(devs []string) map[string]color.Color {
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
	return colorOf
}

// limits are the limits that apply: a GPU's capacity, the cgroup's limit
// (which the job's processes share), not the machine's RAM, which bounds no
// job in particular. One line per distinct limit; drawn when the memory
// came near it or ran out.
func (d *panelDraw) limits(devs []string, ranOut bool, peak float64) []plotLimit {
	ti := d.ti
	var limits []plotLimit
	seen := map[uint64]bool{}
	for _, dev := range devs {
		if !d.want[dev] {
			continue
		}
		capBytes := ti.capacity[dev]
		applies := !isHostDevice(dev) || dev == "cgroup" || (dev == "host" && ti.capacity["cgroup"] > 0 && capBytes == ti.capacity["cgroup"]) ||
			(dev == "host" && capBytes < ti.capacity["ram"]) // the job's rlimit
		if capBytes == 0 || !applies || seen[capBytes] {
			continue
		}
		seen[capBytes] = true
		limits = append(limits, plotLimit{dev, capBytes, ranOut || peak >= nearLimit*toGiB(capBytes)})
	}
	return limits
}

// scaleY sets the vertical axis: from 0 to above the highest line and the
// limits drawn, with room for the labels on a labelled panel; in MiB when
// that is under 1 GiB.
func (d *panelDraw) scaleY(what string, peak float64, limits []plotLimit) {
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
	ymax *= yScale * 1.12 // room above the highest line
	if d.labels {
		ymax *= 1.15 // and for the labels
	}
	d.yScale, d.ymax = yScale, ymax
	d.p.Y.Label.Text = what + " (" + yUnit + ")"
	d.p.Y.Min, d.p.Y.Max = 0, ymax
	d.p.Y.Tick.Marker = plainTicks{}
}

// shadeValidation shades the validation spans, under the lines; a span too
// short to see is widened to 1/400 of the axis.
func (d *panelDraw) shadeValidation() error {
	first := true
	for _, sp := range valSpans(d.run, d.ti) {
		x0, x1 := d.x(sp.start), d.x(sp.end)
		if x1-x0 < (d.xmax-d.xmin)/400 {
			x1 = x0 + (d.xmax-d.xmin)/400
		}
		poly, err := d.shade(x0, x1, valColor)
		if err != nil {
			return err
		}
		if first {
			d.p.Legend.Add("validation", poly)
			first = false
		}
	}
	return nil
}

// shadeWaits shades the waits between attempts (checkpoint, GPU memory,
// backoff) grey, under the lines too.
func (d *panelDraw) shadeWaits() error {
	run := d.run
	waitSeen := false
	for i := 1; i < len(run.Attempts); i++ {
		prev, a := run.Attempts[i-1], run.Attempts[i]
		if prev.End == nil || a.Start == nil || run.origin.IsZero() || !a.Start.After(*prev.End) {
			continue
		}
		x0, x1 := d.x(prev.End.Sub(run.origin).Milliseconds()), d.x(a.Start.Sub(run.origin).Milliseconds())
		poly, err := d.shade(x0, x1, waitColor)
		if err != nil {
			return err
		}
		if !waitSeen {
			d.p.Legend.Add("waiting to relaunch", poly)
			waitSeen = true
		}
	}
	return nil
}

// shade adds a band from x0 to x1, the panel's full height, without edges.
func (d *panelDraw) shade(x0, x1 float64, c color.Color) (*plotter.Polygon, error) {
	ymax := d.ymax
	poly, err := plotter.NewPolygon(plotter.XYs{{X: x0, Y: 0}, {X: x1, Y: 0}, {X: x1, Y: ymax}, {X: x0, Y: ymax}})
	if err != nil {
		return nil, err
	}
	poly.Color = c
	poly.LineStyle.Width = 0
	poly.LineStyle.Color = nil
	d.p.Add(poly)
	return poly, nil
}

// drawLimits draws each limit dashed in its device's colour, or names it in
// the legend alone, "(far above)", when the memory stayed far below it.
func (d *panelDraw) drawLimits(limits []plotLimit) error {
	for _, l := range limits {
		name := "GPU capacity"
		switch l.dev {
		case "host", "cgroup":
			name = "cgroup limit"
			if l.dev == "host" && l.bytes != d.ti.capacity["cgroup"] {
				name = "host ceiling (rlimit)"
			}
		}
		line, err := plotter.NewLine(plotter.XYs{{X: d.xmin, Y: toGiB(l.bytes) * d.yScale}, {X: d.xmax, Y: toGiB(l.bytes) * d.yScale}})
		if err != nil {
			return err
		}
		line.Color = d.colorOf[l.dev]
		line.Width = vg.Points(1)
		line.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		label := fmt.Sprintf("%s %s", name, humanize.Bytes(l.bytes))
		if l.draw {
			d.p.Add(line)
		} else {
			line.Color = color.Transparent
			label += " (far above)"
		}
		d.p.Legend.Add(label, line)
	}
	return nil
}

// drawLines draws the devices' lines, one per attempt, one legend entry
// per device.
func (d *panelDraw) drawLines() error {
	inLegend := map[string]bool{}
	for _, k := range d.order {
		s := d.lines[k]
		if !d.want[s.dev] || len(s.pts) == 0 {
			continue
		}
		pts := make(plotter.XYs, len(s.pts))
		for i, pt := range s.pts {
			pts[i] = plotter.XY{X: pt.X, Y: pt.Y * d.yScale}
		}
		if len(pts) == 1 {
			pts = append(pts, pts[0])
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color = d.colorOf[s.dev]
		l.Width = vg.Points(1.4)
		if s.dev == "ram" {
			l.Width = vg.Points(1)
		}
		d.p.Add(l)
		if !inLegend[s.dev] {
			inLegend[s.dev] = true
			label := deviceLabel(s.dev)
			if s.dev == "ram" && d.ti.capacity["ram"] > 0 {
				label += " (of " + humanize.Bytes(d.ti.capacity["ram"]) + ")"
			}
			d.p.Legend.Add(label, l)
		}
	}
	return nil
}

// noteInLegend adds a line of text to the legend, with an invisible swatch.
func (d *panelDraw) noteInLegend(note string) {
	if note == "" {
		return
	}
	l, _ := plotter.NewLine(plotter.XYs{{X: d.xmin, Y: -1}, {X: d.xmin, Y: -1}})
	l.Color = color.Transparent
	d.p.Legend.Add(note, l)
}

// markAttempts marks each attempt: a bar along the top from its start to
// its end, dashed lines at both; its out-of-memory failure in red, with its
// figures.
func (d *panelDraw) markAttempts() error {
	if d.run.origin.IsZero() {
		return nil
	}
	oomSeen, spanSeen := false, false
	for _, a := range d.run.Attempts {
		if a.Start == nil {
			continue
		}
		if err := d.markSpan(a, !spanSeen); err != nil {
			return err
		}
		spanSeen = true
		oom, err := d.markOOM(a)
		if err != nil {
			return err
		}
		oomSeen = oomSeen || oom
	}
	if oomSeen {
		sw, _ := plotter.NewLine(plotter.XYs{{X: d.xmin, Y: -1}, {X: d.xmin, Y: -1}})
		sw.Color, sw.Width = oomColor, vg.Points(1.4)
		d.p.Legend.Add("out of memory", sw)
	}
	return nil
}

// markSpan draws an attempt's span (the bar, in the legend when inLegend,
// and the dashed lines at its start and end) and labels it with its name,
// its exit and what it was relaunched with.
func (d *panelDraw) markSpan(a *Attempt, inLegend bool) error {
	origin := d.run.origin
	dashed := []vg.Length{vg.Points(3), vg.Points(3)}
	x0 := d.x(a.Start.Sub(origin).Milliseconds())
	x1 := d.xmax
	if a.End != nil {
		x1 = d.x(a.End.Sub(origin).Milliseconds())
	}
	if err := d.vline(x0, startColor, dashed, vg.Points(1)); err != nil {
		return err
	}
	if a.End != nil {
		if err := d.vline(x1, startColor, dashed, vg.Points(1)); err != nil {
			return err
		}
	}
	bar, err := plotter.NewLine(plotter.XYs{{X: x0, Y: d.ymax * 0.995}, {X: x1, Y: d.ymax * 0.995}})
	if err != nil {
		return err
	}
	bar.Color, bar.Width = startColor, vg.Points(3)
	d.p.Add(bar)
	if inLegend {
		d.p.Legend.Add("attempt (start to end)", bar)
	}
	name := fmt.Sprintf("attempt %d", a.N)
	if a.ExitCode != nil {
		name += fmt.Sprintf(" (exit %d)", *a.ExitCode)
	}
	if what := changedFor(d.run, a.N); what != "" {
		// What the attempt was relaunched with, under its name.
		name += "\nwith " + what
	}
	d.label(x0, name, false, startColor)
	return nil
}

// markOOM draws an attempt's out-of-memory failure, if it had one: a red
// line at its time, labelled left of it, over the attempt it ended.
func (d *panelDraw) markOOM(a *Attempt) (marked bool, err error) {
	oomAt := oomTime(a) // one mark per attempt
	if oomAt.IsZero() {
		return false, nil
	}
	xo := d.x(oomAt.Sub(d.run.origin).Milliseconds())
	if err := d.vline(xo, oomColor, nil, vg.Points(1.4)); err != nil {
		return false, err
	}
	d.label(xo, oomLabel(a), true, oomColor)
	return true, nil
}

// vline draws a vertical line at xv, the panel's full height.
func (d *panelDraw) vline(xv float64, c color.Color, dashes []vg.Length, width vg.Length) error {
	l, err := plotter.NewLine(plotter.XYs{{X: xv, Y: 0}, {X: xv, Y: d.ymax}})
	if err != nil {
		return err
	}
	l.Color, l.Width, l.Dashes = c, width, dashes
	d.p.Add(l)
	return nil
}

// label writes s right of the line at xv or, if left and there is room,
// left of it (labelLayer places it); on a labelled panel only.
func (d *panelDraw) label(xv float64, s string, left bool, c color.Color) {
	if d.labels {
		d.marks.add(xv, s, left, c)
	}
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
		if o.InUseBytes != nil {
			fig = append(fig, humanize.Size(*o.InUseBytes)+" in use")
		}
		switch {
		case o.FreeBytes != nil && o.TotalBytes != nil:
			fig = append(fig, humanize.Size(*o.FreeBytes)+" free of "+humanize.Size(*o.TotalBytes))
		case o.FreeBytes != nil:
			fig = append(fig, humanize.Size(*o.FreeBytes)+" free")
		}
		// Two figures a line.
		for i := 0; i < len(fig); i += 2 {
			s += "\n" + strings.Join(fig[i:min(i+2, len(fig))], ", ")
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
