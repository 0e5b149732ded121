package farmem

import (
	"fmt"
	"image/color"
	"os"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/distash/distash/internal/farmem/model"
)

var seriesColors = []color.Color{
	color.RGBA{R: 0x94, G: 0x00, B: 0xd3, A: 0xff},
	color.RGBA{R: 0x00, G: 0x9e, B: 0x73, A: 0xff},
	color.RGBA{R: 0xe6, G: 0x9f, B: 0x00, A: 0xff},
	color.RGBA{R: 0x56, G: 0xb4, B: 0xe9, A: 0xff},
	color.RGBA{R: 0xd5, G: 0x5e, B: 0x00, A: 0xff},
	color.RGBA{R: 0x00, G: 0x72, B: 0xb2, A: 0xff},
}

// plotReport draws one panel per workload: measured normalized throughput
// as points and the interleaving model as a line per series (its closed
// form dashed), over a logarithmic latency axis.
func plotReport(rep *Report, path string) error {
	var workloads []string
	byW := map[string][]*Series{}
	for _, s := range rep.Series {
		if _, ok := byW[s.Workload]; !ok {
			workloads = append(workloads, s.Workload)
		}
		byW[s.Workload] = append(byW[s.Workload], s)
	}
	var row []*plot.Plot
	for _, w := range workloads {
		p := plot.New()
		p.Title.Text = map[string]string{
			"chase": "microbenchmark: pointer chase + 4 KiB read",
			"ycsb":  "flash engine, YCSB read-mostly, zipfian",
		}[w]
		p.X.Label.Text = "memory latency L_mem [µs]"
		p.Y.Label.Text = fmt.Sprintf("throughput normalized to L_mem=%gµs", float64(rep.Options.Latencies[0])/1000)
		p.X.Scale = plot.LogScale{}
		var ticks []plot.Tick
		for _, l := range rep.Options.Latencies {
			ticks = append(ticks, plot.Tick{Value: float64(l) / 1000, Label: fmt.Sprintf("%g", float64(l)/1000)})
		}
		p.X.Tick.Marker = plot.ConstantTicks(ticks)
		top := 1.1
		for _, s := range byW[w] {
			for _, pt := range s.Points {
				top = max(top, pt.Normalized*1.05)
			}
		}
		p.Y.Min, p.Y.Max = 0, top
		p.Legend.Top = false
		p.Legend.Left = true
		for i, s := range byW[w] {
			col := seriesColors[i%len(seriesColors)]
			var pts, bad plotter.XYs
			for _, pt := range s.Points {
				xy := plotter.XY{X: float64(pt.Latency) / 1000, Y: pt.Normalized}
				if pt.Disturbed {
					bad = append(bad, xy)
				} else {
					pts = append(pts, xy)
				}
			}
			if len(bad) > 0 { // preempted runs: crosses, not in the legend
				sc, err := plotter.NewScatter(bad)
				if err != nil {
					return err
				}
				sc.GlyphStyle.Color = col
				sc.GlyphStyle.Radius = vg.Points(3)
				sc.GlyphStyle.Shape = draw.CrossGlyph{}
				p.Add(sc)
			}
			sc, err := plotter.NewScatter(pts)
			if err != nil {
				return err
			}
			sc.GlyphStyle.Color = col
			sc.GlyphStyle.Radius = vg.Points(3)
			sc.GlyphStyle.Shape = draw.CircleGlyph{}
			label := s.Name()[len(w)+1:]
			p.Add(sc)
			p.Legend.Add(label+" measured", sc)

			for j, v := range []model.Variant{model.Interleaved, model.Probabilistic} {
				var curve plotter.XYs
				lo, hi := float64(rep.Options.Latencies[0]), float64(rep.Options.Latencies[len(rep.Options.Latencies)-1])
				for x := lo; x <= hi*1.0001; x *= 1.12 {
					curve = append(curve, plotter.XY{X: x / 1000, Y: s.Params.Normalized(v, x, lo)})
				}
				ln, err := plotter.NewLine(curve)
				if err != nil {
					return err
				}
				ln.LineStyle.Color = col
				ln.LineStyle.Width = vg.Points(1)
				if j == 1 {
					ln.LineStyle.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
				}
				p.Add(ln)
				if j == 0 {
					p.Legend.Add(label+" model", ln)
				}
			}
		}
		row = append(row, p)
	}
	const w, h = 7 * vg.Inch, 5 * vg.Inch
	img := vgimg.New(w*vg.Length(len(row)), h)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 1, Cols: len(row), PadX: vg.Inch / 4, PadTop: vg.Inch / 8, PadBottom: vg.Inch / 8, PadLeft: vg.Inch / 8, PadRight: vg.Inch / 8}
	canvases := plot.Align([][]*plot.Plot{row}, tiles, dc)
	for i, p := range row {
		p.Draw(canvases[0][i])
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
