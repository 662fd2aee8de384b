// Command virt-controller is KubeVirt v1.8.1's virt-controller, unchanged:
// the same one call as kubevirt.io/kubevirt/cmd/virt-controller, so that the
// bench runs KubeVirt's own controller as a local process beside virtshard's
// replicas (bench/kubevirt, issue 18). It is a main of this module, not
// `go build kubevirt.io/kubevirt/cmd/virt-controller`, so that the import
// is this module's own: go mod tidy keeps kubevirt.io/kubevirt a direct
// requirement, and make verify's go vet covers what is built.
package main

import "kubevirt.io/kubevirt/pkg/virt-controller/watch"

func main() {
	watch.Execute()
}
