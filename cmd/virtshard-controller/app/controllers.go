package app

import (
	"github.com/virtshard/virtshard/controllers/disruptionbudget"
	"github.com/virtshard/virtshard/controllers/migration"
	"github.com/virtshard/virtshard/controllers/node"
	"github.com/virtshard/virtshard/controllers/pool"
	"github.com/virtshard/virtshard/controllers/replicaset"
	"github.com/virtshard/virtshard/controllers/sharded"
	"github.com/virtshard/virtshard/controllers/topology"
	"github.com/virtshard/virtshard/controllers/vm"
	"github.com/virtshard/virtshard/controllers/vmi"
	"github.com/virtshard/virtshard/controllers/workloadupdate"
)

// declarations are the replica's controllers, in the order they learn of
// an acquired range (and, in reverse, of its release). A new controller is
// one line here.
func (o *Options) declarations() []sharded.Declaration {
	nodeOpts := o.Node
	nodeOpts.MigrationLimits = o.Migration.Limits // evacuations are created within them
	return []sharded.Declaration{
		vmi.Declare(o.VMI),
		vm.Declare(o.VM),
		migration.Declare(o.Migration),
		node.Declare(nodeOpts),
		disruptionbudget.Declare(),
		replicaset.Declare(),
		pool.Declare(),
		workloadupdate.Declare(workloadupdate.Options{MigrationLimits: o.Migration.Limits}),
		topology.Declare(),
	}
}
