package migration

import (
	"context"
	"errors"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/controllers/caches"
	"github.com/virtshard/virtshard/controllers/sharded"
)

// System is a migration virt-controller makes on its own, not a user: an
// evacuation off a draining node, a workload update.
type System struct {
	// Prefix is KubeVirt's GenerateName prefix for the kind.
	Prefix string
	// NameParts are what the name is derived from besides the VMI's UID.
	NameParts   []string
	Labels      map[string]string
	Annotations map[string]string
	Priority    *virtv1.MigrationPriority
}

// Decided is a VMI of a held range that a controller decided to migrate,
// with the VMI's migrations as that decision read them (one
// kinds.MigrationsOf).
type Decided struct {
	caches.Found[*virtv1.VirtualMachineInstance]
	Known []*virtv1.VirtualMachineInstanceMigration
}

// CreateSystem creates s for d's VMI under the fence of its range. The name
// is derived from the VMI, s.NameParts and the first attempt none of d.Known
// is named by, so two decisions from the same migrations pick one name and
// the API server lets only one create it; KubeVirt's GenerateName prefix is
// kept beside it as a record. The cache is not read again here: a migration
// that reached it after the decision (this replica's own, made a moment
// before) would push the name past its own, and the VMI would get a second
// migration. It returns nil and no error when the range is no longer held
// or the migration exists already.
func CreateSystem(ctx context.Context, env *sharded.Env, rt *sharded.Runtime, d Decided, s System) (*virtv1.VirtualMachineInstanceMigration, error) {
	vmi := d.Object
	taken := map[string]bool{}
	for _, m := range d.Known {
		taken[m.Name] = true
	}
	m := &virtv1.VirtualMachineInstanceMigration{
		ObjectMeta: metav1.ObjectMeta{
			Name:         s.Name(vmi, taken),
			GenerateName: s.Prefix,
			Namespace:    vmi.Namespace,
			Labels:       s.Labels,
			Annotations:  s.Annotations,
		},
		Spec: virtv1.VirtualMachineInstanceMigrationSpec{VMIName: vmi.Name, Priority: s.Priority},
	}
	var created *virtv1.VirtualMachineInstanceMigration
	err := rt.Write(ctx, d.Range.Index, func(ctx context.Context) (err error) {
		created, err = env.KubeVirt.Migrations(vmi.Namespace).Create(ctx, m, metav1.CreateOptions{})
		return err
	})
	if errors.Is(err, sharded.ErrNotHeld) || apierrors.IsAlreadyExists(err) {
		return nil, nil
	}
	return created, err
}

// Name is the name of the VMI's next migration of kind s: one that none
// of its migrations has (taken).
func (s System) Name(vmi *virtv1.VirtualMachineInstance, taken map[string]bool) string {
	parts := append([]string{string(vmi.UID)}, s.NameParts...)
	parts = append(parts, "")
	for attempt := 0; ; attempt++ {
		parts[len(parts)-1] = strconv.Itoa(attempt)
		if name := sharded.ChildName(s.Prefix, parts...); !taken[name] {
			return name
		}
	}
}
