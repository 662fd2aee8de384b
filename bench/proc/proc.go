// Package proc reads a local process's CPU time and peak memory, and the
// machine's available memory, from /proc,
// so the bench measures replicas and the cluster's components alike, even a
// process that no longer answers on its metrics port; and it has what
// starting one needs: a free loopback address, the tail of its log.
package proc

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// stat returns the fields of /proc/<pid>/stat after the command name,
// which is in parentheses and may hold spaces: the state (field 3) is the
// first.
func stat(pid int) (string, []string, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", nil, err
	}
	s := string(raw)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 13 {
		return "", nil, fmt.Errorf("short /proc/%d/stat", pid)
	}
	return s, fields, nil
}

// State is pid's state: 'R' running, 'S' sleeping, 'Z' zombie, …
func State(pid int) (byte, error) {
	_, fields, err := stat(pid)
	if err != nil {
		return 0, err
	}
	return fields[0][0], nil
}

// CPUSeconds is the user and system CPU time pid has used so far.
func CPUSeconds(pid int) (float64, error) {
	// utime and stime are fields 14 and 15.
	s, fields, err := stat(pid)
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.ParseFloat(fields[11], 64)
	stime, err2 := strconv.ParseFloat(fields[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("parse /proc/%d/stat: %q", pid, s)
	}
	return (utime + stime) / clockTicks, nil
}

// PeakRSSBytes is the peak resident set size of pid (VmHWM).
func PeakRSSBytes(pid int) (int64, error) {
	return kilobytesField(fmt.Sprintf("/proc/%d/status", pid), "VmHWM")
}

// AvailableMemoryBytes is the machine's memory available for new work
// without swapping (MemAvailable): what a load test must leave room in.
func AvailableMemoryBytes() (int64, error) {
	return kilobytesField("/proc/meminfo", "MemAvailable")
}

// kilobytesField reads the field "name:  N kB" of a /proc file, in bytes.
func kilobytesField(path, name string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	scanner := bufio.NewScanner(f)
	for scanner.Scan() {
		if rest, ok := strings.CutPrefix(scanner.Text(), name+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in %s", name, path)
}

// LogTail returns the last 2,000 bytes of what a process logged to path
// from offset on: why it exited, for an error.
func LogTail(path string, offset int64) string {
	data, err := os.ReadFile(path)
	if err != nil || int64(len(data)) < offset {
		return ""
	}
	data = data[offset:]
	if len(data) > 2000 {
		data = data[len(data)-2000:]
	}
	return strings.TrimSpace(string(data))
}

// FreeAddress returns a loopback address whose port was free a moment ago,
// for a process to listen on; the caller retries if another took it since.
func FreeAddress() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}
