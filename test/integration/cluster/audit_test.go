package cluster_test

import (
	"bufio"
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/virtshard/virtshard/bench/cluster"
	"github.com/virtshard/virtshard/test/clustertest"
)

// The cluster's API server audits the writes of cluster.AuditedUser, and
// only those: the same write as the admin leaves no event.
func TestAuditLogRecordsOnlyTheAuditedUser(t *testing.T) {
	ctx := context.Background()
	opts := clustertest.Options(t)
	ns := clustertest.Namespace(t)
	from, err := opts.AuditLogEnd()
	if err != nil {
		t.Fatal(err)
	}

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := opts.WriteAuditedKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		client kubernetes.Interface
	}{{"by-admin", kubernetes.NewForConfigOrDie(clustertest.Config(t))}, {"by-audited", kubernetes.NewForConfigOrDie(cfg)}} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: c.name}}
		if _, err := c.client.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", c.name, err)
		}
	}

	// The log backend writes each event as its request completes.
	log, err := opts.OpenAuditLog(from)
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	written := map[string]string{}
	scanner := bufio.NewScanner(log)
	scanner.Buffer(make([]byte, 1<<20), 64<<20)
	for scanner.Scan() {
		var ev auditv1.Event
		if err := json.Unmarshal(scanner.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.ObjectRef != nil && ev.ObjectRef.Namespace == ns && ev.ObjectRef.Resource == "configmaps" {
			written[ev.ObjectRef.Name] = ev.User.Username
		}
	}
	if err := scanner.Err(); err != nil {
		t.Fatal(err)
	}
	if got := written["by-audited"]; got != cluster.AuditedUser {
		t.Errorf("the audited user's create is logged as by %q, want %q", got, cluster.AuditedUser)
	}
	if got, ok := written["by-admin"]; ok {
		t.Errorf("the admin's create is logged (by %q): the policy audits everyone", got)
	}
}
