package main

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// chart is one written image.
type chart struct{ title, file string }

// series is one named line.
type series struct {
	name string
	pts  plotter.XYs
}

// plots writes every chart the inputs allow into dir.
func (r *results) plots(dir string) ([]chart, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var out []chart
	for _, c := range []struct {
		file, title, x, y string
		logX              bool
		lines             []series
	}{
		{"bench-fanout.svg", "Fan-out: deliveries per CPU-second of the server", "subscribers", "deliveries / CPU-s", true, r.fanoutSeries()},
		{"bench-latency.svg", "Publish→deliver latency vs load", "events/s (one per request)", "ms", false, r.latencySeries()},
		{"bench-ingest.svg", "Ingest throughput vs batch size, real Kafka and embedded broker", "events per request", "accepted events/s", true, r.ingestSeries()},
	} {
		if len(c.lines) == 0 {
			continue
		}
		if err := savePlot(filepath.Join(dir, c.file), c.title, c.x, c.y, c.logX, c.lines); err != nil {
			return nil, fmt.Errorf("%s: %w", c.file, err)
		}
		out = append(out, chart{c.title, c.file})
	}
	return out, nil
}

func savePlot(path, title, x, y string, logX bool, lines []series) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	var args []any
	var maxX, maxY float64
	for _, l := range lines {
		args = append(args, l.name, l.pts)
		for _, pt := range l.pts {
			maxX, maxY = max(maxX, pt.X), max(maxY, pt.Y)
		}
	}
	if err := plotutil.AddLinePoints(p, args...); err != nil {
		return err
	}
	// Head room above the data for the legend, and room right of the last
	// point for its tick label.
	p.Y.Min, p.Y.Max = 0, maxY*1.45
	p.Legend.Top, p.Legend.Left = true, true
	p.Legend.XOffs = vg.Points(12)
	if logX {
		p.X.Max = maxX * 1.4
	} else {
		p.X.Max = maxX * 1.08
	}
	p.Add(plotter.NewGrid())
	return p.Save(7*vg.Inch, 4.5*vg.Inch, path)
}

func (r *results) fanoutSeries() []series {
	if r.fanout == nil {
		return nil
	}
	var out []series
	for _, peer := range []string{"gateway", "centrifugo"} {
		for _, tr := range []string{"sse", "ws"} {
			var pts plotter.XYs
			for _, n := range r.fanout.subscriberCounts() {
				if v, ok := r.fanout.perCPU(peer, tr, n); ok {
					pts = append(pts, plotter.XY{X: float64(n), Y: v})
				}
			}
			if len(pts) > 0 {
				out = append(out, series{peer + " " + transportName[tr][0], pts})
			}
		}
	}
	return out
}

func (r *results) latencySeries() []series {
	if r.latency == nil {
		return nil
	}
	var out []series
	for _, path := range []string{"gateway", "direct"} {
		for _, q := range []string{"p50", "p90", "p99"} {
			var pts plotter.XYs
			for _, x := range r.latency.Runs {
				if x.Path != path {
					continue
				}
				v := map[string]float64{"p50": x.Latency.P50, "p90": x.Latency.P90, "p99": x.Latency.P99}[q]
				pts = append(pts, plotter.XY{X: x.Rate, Y: v})
			}
			sort.Slice(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
			if len(pts) > 0 {
				out = append(out, series{path + " " + q, pts})
			}
		}
	}
	return out
}

func (r *results) ingestSeries() []series {
	var out []series
	for _, broker := range []struct{ prefix, name string }{{"", ""}, {"emb-", ", embedded broker"}} {
		var g, d plotter.XYs
		for _, k := range []string{"1", "100", "1000"} {
			x := r.ingest[broker.prefix+k]
			if x == nil || x.Baseline == nil {
				continue
			}
			g = append(g, plotter.XY{X: float64(x.Batch), Y: x.Gateway.AcceptedPerS})
			d = append(d, plotter.XY{X: float64(x.Batch), Y: x.Baseline.AcceptedPerS})
		}
		if len(g) > 0 {
			out = append(out, series{"gateway" + broker.name, g}, series{"franz-go direct" + broker.name, d})
		}
	}
	return out
}
