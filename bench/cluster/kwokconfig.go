package cluster

import (
	"strconv"
	"strings"
)

// podPlayStageParallelism is how many pod Stages kwok plays at once (its
// default is 4). Each play is a status patch that waits for the API server,
// so kwok's pace is this many over the server's latency: in a 50,000-VMI
// run creating 15 VMIs a second, 4 workers made 5–6 launcher pods a second
// Running while bound pods piled up Pending, and kwok used a sixth of a
// core. With 16 that run kept the same pace, set by the saturated API
// server; below the server's limit, kwok's 4 workers must not be what a
// bench measures.
const podPlayStageParallelism = 16

// kwokConfig is the kwok-controller's configuration (KwokConfiguration);
// kwokctl saves it into the cluster's kwok.yaml, which kwok reads. kwok
// v0.8.0 defaults only a configuration it did not find: one that is there
// must spell out every option, here kwok's defaults
// (pkg/apis/config/v1alpha1, SetObjectDefaults_KwokConfiguration) but for
// the pod Stages' parallelism.
var kwokConfig = `apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokConfiguration
options:
  cidr: 10.0.0.0/24
  manageAllNodes: false
  enableDebuggingHandlers: true
  enableContentionProfiling: false
  enableProfilingHandler: true
  podPlayStageParallelism: ` + strconv.Itoa(podPlayStageParallelism) + `
  nodePlayStageParallelism: 4
  nodeLeaseParallelism: 4
  podsOnNodeSyncParallelism: 1
  enablePodsOnNodeSyncListPager: true
  enablePodsOnNodeSyncStreamWatch: false
`

// kwokConfigured reports whether a cluster's saved kwok.yaml has
// kwokConfig (clusters created before it was added have kwok's defaults).
func kwokConfigured(saved []byte) bool {
	return strings.Contains(string(saved), "podPlayStageParallelism: "+strconv.Itoa(podPlayStageParallelism))
}
