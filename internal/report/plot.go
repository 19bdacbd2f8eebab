package report

import (
	"fmt"
	"image/color"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/gpuguard/gpuguard/internal/humanize"
	"github.com/gpuguard/gpuguard/internal/probes/memory"
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
	valColor    = color.NRGBA{255, 165, 0, 60} // translucent: lines stay visible
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
		return err
	}
	defer f.Close()
	lines := map[[2]string]*series{}
	var order [][2]string
	err = memory.ReadTimeline(f, func(r memory.TimelineRow) error {
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
		return err
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
		p, err := panel(run, ti, lines, order, gpuDevs, "GPU memory (GiB)", unit, x, xmin, xmax, true)
		if err != nil {
			return err
		}
		p.Title.Text = "gpuguard memory timeline: " + name
		panels = append(panels, p)
	}
	if len(hostDevs) > 0 {
		p, err := panel(run, ti, lines, order, hostDevs, "host memory (GiB)", unit, x, xmin, xmax, len(gpuDevs) == 0)
		if err != nil {
			return err
		}
		if len(gpuDevs) == 0 {
			p.Title.Text = "gpuguard memory timeline: " + name + " (no GPU sampled)"
		}
		panels = append(panels, p)
	}
	if len(panels) == 0 {
		return fmt.Errorf("the timeline has no rows")
	}
	width, height := 11*vg.Inch, 4*vg.Inch*vg.Length(len(panels))+0.6*vg.Inch
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
	canvases := plot.Align(grid, tiles, draw.New(c))
	for i, p := range panels {
		p.Draw(canvases[i][0])
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

// panel draws one panel: the devices' lines, their limits, validation
// shading and event markers (labelled on the top panel).
func panel(run *Run, ti *timelineInfo, lines map[[2]string]*series, order [][2]string, devs []string,
	ylabel, unit string, x func(int64) float64, xmin, xmax float64, labels bool) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "time since the run started (" + unit + ")"
	p.Y.Label.Text = ylabel
	p.X.Min, p.X.Max = xmin, xmax
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(9)
	p.Add(plotter.NewGrid())

	want := map[string]bool{}
	ymax := 0.0
	for _, d := range devs {
		want[d] = true
		ymax = max(ymax, float64(ti.capacity[d])/(1<<30))
	}
	for _, k := range order {
		if s := lines[k]; want[s.dev] {
			for _, pt := range s.pts {
				ymax = max(ymax, pt.Y)
			}
		}
	}
	if ymax <= 0 {
		ymax = 1
	}
	ymax *= 1.3 // room for the legend above the lines
	p.Y.Min, p.Y.Max = 0, ymax

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

	// Limits: one dashed line per distinct capacity.
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
	drawn := map[uint64]bool{}
	for _, d := range devs {
		capBytes := ti.capacity[d]
		if capBytes == 0 || drawn[capBytes] {
			continue
		}
		drawn[capBytes] = true
		l, err := plotter.NewLine(plotter.XYs{{X: xmin, Y: toGiB(capBytes)}, {X: xmax, Y: toGiB(capBytes)}})
		if err != nil {
			return nil, err
		}
		l.Color = colorOf[d]
		l.Width = vg.Points(1)
		l.Dashes = []vg.Length{vg.Points(6), vg.Points(3)}
		p.Add(l)
		what := "capacity"
		switch d {
		case "host":
			what = "job's limit"
		case "cgroup":
			what = "cgroup limit"
		case "ram":
			what = "RAM"
		}
		if !isHostDevice(d) {
			what = "GPU capacity"
		}
		p.Legend.Add(fmt.Sprintf("%s %s", what, humanize.Bytes(capBytes)), l)
	}

	// The devices' lines, one per attempt, one legend entry per device.
	inLegend := map[string]bool{}
	for _, k := range order {
		s := lines[k]
		if !want[s.dev] || len(s.pts) == 0 {
			continue
		}
		pts := s.pts
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
			p.Legend.Add(deviceLabel(s.dev), l)
		}
	}

	// Events: OOMs and relaunches.
	origin := run.origin
	var marks plotter.XYLabels
	addMark := func(xv float64, label string, c color.Color, dashed bool, height float64) error {
		l, err := plotter.NewLine(plotter.XYs{{X: xv, Y: 0}, {X: xv, Y: ymax}})
		if err != nil {
			return err
		}
		l.Color = c
		l.Width = vg.Points(1.2)
		if dashed {
			l.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
		}
		p.Add(l)
		if labels {
			marks.XYs = append(marks.XYs, plotter.XY{X: xv, Y: ymax * height})
			marks.Labels = append(marks.Labels, label)
		}
		return nil
	}
	if !origin.IsZero() {
		oomSeen := false
		for _, a := range run.Attempts {
			if a.Start != nil && a.N > 1 {
				if err := addMark(x(a.Start.Sub(origin).Milliseconds()), fmt.Sprintf(" attempt %d", a.N), startColor, true, 0.96); err != nil {
					return nil, err
				}
			}
			for _, f := range a.Failures {
				if !strings.HasSuffix(f.Kind, "oom") {
					continue
				}
				if err := addMark(x(f.Time.Sub(origin).Milliseconds()), " "+f.Kind, oomColor, false, 0.90); err != nil {
					return nil, err
				}
				oomSeen = true
				break // one mark per attempt
			}
			if len(a.Failures) == 0 && a.Verdict != nil && strings.HasSuffix(string(a.Verdict.Kind), "oom") && a.End != nil {
				if err := addMark(x(a.End.Sub(origin).Milliseconds()), " "+string(a.Verdict.Kind), oomColor, false, 0.90); err != nil {
					return nil, err
				}
				oomSeen = true
			}
		}
		if oomSeen {
			sw, _ := plotter.NewLine(plotter.XYs{{X: xmin, Y: -1}, {X: xmin, Y: -1}})
			sw.Color, sw.Width = oomColor, vg.Points(1.2)
			p.Legend.Add("out of memory", sw)
		}
	}
	if len(marks.XYs) > 0 {
		lb, err := plotter.NewLabels(marks)
		if err != nil {
			return nil, err
		}
		for i := range lb.TextStyle {
			lb.TextStyle[i].Font.Size = vg.Points(8)
			lb.TextStyle[i].Color = startColor
		}
		p.Add(lb)
	}
	return p, nil
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
