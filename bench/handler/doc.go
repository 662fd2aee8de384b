// Package handler is the bench's simulated virt-handler: KubeVirt's node
// agent played at the API level for the local cluster's kwok nodes, in
// place of kwok Stages, which kwok plays for custom resources with a single
// worker.
//
// It is built the way the real one is: each node's agent sees only its
// node's VMIs (virt-handler's informers select them by the
// kubevirt.io/nodeName and kubevirt.io/migrationTargetNodeName labels) and
// its node's launcher pods, and writes what virt-handler v1.8.1 writes: the
// status of a started VMI, the node side of a live migration, the end of a
// deleted VMI's domain, and the node's heartbeat. One process hosts every
// node's agent; their work is spread over one pool of workers.
//
// It does not run domains, so it stands in for virt-launcher too where the
// API shows virt-launcher's part: a migrated VMI's source launcher pod
// exits. It must not decide anything virt-controller decides.
package handler
