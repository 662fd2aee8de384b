package shard

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

type runtimeObject = runtime.Object

// podMeta is the least an object needs to be placed in a range.
type podMeta struct {
	metav1.ObjectMeta
	uid, namespace string
}

func (p *podMeta) GetUID() types.UID    { return types.UID(p.uid) }
func (p *podMeta) GetNamespace() string { return p.namespace }

func newPod(uid string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), Namespace: "ns"}}
}
