// Package topology is what KubeVirt v1.8.1's virt-controller knows of the
// nodes' TSC frequencies (pkg/virt-controller/watch/topology): which VMIs
// need one (the invtsc CPU feature to boot, Hyper-V reenlightenment to
// migrate), the lowest frequency in the cluster that such a VMI is given
// as its topology hint, and the scheduling labels a node with a TSC
// frequency carries, one for each frequency in use that the node can run
// (scheduling.node.kubevirt.io/tsc-frequency-<Hz>). virt-handler's node
// labeller reports each node's own frequency (cpu-timer.node.kubevirt.io/
// tsc-frequency and tsc-scalable).
package topology
