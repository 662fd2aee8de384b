package bench

import (
	"slices"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		check   func(*Options) bool
	}{
		{"defaults are valid", nil, false, func(o *Options) bool {
			return slices.Equal(o.Scenarios, []string{ScenarioThroughput}) && o.VMIs == 2000 && o.Replicas == 3
		}},
		{"a scenario brings its defaults", []string{"--scenario", "scale"}, false, func(o *Options) bool { return o.VMIs == 50000 && o.Replicas == 4 && o.Rate == 4 }},
		{"latency runs at KubeVirt's job rate by default", []string{"--scenario", "latency"}, false, func(o *Options) bool { return o.Rate == 10 }},
		{"flags win over scenario defaults", []string{"--scenario", "latency", "--rate", "0", "--vmis", "7"}, false,
			func(o *Options) bool { return o.Rate == 0 && o.VMIs == 7 }},
		{"singleton is 1 active and 1 standby", []string{"--scenario", "singleton", "--replicas", "3"}, true, nil},
		{"failover needs a survivor", []string{"--scenario", "failover", "--replicas", "1"}, true, nil},
		{"a VMI scenario runs alone", []string{"--scenario", "latency,scale"}, true, nil},
		{"an unknown suite is refused", []string{"--suite", "huge"}, true, nil},
		{"--update needs a suite", []string{"--update", "BENCHMARKS.md"}, true, nil},
		{"stray arguments are refused", []string{"throughput"}, true, nil},
		{"series scenarios run side by side", []string{"--scenario", "pod-ceiling,floor"}, false,
			func(o *Options) bool { return len(o.Scenarios) == 2 }},
		{"a concurrency list becomes one series each", []string{"--concurrency", "1, 5,20"}, false,
			func(o *Options) bool { return slices.Equal(o.Concurrency, []int{1, 5, 20}) }},
		{"an unknown scenario is refused", []string{"--scenario", "nope"}, true, nil},
		{"an unknown output is refused", []string{"--output", "xml"}, true, nil},
		{"a negative memory floor is refused", []string{"--memory-floor", "-1"}, true, nil},
		{"the memory floor can be turned off", []string{"--memory-floor", "0"}, false, func(o *Options) bool { return o.MemoryFloorMiB == 0 }},
		{"a zero concurrency is refused", []string{"--concurrency", "0"}, true, nil},
		{"a non-number concurrency is refused", []string{"--concurrency", "a,b"}, true, nil},
		{"zero objects are refused", []string{"--count", "0"}, true, nil},
		{"throughput runs on its own", []string{"--scenario", "throughput,pod-ceiling"}, true, nil},
		{"throughput takes its flags", []string{"--scenario", "throughput", "--vmis", "50", "--replicas", "2"}, false,
			func(o *Options) bool { return o.VMIs == 50 && o.Replicas == 2 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewOptions()
			err := o.Parse(tt.args)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Parse(%v) err = %v, wantErr %v", tt.args, err, tt.wantErr)
			}
			if tt.check != nil && !tt.check(o) {
				t.Errorf("Parse(%v) gave %+v", tt.args, o)
			}
		})
	}
}

// An open-loop run is given at least the time its creations take.
func TestTimeoutCoversTheCreations(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		want time.Duration
	}{
		{0, 5*time.Minute + 2000*100*time.Millisecond},
		{10, 5*time.Minute + 2000*100*time.Millisecond},
		{4, 5*time.Minute + 2000*250*time.Millisecond},
	} {
		o := &Options{Rate: tc.rate}
		if got := o.timeout(2000); got != tc.want {
			t.Errorf("rate %v: timeout %s, want %s", tc.rate, got, tc.want)
		}
	}
}
