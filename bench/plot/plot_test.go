package plot

import (
	"encoding/xml"
	"strings"
	"testing"
)

// wellFormed parses the SVG as XML and counts elements by name.
func wellFormed(t *testing.T, svg string) map[string]int {
	t.Helper()
	counts := map[string]int{}
	dec := xml.NewDecoder(strings.NewReader(svg))
	for {
		tok, err := dec.Token()
		if err != nil {
			if err.Error() == "EOF" {
				return counts
			}
			t.Fatalf("not well-formed XML: %v\n%s", err, svg)
		}
		if start, ok := tok.(xml.StartElement); ok {
			counts[start.Name.Local]++
		}
	}
}

func TestLines(t *testing.T) {
	var b strings.Builder
	err := Lines(&b, Chart{Title: "a < b & c", XLabel: "s", YLabel: "VMIs"}, []Series{
		{Name: "Running", Points: [][2]float64{{0, 0}, {1, 10}, {2, 30}}},
		{Name: "created", Points: [][2]float64{{0, 5}, {2, 50}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	counts := wellFormed(t, b.String())
	if counts["polyline"] != 2 {
		t.Errorf("got %d polylines, want one per series (2)", counts["polyline"])
	}
	if !strings.Contains(b.String(), "a &lt; b &amp; c") {
		t.Error("the title is not escaped")
	}
	// The y axis is rounded up to 50, so the top point lies on the top line.
	if !strings.Contains(b.String(), ">50<") {
		t.Errorf("no y tick at the rounded maximum 50:\n%s", b.String())
	}
}

func TestBars(t *testing.T) {
	var b strings.Builder
	if err := Bars(&b, Chart{Title: "RSS"}, []Bar{{"1 replica", 148}, {"virtshard-0", 40}}); err != nil {
		t.Fatal(err)
	}
	if counts := wellFormed(t, b.String()); counts["rect"] != 3 { // background and two bars
		t.Errorf("got %d rects, want 3", counts["rect"])
	}
}

func TestNiceCeil(t *testing.T) {
	for in, want := range map[float64]float64{0: 1, 0.3: 0.4, 1: 1, 7: 8, 12: 20, 61.4: 80, 148: 200, 50000: 50000} {
		if got := niceCeil(in); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", in, got, want)
		}
	}
}
