// Package cluster brings up and tears down the local Kubernetes control plane
// that virtshard's tests, `make run` and the bench use: kube-apiserver,
// kube-controller-manager, kube-scheduler and etcd built from their Go modules
// (tools/), run by kwokctl with the binary runtime, with kwok simulating the
// nodes and the node side of KubeVirt (deploy/kwok/stages).
//
// It is test and bench infrastructure: virtshard's controllers never import it.
package cluster
