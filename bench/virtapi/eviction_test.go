package virtapi

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"
)

// The eviction admitter answers as virt-api's: a migratable VMI that
// leaves on eviction is marked for evacuation off the pod's node and the
// eviction refused; what does not leave on eviction is let through; a
// VMI that should migrate but cannot keeps its pod.
func TestEvictionAnswersAsVirtAPIsAdmitter(t *testing.T) {
	launcher := func() *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "virt-launcher-vm-abcde", Labels: map[string]string{virtv1.AppLabel: "virt-launcher"},
				Annotations: map[string]string{virtv1.DomainAnnotation: "vm"}},
			Spec:   corev1.PodSpec{NodeName: "node-1"},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	vmi := func(strategy virtv1.EvictionStrategy, migratable bool) *virtv1.VirtualMachineInstance {
		v := &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: "ns"},
			Spec:   virtv1.VirtualMachineInstanceSpec{EvictionStrategy: &strategy},
			Status: virtv1.VirtualMachineInstanceStatus{NodeName: "node-1"}}
		if migratable {
			v.Status.Conditions = []virtv1.VirtualMachineInstanceCondition{{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionTrue}}
		}
		return v
	}
	const mark = `[{"op":"add","path":"/status/evacuationNodeName","value":"node-1"}]`
	const triggered = `Eviction triggered evacuation of VMI "ns/vm"`
	for _, tc := range []struct {
		name          string
		pod           func(*corev1.Pod)
		vmi           *virtv1.VirtualMachineInstance
		cluster       *virtv1.EvictionStrategy
		eviction      policyv1.Eviction
		mark, refusal string
	}{
		{name: "LiveMigrate, migratable", vmi: vmi(virtv1.EvictionStrategyLiveMigrate, true), mark: mark, refusal: triggered},
		{name: "LiveMigrate, not migratable", vmi: vmi(virtv1.EvictionStrategyLiveMigrate, false),
			refusal: "VMI vm is configured with an eviction strategy but is not live-migratable"},
		{name: "LiveMigrateIfPossible, migratable", vmi: vmi(virtv1.EvictionStrategyLiveMigrateIfPossible, true), mark: mark, refusal: triggered},
		{name: "LiveMigrateIfPossible, not migratable", vmi: vmi(virtv1.EvictionStrategyLiveMigrateIfPossible, false)},
		{name: "External", vmi: vmi(virtv1.EvictionStrategyExternal, false), mark: mark, refusal: triggered},
		{name: "None", vmi: vmi(virtv1.EvictionStrategyNone, true)},
		{name: "the cluster's strategy", vmi: func() *virtv1.VirtualMachineInstance {
			v := vmi(virtv1.EvictionStrategyNone, true)
			v.Spec.EvictionStrategy = nil
			return v
		}(), cluster: ptr.To(virtv1.EvictionStrategyLiveMigrate), mark: mark, refusal: triggered},
		{name: "already marked", vmi: func() *virtv1.VirtualMachineInstance {
			v := vmi(virtv1.EvictionStrategyLiveMigrate, true)
			v.Status.EvacuationNodeName = "node-1"
			return v
		}(), refusal: "Evacuation in progress: " + triggered},
		{name: "a migration's target pod", vmi: vmi(virtv1.EvictionStrategyLiveMigrate, true),
			pod: func(p *corev1.Pod) { p.Spec.NodeName = "node-2" }, refusal: "Eviction request for target Pod"},
		{name: "a finished launcher", vmi: vmi(virtv1.EvictionStrategyLiveMigrate, true),
			pod: func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }},
		{name: "not a launcher", vmi: vmi(virtv1.EvictionStrategyLiveMigrate, true),
			pod: func(p *corev1.Pod) { p.Labels = nil }},
		{name: "the descheduler's eviction", vmi: vmi(virtv1.EvictionStrategyLiveMigrate, true),
			eviction: policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"requested-by": "sigs.k8s.io/descheduler"}}},
			mark:     `[{"op":"add","path":"/status/evacuationNodeName","value":"node-1"},{"op":"add","path":"/metadata/annotations","value":{"kubevirt.io/eviction-source":"descheduler"}}]`,
			refusal:  triggered},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := launcher()
			if tc.pod != nil {
				tc.pod(pod)
			}
			gotMark, gotRefusal := evictionAnswer(pod, tc.vmi, tc.cluster, &tc.eviction)
			if string(gotMark) != tc.mark || gotRefusal != tc.refusal {
				t.Errorf("got mark %s, refusal %q; want %s, %q", gotMark, gotRefusal, tc.mark, tc.refusal)
			}
		})
	}
}
