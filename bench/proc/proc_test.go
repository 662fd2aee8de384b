package proc

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
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

func TestStateTellsAZombie(t *testing.T) {
	// A live child is in some state other than 'Z'. (Our own state would
	// not do: /proc/<pid>/stat shows the main thread's, which may sleep while
	// another thread runs this test.)
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	if state, err := State(pid); err != nil || state == 'Z' {
		t.Errorf("state of a live child = %q, %v; want a live state", state, err)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	// Not waited for, the killed child stays a zombie.
	deadline := time.Now().Add(10 * time.Second)
	for {
		state, err := State(pid)
		if err != nil {
			t.Fatal(err)
		}
		if state == 'Z' {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child %d still in state %q after 10 s", pid, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
	_ = cmd.Wait()
	if _, err := State(pid); err == nil {
		t.Error("State of a reaped process gave no error")
	}
}

func TestLogTailKeepsTheEndAfterOffset(t *testing.T) {
	path := filepath.Join(t.TempDir(), "log")
	earlier := "from an earlier start\n"
	if err := os.WriteFile(path, []byte(earlier+strings.Repeat("x", 3000)+"last words\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tail := LogTail(path, int64(len(earlier)))
	if len(tail) != 2000-1 || !strings.HasSuffix(tail, "last words") {
		t.Errorf("tail of %d bytes ending %q, want the last 2,000 bytes trimmed", len(tail), tail[len(tail)-10:])
	}
	if got := LogTail(path, 1<<20); got != "" {
		t.Errorf("an offset past the end gave %q", got)
	}
}

func TestAvailableMemoryIsPartOfTheMachines(t *testing.T) {
	available, err := AvailableMemoryBytes()
	if err != nil {
		t.Fatal(err)
	}
	total, err := kilobytesField("/proc/meminfo", "MemTotal")
	if err != nil {
		t.Fatal(err)
	}
	if available <= 0 || available > total {
		t.Errorf("available memory %d bytes, not within the machine's %d", available, total)
	}
}

func TestKilobytesFieldNamesWhatIsMissing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "meminfo")
	if err := os.WriteFile(path, []byte("MemTotal:       24683548 kB\nMemAvailableX:  1 kB\nMemAvailable:    2048 kB\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, err := kilobytesField(path, "MemAvailable"); err != nil || got != 2048<<10 {
		t.Errorf("MemAvailable = %d, %v; want %d", got, err, 2048<<10)
	}
	if _, err := kilobytesField(path, "SwapFree"); err == nil || !strings.Contains(err.Error(), "SwapFree") {
		t.Errorf("a missing field gave %v, want an error naming it", err)
	}
}
