package bench

import "testing"

func TestSetAvailability(t *testing.T) {
	r := &Report{Timeline: []Sample{
		{Seconds: 1, ActiveRanges: 64},
		{Seconds: 2, ActiveRanges: -1}, // not asked: skipped
		{Seconds: 3, ActiveRanges: 48}, // 16 unserved for the 2 s since the last count
		{Seconds: 4, ActiveRanges: 40},
		{Seconds: 4.5, ActiveRanges: 40},
		{Seconds: 5.5, ActiveRanges: 64},
	}}
	r.setAvailability(64)
	if r.Ranges != 64 || r.MinActiveRanges != 40 || r.MinActiveAtSeconds != 4 {
		t.Errorf("ranges %d, fewest active %d at %.1f s; want 64, 40 at 4 s", r.Ranges, r.MinActiveRanges, r.MinActiveAtSeconds)
	}
	if want := 16*2 + 24*1 + 24*0.5; r.UnservedRangeSeconds != want {
		t.Errorf("%.1f range-seconds unserved, want %.1f", r.UnservedRangeSeconds, want)
	}

	none := &Report{Timeline: []Sample{{Seconds: 1, ActiveRanges: -1}}}
	none.setAvailability(64)
	if none.Ranges != 0 || none.MinActiveRanges != 0 {
		t.Errorf("no sample counted ranges, yet the report says %d of %d", none.MinActiveRanges, none.Ranges)
	}
}
