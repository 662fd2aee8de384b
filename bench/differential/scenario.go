package differential

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"
)

// Scenario is a scripted run: its steps, applied in order in a namespace
// of its own, once under each controller.
type Scenario struct {
	// Name is the file's name without .yaml unless set.
	Name        string `json:"name"`
	Description string `json:"description"`
	// Exclusive scenarios run alone, after the others, one at a time:
	// those that depend on cluster-wide state (the migration limits) or
	// change it (a node's taints).
	Exclusive bool   `json:"exclusive,omitempty"`
	Steps     []Step `json:"steps"`
}

// Step is one thing a scenario does: exactly one of its fields is set.
type Step struct {
	// Create creates the object, in the scenario's namespace unless it is
	// cluster-scoped.
	Create *unstructured.Unstructured `json:"create,omitempty"`
	// Patch patches an object.
	Patch *PatchStep `json:"patch,omitempty"`
	// Delete deletes an object.
	Delete *Ref `json:"delete,omitempty"`
	// Node plays the node's part, as virt-handler or the kubelet would.
	Node *NodeStep `json:"node,omitempty"`
	// Request asks a VM to start, stop or restart, as virt-api's
	// subresources (virtctl start, stop, restart) ask a Manual VM.
	Request *RequestStep `json:"request,omitempty"`
	// Wait waits for a field to have a value, or for quiet.
	Wait *WaitStep `json:"wait,omitempty"`
	// Checkpoint captures every object of the scenario under this name.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Configure merges a fragment into the KubeVirt CR's
	// spec.configuration (a JSON merge patch: null removes a field), for
	// behaviour only a configuration other than the default shows. The
	// configuration is put back as the scenario ends. The CR is the
	// cluster's, so the scenario must be exclusive.
	Configure map[string]any `json:"configure,omitempty"`
	// WorkloadUpdateStrategy merges a fragment into the KubeVirt CR's
	// spec.workloadUpdateStrategy, put back as the scenario ends, as
	// Configure does.
	WorkloadUpdateStrategy map[string]any `json:"workloadUpdateStrategy,omitempty"`
}

// Ref names an object of the scenario.
type Ref struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
}

// PatchStep is a patch of an object, or of its status subresource.
type PatchStep struct {
	Ref `json:",inline"`
	// Type is merge (the default) or json.
	Type        string `json:"type,omitempty"`
	Subresource string `json:"subresource,omitempty"`
	Patch       any    `json:"patch"`
}

// The node's part in a scenario.
const (
	// NodeFail: the VMI's domain crashes (virt-handler reports Failed).
	NodeFail = "fail"
	// NodeSucceed: the guest shuts down (virt-handler reports Succeeded).
	NodeSucceed = "succeed"
	// NodeDeleteLauncherPod: the VMI's launcher pod is deleted, as a user
	// or an eviction would.
	NodeDeleteLauncherPod = "delete-launcher-pod"
	// NodeStop: the node's kubelet and virt-handler stop heartbeating.
	NodeStop = "stop"
	// NodeEvict: a drain evicts the VMI's launcher pod; virt-api's
	// eviction admitter refuses the eviction and marks the VMI for
	// evacuation off its node (status.evacuationNodeName).
	NodeEvict = "evict"
	// NodeStaleHeartbeat: the VMI's node's virt-handler stops, and its
	// heartbeat (kubevirt.io/heartbeat) is dated back past virt-controller's
	// five minutes, as five silent minutes would leave it. Every VMI on the
	// node is touched: the scenario must be exclusive.
	NodeStaleHeartbeat = "stale-heartbeat"
	// NodeHangLauncherPod: every container of the VMI's launcher pods
	// reports terminated while the pod stays Running, as a launcher hangs
	// in termination with no virt-handler to unmount its disks.
	NodeHangLauncherPod = "hang-launcher-pod"
	// NodeOutdateLauncher: the VMI's launcher pods run the previous
	// release's launcher (PreviousLauncherImage), as after an upgrade of
	// virt-controller: their compute container's image is changed to it.
	NodeOutdateLauncher = "outdate-launcher"
)

