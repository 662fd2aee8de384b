package template

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"
)

func TestMetadataSyncBringsThePodsSyncedKeysToTheVMIs(t *testing.T) {
	vmi := func(labels, annotations map[string]string) *virtv1.VirtualMachineInstance {
		return &virtv1.VirtualMachineInstance{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Labels: labels, Annotations: annotations}}
	}
	pod := func(labels, annotations map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "9", Labels: labels, Annotations: annotations}}
	}
	skip := map[string]string{veleroSkipHooks: "true"}
	for _, tc := range []struct {
		name string
		vmi  *virtv1.VirtualMachineInstance
		pod  *corev1.Pod
		want string
		opts Options
	}{
		{"the VMI's outdated-launcher mark reaches its pod", vmi(map[string]string{virtv1.OutdatedLauncherImageLabel: ""}, skip), pod(nil, nil),
			`{"metadata":{"labels":{"kubevirt.io/outdatedLauncherImage":""}}}`, Options{}},
		{"a descheduler ask the VMI dropped leaves the pod, other keys stay", vmi(nil, skip),
			pod(map[string]string{"app": "x"}, map[string]string{"descheduler.alpha.kubernetes.io/evict": ""}),
			`{"metadata":{"annotations":{"descheduler.alpha.kubernetes.io/evict":null}}}`, Options{}},
		{"the VMI's node reaches its pod, its other labels do not", vmi(map[string]string{virtv1.NodeNameLabel: "n1", "app": "y"}, skip),
			pod(map[string]string{"app": "x"}, nil), `{"metadata":{"labels":{"kubevirt.io/nodeName":"n1"}}}`, Options{}},
		{"a pod that agrees is not patched", vmi(map[string]string{virtv1.NodeNameLabel: "n1", "app": "y"}, skip),
			pod(map[string]string{virtv1.NodeNameLabel: "n1", "app": "x"}, nil), ``, Options{}},
		{"the pod's node label, set with its readiness gate, stays while the VMI has none", vmi(nil, skip),
			pod(map[string]string{virtv1.NodeNameLabel: "n1"}, nil), ``, Options{}},
		{"Velero's hooks are kept on the pod", vmi(nil, nil), pod(nil, backupHookAnnotations(vmi(nil, nil))), ``, Options{}},
		{"keys added by flag follow too", vmi(map[string]string{"team": "a"}, map[string]string{"owner": "b", veleroSkipHooks: "true"}), pod(map[string]string{"team": "z"}, nil),
			`{"metadata":{"annotations":{"owner":"b"},"labels":{"team":"a"}}}`, Options{SyncedLabels: []string{"team"}, SyncedAnnotations: []string{"owner"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(MetadataSync(tc.vmi, tc.pod, tc.opts)); got != tc.want {
				t.Errorf("patch %s, want %s", got, tc.want)
			}
		})
	}
}
