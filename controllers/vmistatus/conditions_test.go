package vmistatus

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

func TestConditionHelpersKeepOrReplaceAsKubeVirt(t *testing.T) {
	then, now := metav1.NewTime(time.Unix(100, 0)), metav1.NewTime(time.Unix(200, 0))
	yes, no := true, false
	ready := func(status corev1.ConditionStatus, reason, message string, at metav1.Time) virtv1.VirtualMachineInstanceCondition {
		return virtv1.VirtualMachineInstanceCondition{Type: virtv1.VirtualMachineInstanceReady, Status: status, Reason: reason, Message: message, LastTransitionTime: at}
	}
	for _, tc := range []struct {
		name string
		// set applies the helper; changed is what it reports, nil for
		// one that reports nothing.
		set     func(*virtv1.VirtualMachineInstance) bool
		want    virtv1.VirtualMachineInstanceCondition
		changed *bool
	}{
		{"SetCondition keeps the transition time when the status stays",
			func(v *virtv1.VirtualMachineInstance) bool {
				return SetCondition(v, ready(corev1.ConditionFalse, "Other", "m", now))
			}, ready(corev1.ConditionFalse, "Other", "m", then), &yes},
		{"SetCondition takes the new time when the status changes",
			func(v *virtv1.VirtualMachineInstance) bool {
				return SetCondition(v, ready(corev1.ConditionTrue, "", "", now))
			}, ready(corev1.ConditionTrue, "", "", now), &yes},
		{"SetCondition changes nothing for the same condition",
			func(v *virtv1.VirtualMachineInstance) bool {
				return SetCondition(v, ready(corev1.ConditionFalse, "Pending", "m", now))
			}, ready(corev1.ConditionFalse, "Pending", "m", then), &no},
		{"UpdateCondition keeps a condition of the same status and reason, message and all",
			func(v *virtv1.VirtualMachineInstance) bool {
				UpdateCondition(v, ready(corev1.ConditionFalse, "Pending", "new message", now))
				return false
			}, ready(corev1.ConditionFalse, "Pending", "m", then), nil},
		{"UpdateCondition replaces one of another reason whole",
			func(v *virtv1.VirtualMachineInstance) bool {
				UpdateCondition(v, ready(corev1.ConditionFalse, "Other", "n", now))
				return false
			}, ready(corev1.ConditionFalse, "Other", "n", now), nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{Conditions: []virtv1.VirtualMachineInstanceCondition{
				ready(corev1.ConditionFalse, "Pending", "m", then),
			}}}
			if changed := tc.set(v); tc.changed != nil && changed != *tc.changed {
				t.Errorf("changed = %v, want %v", changed, *tc.changed)
			}
			if got := Condition(v, virtv1.VirtualMachineInstanceReady); got == nil || *got != tc.want || len(v.Status.Conditions) != 1 {
				t.Errorf("conditions %+v, want only %+v", v.Status.Conditions, tc.want)
			}
		})
	}
	v := &virtv1.VirtualMachineInstance{}
	SetCondition(v, ready(corev1.ConditionTrue, "", "", now))
	RemoveCondition(v, virtv1.VirtualMachineInstanceReady)
	if len(v.Status.Conditions) != 0 {
		t.Errorf("conditions %+v after RemoveCondition, want none", v.Status.Conditions)
	}
}

func TestConditionIsAnyStatusWhenNoneIsAsked(t *testing.T) {
	vmi := &virtv1.VirtualMachineInstance{Status: virtv1.VirtualMachineInstanceStatus{Conditions: []virtv1.VirtualMachineInstanceCondition{
		{Type: virtv1.VirtualMachineInstanceIsMigratable, Status: corev1.ConditionFalse},
	}}}
	if Migratable(vmi) || !ConditionIs(vmi, virtv1.VirtualMachineInstanceIsMigratable, corev1.ConditionFalse) ||
		!ConditionIs(vmi, virtv1.VirtualMachineInstanceIsMigratable, "") || ConditionIs(vmi, virtv1.VirtualMachineInstanceReady, "") {
		t.Error("a LiveMigratable=False VMI: want it not migratable, the condition found with its status or any, Ready not found")
	}
	vmi.Status.Conditions[0].Status = corev1.ConditionTrue
	if !Migratable(vmi) {
		t.Error("a LiveMigratable=True VMI is not migratable")
	}
}