// PreviousLauncherImage is the launcher image of NodeOutdateLauncher: not
// the one either controller renders.
const PreviousLauncherImage = "quay.io/kubevirt/virt-launcher:v1.8.0"

var nodeActions = []string{NodeFail, NodeSucceed, NodeDeleteLauncherPod, NodeStop, NodeEvict, NodeStaleHeartbeat, NodeHangLauncherPod, NodeOutdateLauncher}

// NodeStep is an action of the node side: on a VMI, or on a node (NodeStop).
type NodeStep struct {
	Action string `json:"action"`
	VMI    string `json:"vmi,omitempty"`
	Node   string `json:"node,omitempty"`
}

// Actions of a RequestStep.
const (
	RequestStart   = "start"
	RequestStop    = "stop"
	RequestRestart = "restart"
)

var requestActions = []string{RequestStart, RequestStop, RequestRestart}

// RequestStep is a state change request on a VM, written as virt-api
// writes it for a Manual VM (pkg/virt-api/rest/subresource.go): a Start,
// a Stop naming the running VMI's UID, or both for a restart.
type RequestStep struct {
	VM     string `json:"vm"`
	Action string `json:"action"`
	// Paused asks a start to start the VM paused (virtctl start --paused).
	Paused bool `json:"paused,omitempty"`
}

