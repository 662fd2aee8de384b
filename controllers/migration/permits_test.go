package migration

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/optimisticfake"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func cand(uid, node string, system bool, _ int) candidate {
	return candidate{uid: types.UID(uid), node: node, hasNode: node != "", system: system}
}

func TestGrantHoldsBothLimits(t *testing.T) {
	limits := Limits{PerCluster: 3, PerNode: 2}
	held := table{"a": {Node: "n1"}, "b": {Node: "n1"}}
	cases := []struct {
		name    string
		t       table
		m       candidate
		waiting []candidate
		granted bool
	}{
		{"room in the cluster and on the node", held, cand("c", "n2", false, 0), nil, true},
		{"the node has its 2 already", held, cand("c", "n1", false, 0), nil, false},
		{"the cluster has its 3 already", table{"a": {Node: "n1"}, "b": {Node: "n2"}, "x": {Node: "n3"}}, cand("c", "n4", false, 0), nil, false},
		{"a held permit is kept", held, cand("a", "n1", false, 0), nil, true},
		{"an older user migration waiting does not block another user's", held, cand("c", "n2", false, 1), []candidate{cand("d", "n3", false, 5)}, true},
		{"a system migration waiting goes before a user one", held, cand("c", "n2", false, 9), []candidate{cand("d", "n3", true, 1)}, false},
		{"a system migration goes before a user one waiting", held, cand("c", "n2", true, 1), []candidate{cand("d", "n3", false, 9)}, true},
		{"a system waiter whose node is full does not block", held, cand("c", "n2", false, 1), []candidate{cand("d", "n1", true, 9)}, true},
		{"a system waiter without a known node does not block", held, cand("c", "n2", false, 1), []candidate{cand("d", "", true, 9)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := maps.Clone(tc.t)
			next, ok := tc.t.grant(tc.m, tc.waiting, limits, t0)
			if !maps.Equal(before, tc.t) {
				t.Error("the input table was modified")
			}
			if ok != tc.granted {
				t.Fatalf("granted = %v, want %v", ok, tc.granted)
			}
			if _, in := next[tc.m.uid]; in != tc.granted {
				t.Errorf("the table has the permit: %v, want %v", in, tc.granted)
			}
		})
	}
}

// A limit changed in the KubeVirt CR applies to the next grant: lowered,
// it revokes nothing and grants nothing new until enough permits are
// released; raised, it lets more start at once.
func TestChangedLimitsApplyToTheNextGrantOnly(t *testing.T) {
	five := Limits{PerCluster: 5, PerNode: 5}
	tbl := table{}
	for _, uid := range []string{"a", "b", "c"} {
		var ok bool
		if tbl, ok = tbl.grant(cand(uid, "n"+uid, false, 0), nil, five, t0); !ok {
			t.Fatalf("%s not granted under %+v", uid, five)
		}
	}
	one := Limits{PerCluster: 1, PerNode: 5}
	for _, uid := range []string{"a", "b", "c"} {
		if _, ok := tbl.grant(cand(uid, "n"+uid, false, 0), nil, one, t0); !ok {
			t.Errorf("the permit %s, held, is revoked once the limit is lowered to 1", uid)
		}
	}
	if _, ok := tbl.grant(cand("d", "nd", false, 0), nil, one, t0); ok {
		t.Error("a new permit is granted with 3 held and the limit lowered to 1")
	}
	delete(tbl, "a")
	delete(tbl, "b")
	if _, ok := tbl.grant(cand("d", "nd", false, 0), nil, one, t0); ok {
		t.Error("a new permit is granted with 1 held and the limit 1")
	}
	delete(tbl, "c")
	if _, ok := tbl.grant(cand("d", "nd", false, 0), nil, one, t0); !ok {
		t.Error("no permit granted with none held and the limit 1")
	}
	tbl = table{"a": {Node: "na"}}
	raised := Limits{PerCluster: 3, PerNode: 5}
	for _, uid := range []string{"b", "c"} {
		var ok bool
		if tbl, ok = tbl.grant(cand(uid, "n"+uid, false, 0), nil, raised, t0); !ok {
			t.Errorf("%s not granted after the limit is raised to 3", uid)
		}
	}
	if _, ok := tbl.grant(cand("d", "nd", false, 0), nil, raised, t0); ok {
		t.Error("a fourth permit is granted under a limit of 3")
	}
}

