package failure

import (
	"image/color"
	"math"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

var failureColors = []color.RGBA{{0x1f, 0x77, 0xb4, 255}, {0xff, 0x7f, 0x0e, 255}, {0x2c, 0xa0, 0x2c, 255}, {0xd6, 0x27, 0x28, 255},
	{0x94, 0x67, 0xbd, 255}, {0x8c, 0x56, 0x4b, 255}, {0xe3, 0x77, 0xc2, 255}, {0x7f, 0x7f, 0x7f, 255}}

// plot draws one line per series over time (a gap where a value is
// unknown: the node was down), with vertical markers at the kill and the
// restart.
func (r *Result) plot(path, title, ylabel string, names []string, get func(failureSample) []float64, scale float64) error {
	xs := make([]float64, len(r.Samples))
	ys := make([][]float64, len(names))
	for i := range names {
		ys[i] = make([]float64, len(r.Samples))
	}
	for j, s := range r.Samples {
		xs[j] = s.T
		for i, v := range get(s) {
			ys[i][j] = v * scale
		}
	}
	return plotLines(path, "DiStash failure and recovery (paper Fig. 12): "+title, ylabel, xs, names, ys,
		[]timeMark{{r.KillT, "kill -9"}, {r.RestartT, "restart"}})
}

// timeMark is a dashed vertical line with a label (NaN t: none).
type timeMark struct {
	t     float64
	label string
}

// plotLines draws series ys[i] (named names[i]) against xs, a gap where
// a value is NaN, the y axis from 0 with the top third left free for the
// legend, and a dashed vertical line at each mark.
func plotLines(path, title, ylabel string, xs []float64, names []string, ys [][]float64, marks []timeMark) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = "time (s)"
	p.Y.Label.Text = ylabel
	p.Legend.Top = true
	p.Legend.Left = true
	maxY := 0.0
	for _, s := range ys {
		for _, v := range s {
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				maxY = max(maxY, v)
			}
		}
	}
	if maxY == 0 {
		maxY = 1
	}
	p.Y.Min, p.Y.Max = 0, maxY*1.5
	for i, name := range names {
		col := failureColors[i%len(failureColors)]
		var seg plotter.XYs
		first := true
		flush := func() error {
			if len(seg) == 0 {
				return nil
			}
			line, err := plotter.NewLine(seg)
			if err != nil {
				return err
			}
			line.Color = col
			line.Width = vg.Points(1.2)
			if i >= len(failureColors) { // more series than colours: dash the second round
				line.Dashes = []vg.Length{vg.Points(2), vg.Points(2)}
			}
			p.Add(line)
			if first {
				p.Legend.Add(name, line)
				first = false
			}
			seg = nil
			return nil
		}
		for j, x := range xs {
			v := ys[i][j]
			if math.IsNaN(v) || math.IsInf(v, 0) {
				if err := flush(); err != nil {
					return err
				}
				continue
			}
			seg = append(seg, plotter.XY{X: x, Y: v})
		}
		if err := flush(); err != nil {
			return err
		}
	}
	for _, m := range marks {
		if math.IsNaN(m.t) {
			continue
		}
		line, err := plotter.NewLine(plotter.XYs{{X: m.t, Y: 0}, {X: m.t, Y: maxY * 1.5}})
		if err != nil {
			return err
		}
		line.Color = color.Black
		line.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		p.Add(line)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: m.t, Y: maxY * 1.42}}, Labels: []string{" " + m.label}})
		if err != nil {
			return err
		}
		p.Add(lbl)
	}
	return p.Save(10*vg.Inch, 5*vg.Inch, path)
}
