package report

import (
	"image/color"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// labelLayer writes a panel's labels (each attempt's name, each
// out-of-memory failure with its figures) where they fit. It places them
// when the panel is drawn, in the canvas's own units, since only then is
// the size of the data area, and of each label, known: each label stands
// beside its vertical line (right of it, or left when it asks and there is
// room), inside the data area, below the attempts' bars, and lower down
// past every label placed before it that it would cover. Labels are placed
// in the order they were added.
type labelLayer struct {
	items []labelItem
	// placed: where the last Plot put each label, and the data area it
	// had; for the tests, which check the layout and not pixels.
	placed []vg.Rectangle
	area   vg.Rectangle
}

type labelItem struct {
	x     float64 // the line it belongs to, in data units
	text  string
	left  bool // left of its line when there is room (an OOM, over the attempt it ended)
	color color.Color
}

var labelGround = color.NRGBA{255, 255, 255, 190}

// labelGap is the space between a label and its line, and between labels.
const labelGap = vg.Length(3)

// labelTop is how far below the top of the data area labels start: under
// the attempts' bars.
const labelTop = vg.Length(5)

func (l *labelLayer) add(x float64, s string, left bool, c color.Color) {
	l.items = append(l.items, labelItem{x: x, text: s, left: left, color: c})
}

func (l *labelLayer) style(c color.Color) text.Style {
	return text.Style{Color: c, Font: font.From(plot.DefaultFont, vg.Points(8)), Handler: plot.DefaultTextHandler,
		XAlign: text.XLeft, YAlign: text.YTop}
}

// Plot implements plot.Plotter.
func (l *labelLayer) Plot(c draw.Canvas, p *plot.Plot) {
	trX, _ := p.Transforms(&c)
	l.area = c.Rectangle
	l.placed = l.placed[:0]
	for _, it := range l.items {
		sty := l.style(it.color)
		box := sty.Rectangle(it.text)
		w, h := box.Max.X-box.Min.X, box.Max.Y-box.Min.Y
		ax := trX(it.x)
		right, left := ax+labelGap, ax-labelGap-w
		fitsRight, fitsLeft := right+w <= c.Max.X, left >= c.Min.X
		var x vg.Length
		switch {
		case it.left && fitsLeft, !fitsRight && fitsLeft:
			x = left
		case fitsRight:
			x = right
		default: // wider than either side: against the nearer edge
			x = max(c.Min.X, min(c.Max.X-w, ax-w/2))
		}
		top := c.Max.Y - labelTop
		for moved := true; moved; {
			moved = false
			r := vg.Rectangle{Min: vg.Point{X: x, Y: top - h}, Max: vg.Point{X: x + w, Y: top}}
			for _, q := range l.placed {
				if overlaps(r, q) {
					top = q.Min.Y - labelGap
					moved = true
				}
			}
		}
		if top-h < c.Min.Y {
			// No room left below: it goes where it was first meant to
			// (the tests say so if it ever happens).
			top = c.Max.Y - labelTop
		}
		r := vg.Rectangle{Min: vg.Point{X: x, Y: top - h}, Max: vg.Point{X: x + w, Y: top}}
		l.placed = append(l.placed, r)
		// A pale ground, so that the lines under a label do not cross
		// its words.
		pad := vg.Points(1)
		c.FillPolygon(labelGround, []vg.Point{{X: r.Min.X - pad, Y: r.Min.Y - pad}, {X: r.Max.X + pad, Y: r.Min.Y - pad},
			{X: r.Max.X + pad, Y: r.Max.Y + pad}, {X: r.Min.X - pad, Y: r.Max.Y + pad}})
		c.FillText(sty, vg.Point{X: x - box.Min.X, Y: top - box.Max.Y}, it.text)
	}
}

// overlaps reports whether two rectangles share more than an edge.
func overlaps(a, b vg.Rectangle) bool {
	return a.Min.X < b.Max.X && b.Min.X < a.Max.X && a.Min.Y < b.Max.Y && b.Min.Y < a.Max.Y
}

// plainTicks are gonum's default ticks written without trailing zeros
// ("25", not "25.00").
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
