// Package plot draws the bench's figures as small, dependency-free SVG
// files: line charts (throughput over time, latency CDFs) and bar charts
// (memory per replica).
package plot

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Series is one line of a line chart.
type Series struct {
	Name   string
	Points [][2]float64
}

// Bar is one bar of a bar chart.
type Bar struct {
	Label string
	Value float64
}

// Chart is what every chart has.
type Chart struct {
	Title, XLabel, YLabel string
}

const (
	width, height           = 640, 360
	left, right, top, below = 64, 150, 36, 48
)

var colors = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}

// Lines writes a line chart of series to w.
func Lines(w io.Writer, c Chart, series []Series) error {
	xmax, ymax := 0.0, 0.0
	for _, s := range series {
		for _, p := range s.Points {
			xmax, ymax = math.Max(xmax, p[0]), math.Max(ymax, p[1])
		}
	}
	xmax, ymax = niceCeil(xmax), niceCeil(ymax)
	var b strings.Builder
	c.frame(&b, xmax, ymax, true)
	for i, s := range series {
		color := colors[i%len(colors)]
		var pts []string
		for _, p := range s.Points {
			x, y := scale(p[0], xmax, left, width-right), height-below-scale(p[1], ymax, 0, height-top-below)
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		ly := top + 16*i
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="2"/>`, width-right+10, ly, width-right+28, ly, color)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11">%s</text>`+"\n", width-right+32, ly+4, html.EscapeString(s.Name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// Bars writes a bar chart to w.
func Bars(w io.Writer, c Chart, bars []Bar) error {
	ymax := 0.0
	for _, bar := range bars {
		ymax = math.Max(ymax, bar.Value)
	}
	ymax = niceCeil(ymax)
	var b strings.Builder
	c.frame(&b, 0, ymax, false)
	slot := float64(width-left-right) / float64(max(len(bars), 1))
	for i, bar := range bars {
		h := scale(bar.Value, ymax, 0, height-top-below)
		x := float64(left) + slot*float64(i) + slot*0.15
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"/>`+"\n",
			x, float64(height-below)-h, slot*0.7, h, colors[0])
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="10" text-anchor="middle">%s</text>`+"\n",
			x+slot*0.35, float64(height-below)-h-4, formatTick(bar.Value))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>`+"\n",
			x+slot*0.35, height-below+14, html.EscapeString(bar.Label))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// frame draws the canvas, title, axes, grid and tick labels.
func (c Chart) frame(b *strings.Builder, xmax, ymax float64, xTicks bool) {
	fmt.Fprintf(b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n",
		width, height, width, height)
	fmt.Fprintf(b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(c.Title))
	for i := 0; i <= 4; i++ {
		v := ymax * float64(i) / 4
		y := height - below - scale(v, ymax, 0, height-top-below)
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`, left, y, width-right, y)
		fmt.Fprintf(b, `<text x="%d" y="%.1f" font-size="10" text-anchor="end">%s</text>`+"\n", left-6, y+3, formatTick(v))
		if xTicks {
			xv := xmax * float64(i) / 4
			x := scale(xv, xmax, left, width-right)
			fmt.Fprintf(b, `<text x="%.1f" y="%d" font-size="10" text-anchor="middle">%s</text>`+"\n", x, height-below+14, formatTick(xv))
		}
	}
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`, left, height-below, width-right, height-below)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, height-below)
	fmt.Fprintf(b, `<text x="%d" y="%d" font-size="11" text-anchor="middle">%s</text>`+"\n",
		(left+width-right)/2, height-12, html.EscapeString(c.XLabel))
	fmt.Fprintf(b, `<text x="14" y="%d" font-size="11" text-anchor="middle" transform="rotate(-90 14 %d)">%s</text>`+"\n",
		(top+height-below)/2, (top+height-below)/2, html.EscapeString(c.YLabel))
}

// scale maps v in [0, vmax] onto [from, to].
func scale(v, vmax float64, from, to int) float64 {
	if vmax <= 0 {
		return float64(from)
	}
	return float64(from) + v/vmax*float64(to-from)
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten, so ticks at
// quarters read well.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 4, 5, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func formatTick(v float64) string {
	switch {
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.2g", v)
	}
}
