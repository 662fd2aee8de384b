package bench

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/virtshard/virtshard/bench/plot"
)

// cdf is one latency distribution to plot.
type cdf struct {
	name   string
	sorted []time.Duration
}

// writeOut writes a run's raw data, plots and CPU profiles into dir:
// report.json, timeline.csv, latency.csv, throughput.svg, latency-cdf.svg
// and cpu-<replica>.pprof; the replicas must have stopped.
func (r *vmiRun) writeOut(dir string, rep *Report) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "report.json"), func(f *os.File) error { return writeJSON(f, rep) }); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "timeline.csv"), func(f *os.File) error {
		w := csv.NewWriter(f)
		_ = w.Write([]string{"seconds", "created", "scheduled", "running", "active_ranges"})
		for _, s := range rep.Timeline {
			_ = w.Write([]string{strconv.FormatFloat(s.Seconds, 'f', 3, 64), strconv.Itoa(s.Created), strconv.Itoa(s.Scheduled), strconv.Itoa(s.Running),
				strconv.Itoa(s.ActiveRanges)})
		}
		w.Flush()
		return w.Error()
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "latency.csv"), func(f *os.File) error {
		w := csv.NewWriter(f)
		_ = w.Write([]string{"distribution", "seconds"})
		for _, c := range r.cdfs {
			for _, d := range c.sorted {
				_ = w.Write([]string{c.name, strconv.FormatFloat(d.Seconds(), 'f', 3, 64)})
			}
		}
		w.Flush()
		return w.Error()
	}); err != nil {
		return err
	}
	title := fmt.Sprintf("%s: %d VMIs, %d replicas", rep.Scenario, rep.VMIs, rep.Replicas)
	if err := writeFile(filepath.Join(dir, "throughput.svg"), func(f *os.File) error {
		return plot.Lines(f, plot.Chart{Title: title, XLabel: "seconds", YLabel: "VMIs"}, timelineSeries(rep.Timeline))
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "ranges.svg"), func(f *os.File) error {
		active := plot.Series{Name: "ranges acted on"}
		for _, s := range rep.Timeline {
			if s.ActiveRanges >= 0 {
				active.Points = append(active.Points, [2]float64{s.Seconds, float64(s.ActiveRanges)})
			}
		}
		return plot.Lines(f, plot.Chart{Title: title + ": ranges acted on", XLabel: "seconds", YLabel: "ranges"}, []plot.Series{active})
	}); err != nil {
		return err
	}
	if err := writeFile(filepath.Join(dir, "latency-cdf.svg"), func(f *os.File) error {
		var series []plot.Series
		for _, c := range r.cdfs {
			series = append(series, cdfSeries(c))
		}
		return plot.Lines(f, plot.Chart{Title: title + ": latency CDF", XLabel: "seconds", YLabel: "fraction of VMIs"}, series)
	}); err != nil {
		return err
	}
	if r.profiles != nil {
		return r.profiles.write(dir)
	}
	return nil
}

func writeFile(path string, write func(*os.File) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// timelineSeries are the created, Scheduled and Running counts over time:
// the slope of Running is the throughput.
func timelineSeries(samples []Sample) []plot.Series {
	created, scheduled, running := plot.Series{Name: "created"}, plot.Series{Name: "Scheduled"}, plot.Series{Name: "Running"}
	for _, s := range samples {
		created.Points = append(created.Points, [2]float64{s.Seconds, float64(s.Created)})
		scheduled.Points = append(scheduled.Points, [2]float64{s.Seconds, float64(s.Scheduled)})
		running.Points = append(running.Points, [2]float64{s.Seconds, float64(s.Running)})
	}
	return []plot.Series{created, scheduled, running}
}

// cdfSeries plots a sorted distribution as a CDF, at most 200 points.
func cdfSeries(c cdf) plot.Series {
	s := plot.Series{Name: c.name}
	n := len(c.sorted)
	step := max(n/200, 1)
	for i := 0; i < n; i += step {
		s.Points = append(s.Points, [2]float64{c.sorted[i].Seconds(), float64(i+1) / float64(n)})
	}
	if n > 0 {
		s.Points = append(s.Points, [2]float64{c.sorted[n-1].Seconds(), 1})
	}
	return s
}
