package patch

import (
	"encoding/json"
	"fmt"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
)

// Merge is the JSON merge patch from original to modified, with
// original's resourceVersion, or nil when they do not differ.
func Merge(original, modified runtime.Object) ([]byte, error) {
	before, err := json.Marshal(original)
	if err != nil {
		return nil, err
	}
	after, err := json.Marshal(modified)
	if err != nil {
		return nil, err
	}
	patch, err := jsonpatch.CreateMergePatch(before, after)
	if err != nil {
		return nil, fmt.Errorf("create merge patch: %w", err)
	}
	if string(patch) == "{}" {
		return nil, nil
	}
	accessor, err := meta.Accessor(original)
	if err != nil {
		return nil, err
	}
	var fields map[string]any
	if err := json.Unmarshal(patch, &fields); err != nil {
		return nil, err
	}
	metadata, _ := fields["metadata"].(map[string]any)
	if metadata == nil {
		metadata = map[string]any{}
	}
	metadata["resourceVersion"] = accessor.GetResourceVersion()
	fields["metadata"] = metadata
	return json.Marshal(fields)
}