func TestLimitsComeFromTheKubeVirtCRUnlessOverridden(t *testing.T) {
	cr := &virtv1.MigrationConfiguration{ParallelMigrationsPerCluster: ptr.To[uint32](1), ParallelOutboundMigrationsPerNode: ptr.To[uint32](4)}
	for _, tc := range []struct {
		name      string
		overrides Limits
		config    *virtv1.MigrationConfiguration
		want      Limits
	}{
		{"KubeVirt's defaults without a CR", Limits{}, clusterconfig.DefaultConfig("amd64").Migrations(), DefaultLimits},
		{"the CR's limits without overrides", Limits{}, cr, Limits{PerCluster: 1, PerNode: 4}},
		{"an override wins over the CR", Limits{PerCluster: 7}, cr, Limits{PerCluster: 7, PerNode: 4}},
		{"both overridden", Limits{PerCluster: 7, PerNode: 3}, cr, Limits{PerCluster: 7, PerNode: 3}},
		{"a CR's 0 lets none start, as in KubeVirt", Limits{}, &virtv1.MigrationConfiguration{ParallelMigrationsPerCluster: ptr.To[uint32](0)},
			Limits{PerCluster: 0, PerNode: DefaultLimits.PerNode}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.overrides.Over(tc.config); got != tc.want {
				t.Errorf("limits %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestPruneDropsPermitsOfMigrationsThatAreOver(t *testing.T) {
	tbl := table{
		"final":   {Node: "n", Granted: t0},
		"running": {Node: "n", Granted: t0},
		"unknown": {Node: "n", Granted: t0.Add(-2 * time.Minute)},
		"new":     {Node: "n", Granted: t0.Add(-time.Second)},
	}
	live := func(uid types.UID) (bool, bool) {
		switch uid {
		case "final":
			return true, true
		case "running":
			return true, false
		}
		return false, false
	}
	next, changed := tbl.prune(live, t0, time.Minute)
	if !changed || len(next) != 2 {
		t.Fatalf("pruned to %v, want running and new", next)
	}
	for _, uid := range []types.UID{"running", "new"} {
		if _, ok := next[uid]; !ok {
			t.Errorf("%s was dropped", uid)
		}
	}
}

// Replicas granting at once through optimistic concurrency never exceed
// the limits: every conflict is read again and granted afresh.
func TestConcurrentAcquiresNeverExceedTheLimits(t *testing.T) {
	client := optimisticfake.NewClientset()
	ns := "default"
	limits := Limits{PerCluster: 5, PerNode: 2}
	newPermits := func() *Permits {
		return &Permits{Client: client, Namespace: ns, Name: "p", Grace: time.Minute, Now: time.Now,
			Live: func(types.UID) (bool, bool) { return true, false }}
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	granted := map[string]int{}
	for i := range 40 {
		wg.Go(func() {
			node := fmt.Sprintf("n%d", i%6)
			ok, err := newPermits().Acquire(context.Background(), cand(fmt.Sprint(i), node, false, 0), nil, limits)
			if err != nil {
				t.Error(err)
			}
			if ok {
				mu.Lock()
				granted[node]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	_, tbl, err := newPermits().read(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for node, n := range granted {
		total += n
		if n > limits.PerNode {
			t.Errorf("%d permits out of %s, limit %d", n, node, limits.PerNode)
		}
	}
	if total > limits.PerCluster || len(tbl) != total {
		t.Errorf("%d granted, %d in the table, limit %d", total, len(tbl), limits.PerCluster)
	}
	if total == 0 {
		t.Error("nothing granted")
	}
	for uid := range tbl {
		if err := newPermits().Release(context.Background(), uid); err != nil {
			t.Fatal(err)
		}
	}
	if _, tbl, _ := newPermits().read(context.Background()); len(tbl) != 0 {
		t.Errorf("%d permits left after releasing all", len(tbl))
	}
}

func TestReplacingNullsTheEarlierMigrationsFields(t *testing.T) {
	now := metaNow()
	old := &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "old", TargetNode: "a", TargetNodeAddress: "x", Completed: true, EndTimestamp: &now}
	next := &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "new", TargetNode: "b"}
	got, err := replacing(old, next)
	if err != nil {
		t.Fatal(err)
	}
	if got["migrationUid"] != "new" || got["targetNode"] != "b" {
		t.Errorf("new fields not set: %v", got)
	}
	for _, k := range []string{"targetNodeAddress", "completed", "endTimestamp"} {
		if v, ok := got[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
}

// A nested object of the earlier state, such as its migration
// configuration, is replaced too: its fields the new one lacks are nulled.
func TestReplacingNullsNestedFieldsOfTheEarlierMigration(t *testing.T) {
	old := &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "old", MigrationConfiguration: &virtv1.MigrationConfiguration{
		AllowPostCopy: ptr.To(true), DisableTLS: ptr.To(true)}}
	next := &virtv1.VirtualMachineInstanceMigrationState{MigrationUID: "new", MigrationConfiguration: &virtv1.MigrationConfiguration{
		AllowPostCopy: ptr.To(false)}}
	got, err := replacing(old, next)
	if err != nil {
		t.Fatal(err)
	}
	config, ok := got["migrationConfiguration"].(map[string]any)
	if !ok {
		t.Fatalf("migrationConfiguration %v, want an object", got["migrationConfiguration"])
	}
	if v, ok := config["disableTLS"]; !ok || v != nil {
		t.Errorf("disableTLS = %v (present %v), want null", v, ok)
	}
	if config["allowPostCopy"] != false {
		t.Errorf("allowPostCopy = %v, want false", config["allowPostCopy"])
	}
}

func metaNow() metav1.Time { return metav1.NewTime(t0) }
