package clusterconfig

import (
	"testing"

	virtv1 "kubevirt.io/api/core/v1"
)

func TestFeatureGateEnabled(t *testing.T) {
	tests := []struct {
		name     string
		enabled  []string
		disabled []string
		gate     string
		want     bool
	}{
		{name: "a GA gate is on without being listed", gate: "LiveMigration", want: true},
		{name: "a GA gate listed as disabled stays on", disabled: []string{"NUMA"}, gate: "NUMA", want: true},
		{name: "an alpha gate is off unless listed", gate: "Root", want: false},
		{name: "a listed alpha gate is on", enabled: []string{"Root"}, gate: "Root", want: true},
		{name: "a beta gate is off unless listed, as KubeVirt enables no beta gate by default", gate: "ImageVolume", want: false},
		{name: "a listed beta gate is on", enabled: []string{"ImageVolume"}, gate: "ImageVolume", want: true},
		{name: "a listed deprecated gate is on", enabled: []string{"DockerSELinuxMCSWorkaround"}, gate: "DockerSELinuxMCSWorkaround", want: true},
		{name: "an unlisted deprecated gate is off", gate: "MultiArchitecture", want: false},
		{name: "a listed discontinued gate is on, as KubeVirt's check ignores the state", enabled: []string{"Macvtap"}, gate: "Macvtap", want: true},
		{name: "a listed unknown gate is on", enabled: []string{"NoSuchGate"}, gate: "NoSuchGate", want: true},
		{name: "listing a gate as disabled too does not turn it off", enabled: []string{"Root"}, disabled: []string{"Root"}, gate: "Root", want: true},
		{name: "gate names are case sensitive", enabled: []string{"root"}, gate: "Root", want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := FromKubeVirt(kubeVirt(dev(virtv1.DeveloperConfiguration{FeatureGates: tt.enabled, DisabledFeatureGates: tt.disabled})), "amd64")
			if err != nil {
				t.Fatal(err)
			}
			if got := c.FeatureGateEnabled(tt.gate); got != tt.want {
				t.Errorf("FeatureGateEnabled(%q) = %v, want %v", tt.gate, got, tt.want)
			}
		})
	}
}

func TestGateHelpersReadTheirGate(t *testing.T) {
	helpers := map[string]func(*Config) bool{
		"AlignCPUs":                          (*Config).AlignCPUsEnabled,
		"ConfigurableHypervisor":             (*Config).ConfigurableHypervisorEnabled,
		"ContainerPathVolumes":               (*Config).ContainerPathVolumesEnabled,
		"DeclarativeHotplugVolumes":          (*Config).DeclarativeHotplugVolumesEnabled,
		"DockerSELinuxMCSWorkaround":         (*Config).DockerSELinuxMCSWorkaroundEnabled,
		"ExternalNetResourceInjection":       (*Config).ExternalNetResourceInjectionEnabled,
		"GPUsWithDRA":                        (*Config).GPUsWithDRAGateEnabled,
		"HostDevicesWithDRA":                 (*Config).HostDevicesWithDRAEnabled,
		"HotplugVolumes":                     (*Config).HotplugVolumesEnabled,
		"HypervStrictCheck":                  (*Config).HypervStrictCheckEnabled,
		"ImageVolume":                        (*Config).ImageVolumeEnabled,
		"IncrementalBackup":                  (*Config).IncrementalBackupEnabled,
		"LibvirtHooksServerAndClient":        (*Config).LibvirtHooksServerAndClientEnabled,
		"LiveUpdateNADRef":                   (*Config).LiveUpdateNADRefEnabled,
		"MigrationPriorityQueue":             (*Config).MigrationPriorityQueueEnabled,
		"PasstBinding":                       (*Config).PasstBindingEnabled,
		"PodSecondaryInterfaceNamingUpgrade": (*Config).PodSecondaryInterfaceNamingUpgradeEnabled,
		"Root":                               (*Config).RootEnabled,
		"Snapshot":                           (*Config).SnapshotEnabled,
		"UtilityVolumes":                     (*Config).UtilityVolumesEnabled,
		"VMExport":                           (*Config).VMExportEnabled,
		"VmiMemoryOverheadReport":            (*Config).VmiMemoryOverheadReportEnabled,
	}
	off := DefaultConfig("amd64")
	for gate, helper := range helpers {
		t.Run(gate, func(t *testing.T) {
			if _, known := FeatureGateState(gate); !known {
				t.Fatalf("%s is not in the state table", gate)
			}
			on, err := FromKubeVirt(kubeVirt(dev(virtv1.DeveloperConfiguration{FeatureGates: []string{gate}})), "amd64")
			if err != nil {
				t.Fatal(err)
			}
			if helper(off) || !helper(on) {
				t.Errorf("helper does not follow gate %s: off=%v on=%v", gate, helper(off), helper(on))
			}
		})
	}
	if !off.LiveMigrationEnabled() {
		t.Errorf("LiveMigration is GA and must be on")
	}
}

func TestFeatureGateStateTable(t *testing.T) {
	// KubeVirt v1.8.1 registers 44 gates in active.go and 28 in inactive.go.
	counts := map[GateState]int{}
	for _, s := range gateStates {
		counts[s]++
	}
	want := map[GateState]int{Alpha: 31, Beta: 13, GA: 21, Deprecated: 3, Discontinued: 4}
	for s, n := range want {
		if counts[s] != n {
			t.Errorf("%s gates: %d, want %d", s, counts[s], n)
		}
	}
	if len(gateStates) != 72 {
		t.Errorf("%d gates, want 72", len(gateStates))
	}
	if s, ok := FeatureGateState("VMPersistentState"); !ok || s != GA {
		t.Errorf("VMPersistentState = %q, %v; want GA", s, ok)
	}
	if _, ok := FeatureGateState("NoSuchGate"); ok {
		t.Errorf("an unknown gate has a state")
	}
}
