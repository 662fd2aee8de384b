package bench

import (
	"slices"
	"testing"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr bool
		check   func(*Options) bool
	}{
		{"defaults are valid", nil, false, func(o *Options) bool { return slices.Equal(o.Scenarios, []string{ScenarioPodCeiling}) }},
		{"scenarios run side by side", []string{"--scenario", "pod-ceiling,vmi-stage-ceiling"}, false,
			func(o *Options) bool { return len(o.Scenarios) == 2 }},
		{"a concurrency list becomes one series each", []string{"--concurrency", "1, 5,20"}, false,
			func(o *Options) bool { return slices.Equal(o.Concurrency, []int{1, 5, 20}) }},
		{"an unknown scenario is refused", []string{"--scenario", "nope"}, true, nil},
		{"an unknown output is refused", []string{"--output", "xml"}, true, nil},
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
