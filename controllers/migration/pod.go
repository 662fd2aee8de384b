package migration

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/template"
)

// targetPodName is deterministic, so that a replica taking a migration
// over mid-way finds the pod its predecessor created instead of making a
// second one.
func targetPodName(vmi *virtv1.VirtualMachineInstance, m *virtv1.VirtualMachineInstanceMigration) string {
	sum := sha256.Sum256([]byte(m.UID))
	return template.PodName(vmi) + "-" + hex.EncodeToString(sum[:])[:5]
}

// renderTargetPod is the VMI's launcher pod for the migration's target: on
// another node than the source (KubeVirt's pod anti-affinity to the VMI's
// other pods, and a node affinity on the source's name, which holds even
// on nodes without a hostname label) that is like it (placeOnLikeNode),
// with the source's SELinux level unless the KubeVirt CR's
// matchSELinuxLevelOnMigration is false, labelled with the migration.
func (c *Controller) renderTargetPod(rng int, m *virtv1.VirtualMachineInstanceMigration, cached *virtv1.VirtualMachineInstance, source *corev1.Pod) (*corev1.Pod, error) {
	vmi := cached.DeepCopy()
	template.ApplyDefaults(vmi, c.env.Template)
	pod, err := template.RenderMigrationTarget(vmi, m, source, rng, c.env.Template, c.env.ClusterConfig.Current(), c.env.Objects)
	if err != nil {
		return nil, err
	}
	pod.Name = targetPodName(vmi, m)
	pod.Labels[virtv1.MigrationJobLabel] = string(m.UID)
	pod.Annotations[virtv1.MigrationJobNameAnnotation] = m.Name
	// The migration's added node selector, under the pod's own (KubeVirt
	// copies the added one first).
	selector := maps.Clone(m.Spec.AddedNodeSelector)
	if selector == nil {
		selector = map[string]string{}
	}
	maps.Copy(selector, pod.Spec.NodeSelector)
	pod.Spec.NodeSelector = selector
	if err := c.placeOnLikeNode(pod, vmi, source); err != nil {
		return nil, err
	}
	if match := c.env.ClusterConfig.Current().Migrations().MatchSELinuxLevelOnMigration; match == nil || *match {
		if err := matchSELinuxLevel(pod, vmi.Status.SelinuxContext); err != nil {
			return nil, err
		}
	}
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	aff := pod.Spec.Affinity
	if aff.PodAntiAffinity == nil {
		aff.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(aff.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution,
		corev1.PodAffinityTerm{
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{virtv1.CreatedByLabel: string(vmi.UID)}},
			TopologyKey:   corev1.LabelHostname,
		})
	return pod, nil
}

// Runtime users of virt-launcher (KubeVirt's util.RootUser and
// util.NonRootUID).
const (
	rootUser    = 0
	nonRootUser = 107
)

// setRuntimeUser readies vmi for a target pod of the cluster's kind, as
// KubeVirt's setupVMIRuntimeUser does before it creates one: without the
// Root feature gate the VMI runs as the non-root user and carries the
// kubevirt.io/nonroot annotation (which the target pod then carries too),
// with it as root and without the annotation. It returns the VMI as
// patched, or vmi when it was ready.
func (c *Controller) setRuntimeUser(ctx context.Context, it item, vmi *virtv1.VirtualMachineInstance) (*virtv1.VirtualMachineInstance, error) {
	user, annotation := int64(nonRootUser), any("true")
	if c.env.ClusterConfig.Current().RootEnabled() {
		user, annotation = rootUser, nil
	}
	_, annotated := vmi.Annotations[virtv1.DeprecatedNonRootVMIAnnotation]
	if vmi.Status.RuntimeUser == uint64(user) && annotated == (annotation != nil) {
		return vmi, nil
	}
	body, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"annotations": map[string]any{virtv1.DeprecatedNonRootVMIAnnotation: annotation}},
		"status":   map[string]any{"runtimeUser": user},
	})
	if err != nil {
		return nil, err
	}
	var patched *virtv1.VirtualMachineInstance
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		patched, err = c.env.KubeVirt.VirtualMachineInstances(vmi.Namespace).Patch(ctx, vmi.Name, types.MergePatchType, body, metav1.PatchOptions{})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set the runtime user of VMI %s/%s: %w", vmi.Namespace, vmi.Name, err)
	}
	return patched, nil
}

// createTargetPod creates the target pod of m for vmi, whose runtime user
// is set (setRuntimeUser).
func (c *Controller) createTargetPod(ctx context.Context, it item, m *virtv1.VirtualMachineInstanceMigration, vmi *virtv1.VirtualMachineInstance, source *corev1.Pod) (*corev1.Pod, error) {
	pod, err := c.renderTargetPod(it.Range, m, vmi, source)
	if err != nil {
		return nil, fmt.Errorf("render target pod of migration %s: %w", it.Key, err)
	}
	var created *corev1.Pod
	err = c.rt.Write(ctx, it.Range, func(ctx context.Context) (err error) {
		created, err = c.env.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		return err
	})
	if apierrors.IsAlreadyExists(err) {
		return c.env.Kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	}
	if err != nil {
		return nil, fmt.Errorf("create target pod of migration %s: %w", it.Key, err)
	}
	c.env.Recorder.Eventf(m, corev1.EventTypeNormal, eventSuccessfulCreate, "Created migration target pod %s", created.Name)
	return created, nil
}
