// Package cluster brings up and tears down the local Kubernetes control plane
// that virtshard's tests, `make run` and the bench use: kube-apiserver,
// kube-controller-manager, kube-scheduler and etcd built from their Go modules
// (tools/), run by kwokctl with the binary runtime, with kwok simulating the
// nodes and their pods, and the simulated virt-handler (bench/handler, a
// process the cluster starts and stops) playing the node side of KubeVirt.
//
// It is test and bench infrastructure: virtshard's controllers never import it.
package cluster
