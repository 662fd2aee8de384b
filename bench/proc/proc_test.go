package proc

import (
	"os"
	"testing"
	"time"
)

func TestOwnProcess(t *testing.T) {
	before, err := CPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Burn some CPU so the counter must move.
	for start := time.Now(); time.Since(start) < 200*time.Millisecond; {
	}
	after, err := CPUSeconds(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if after <= before {
		t.Errorf("CPU seconds did not grow over 200 ms of spinning: %v then %v", before, after)
	}
	rss, err := PeakRSSBytes(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if rss < 1<<20 {
		t.Errorf("peak RSS %d bytes: a Go test binary holds more than 1 MiB", rss)
	}
}

func TestGoneProcess(t *testing.T) {
	// PID 0 has no /proc entry.
	if _, err := CPUSeconds(0); err == nil {
		t.Error("CPUSeconds(0) gave no error")
	}
	if _, err := PeakRSSBytes(0); err == nil {
		t.Error("PeakRSSBytes(0) gave no error")
	}
}