// WaitStep waits until the object's field (a dotted path, such as
// status.phase) has Value, until the field or, without one, the object is
// gone (Absent; without a name, until no object of the kind is left), or,
// with Quiet, until no object of the scenario has changed for that long. A
// wait that times out fails the scenario under that controller.
type WaitStep struct {
	Ref     `json:",inline"`
	Field   string   `json:"field,omitempty"`
	Value   any      `json:"value,omitempty"`
	Absent  bool     `json:"absent,omitempty"`
	Quiet   Duration `json:"quiet,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
}

// DefaultWaitTimeout bounds a wait that names no timeout.
const DefaultWaitTimeout = time.Minute

// Duration is a time.Duration written as "3s".
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration %s: want a string such as \"3s\"", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// Load reads one scenario file.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s Scenario
	if err := yaml.UnmarshalStrict(data, &s); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	if s.Name == "" {
		s.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("scenario %s: %w", path, err)
	}
	return &s, nil
}

// LoadDir reads every *.yaml in dir, in name order.
func LoadDir(dir string) ([]*Scenario, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(paths) == 0 {
		return nil, fmt.Errorf("no scenarios (*.yaml) in %s", dir)
	}
	slices.Sort(paths)
	var out []*Scenario
	names := map[string]string{}
	for _, p := range paths {
		s, err := Load(p)
		if err != nil {
			return nil, err
		}
		if prev, dup := names[s.Name]; dup {
			return nil, fmt.Errorf("scenario %s: name %q is %s's too", p, s.Name, prev)
		}
		names[s.Name] = p
		out = append(out, s)
	}
	return out, nil
}

// maxNameLength keeps "diff-kv-<name>" within a namespace name's 63.
const maxNameLength = 55

// Validate checks what can be checked without a cluster: one action per
// step, the fields each needs, checkpoints named once, at least one.
func (s *Scenario) Validate() error {
	var errs []error
	// Each run's namespace is named after the scenario (Namespace).
	if msgs := validation.IsDNS1123Label(s.Name); len(msgs) > 0 || len(s.Name) > maxNameLength {
		errs = append(errs, fmt.Errorf("name %q cannot name a namespace: want a DNS label of at most %d characters", s.Name, maxNameLength))
	}
	seen := map[string]bool{}
	for i, st := range s.Steps {
		if st.Node != nil && st.Node.Action == NodeStaleHeartbeat && !s.Exclusive {
			errs = append(errs, fmt.Errorf("step %d: a scenario that stops a node's heartbeat must be exclusive: other scenarios' VMIs share the node", i+1))
		}
		if (st.Configure != nil || st.WorkloadUpdateStrategy != nil) && !s.Exclusive {
			errs = append(errs, fmt.Errorf("step %d: a scenario that configures must be exclusive: the KubeVirt CR is the cluster's", i+1))
		}
		if err := st.validate(); err != nil {
			errs = append(errs, fmt.Errorf("step %d: %w", i+1, err))
		}
		if st.Checkpoint != "" {
			if seen[st.Checkpoint] {
				errs = append(errs, fmt.Errorf("step %d: checkpoint %q named twice", i+1, st.Checkpoint))
			}
			seen[st.Checkpoint] = true
		}
	}
	if len(seen) == 0 {
		errs = append(errs, errors.New("no checkpoint: nothing would be compared"))
	}
	return errors.Join(errs...)
}

func (st Step) validate() error {
	set := 0
	for _, isSet := range []bool{st.Create != nil, st.Patch != nil, st.Delete != nil, st.Node != nil, st.Request != nil, st.Wait != nil, st.Checkpoint != "", st.Configure != nil, st.WorkloadUpdateStrategy != nil} {
		if isSet {
			set++
		}
	}
	if set != 1 {
		return fmt.Errorf("%d actions, want exactly one of create, patch, delete, node, request, wait, checkpoint, configure", set)
	}
	switch {
	case st.Create != nil:
		if st.Create.GetKind() == "" || st.Create.GetAPIVersion() == "" || st.Create.GetName() == "" {
			return errors.New("create: want apiVersion, kind and metadata.name (generateName would make the runs' names differ)")
		}
	case st.Patch != nil:
		if err := st.Patch.Ref.validate(); err != nil {
			return fmt.Errorf("patch: %w", err)
		}
		if t := st.Patch.Type; t != "" && t != "merge" && t != "json" {
			return fmt.Errorf("patch: type %q, want merge or json", t)
		}
		if st.Patch.Patch == nil {
			return errors.New("patch: no patch")
		}
	case st.Delete != nil:
		if err := st.Delete.validate(); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	case st.Node != nil:
		if !slices.Contains(nodeActions, st.Node.Action) {
			return fmt.Errorf("node: action %q, want one of %s", st.Node.Action, strings.Join(nodeActions, ", "))
		}
		if (st.Node.Action == NodeStop) != (st.Node.Node != "") || (st.Node.Action == NodeStop) == (st.Node.VMI != "") {
			return fmt.Errorf("node: %s names a node, the other actions a VMI", NodeStop)
		}
	case st.Request != nil:
		if st.Request.VM == "" || !slices.Contains(requestActions, st.Request.Action) {
			return fmt.Errorf("request: want a vm and an action, one of %s", strings.Join(requestActions, ", "))
		}
		if st.Request.Paused && st.Request.Action != RequestStart {
			return errors.New("request: only a start starts paused")
		}
	case st.Wait != nil:
		w := st.Wait
		if (w.Quiet.Duration > 0) == (w.Field != "" || w.Absent) {
			return errors.New("wait: want exactly one of quiet, a field and its value, or absent (of a field, or of the object)")
		}
		if w.Absent && w.Value != nil {
			return errors.New("wait: a field that is absent has no value")
		}
		switch {
		case w.Absent && w.Field == "" && w.Kind != "":
			// Without a name: until none of the kind is left.
		case w.Field != "" || w.Absent:
			if err := w.Ref.validate(); err != nil {
				return fmt.Errorf("wait: %w", err)
			}
		}
	}
	return nil
}

func (r Ref) validate() error {
	if r.Kind == "" || r.Name == "" {
		return errors.New("want kind and name")
	}
	return nil
}
