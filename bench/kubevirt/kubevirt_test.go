package kubevirt

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/virtshard/virtshard/bench/cluster"
)

// The certificate Start writes serves HTTPS on 127.0.0.1 from the files it
// hands virt-controller, and the pool it returns verifies it without
// skipping verification.
func TestServingCertServesLoopbackHTTPS(t *testing.T) {
	certFile, keyFile, pool, err := servingCert(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatalf("load the key pair as virt-controller would: %v", err)
	}
	l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{pair}})
	if err != nil {
		t.Fatal(err)
	}
	server := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })}
	go func() { _ = server.Serve(l) }()
	defer server.Close()

	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	for _, host := range []string{"127.0.0.1", "localhost"} {
		_, port, _ := net.SplitHostPort(l.Addr().String())
		resp, err := client.Get("https://" + net.JoinHostPort(host, port) + "/")
		if err != nil {
			t.Errorf("GET over %s: %v", host, err)
			continue
		}
		resp.Body.Close()
	}
	info, err := os.Stat(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	if mode := info.Mode().Perm(); mode != 0o600 {
		t.Errorf("key file mode %v, want 0600", mode)
	}
}

// Requests sums KubeVirt's request counter over codes and hosts, by verb
// and resource; Writes keeps the writes, with virtshard's lower-case verbs.
func TestRequestsSumsByVerbAndResource(t *testing.T) {
	const text = `# TYPE kubevirt_rest_client_requests_total counter
kubevirt_rest_client_requests_total{code="201",host="127.0.0.1:6443",method="POST",resource="pods",verb="CREATE"} 4
kubevirt_rest_client_requests_total{code="409",host="127.0.0.1:6443",method="POST",resource="pods",verb="CREATE"} 1
kubevirt_rest_client_requests_total{code="200",host="127.0.0.1:6443",method="PUT",resource="leases",verb="UPDATE"} 7
kubevirt_rest_client_requests_total{code="200",host="127.0.0.1:6443",method="GET",resource="virtualmachineinstances",verb="LIST"} 1
`
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	got := Requests(families)
	want := map[string]float64{"CREATE pods": 5, "UPDATE leases": 7, "LIST virtualmachineinstances": 1}
	if len(got) != len(want) {
		t.Errorf("Requests = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("Requests[%q] = %v, want %v", k, got[k], v)
		}
	}

	writes := Writes(families)
	wantWrites := map[string]float64{"create pods": 5, "update leases": 7}
	if len(writes) != len(wantWrites) || writes["create pods"] != 5 || writes["update leases"] != 7 {
		t.Errorf("Writes = %v, want %v", writes, wantWrites)
	}
}

// The repository holds every CRD virt-operator v1.8.1 installs, each once,
// in a file named after it: the eleven of deploy/crds and the eight of
// bench/kubevirt/crds.
func TestCRDFilesAreTheNineteenVirtOperatorInstalls(t *testing.T) {
	root, err := cluster.FindRoot()
	if err != nil {
		t.Fatal(err)
	}
	managed, others, err := crdFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(managed) != 11 || len(others) != 8 {
		t.Fatalf("%d CRDs in deploy/crds and %d in bench/kubevirt/crds, want 11 and 8", len(managed), len(others))
	}
	seen := map[string]bool{}
	for _, file := range append(managed, others...) {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var crd unstructured.Unstructured
		if err := yaml.Unmarshal(data, &crd.Object); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if crd.GetKind() != "CustomResourceDefinition" || crd.GetName() != crdName(file) {
			t.Errorf("%s holds %s %s, want the CustomResourceDefinition %s", file, crd.GetKind(), crd.GetName(), crdName(file))
		}
		if seen[crd.GetName()] {
			t.Errorf("CRD %s is in two files", crd.GetName())
		}
		seen[crd.GetName()] = true
	}
}

func TestCheckLease(t *testing.T) {
	now := metav1.NewMicroTime(time.Now())
	stale := metav1.NewMicroTime(time.Now().Add(-time.Minute))
	lease := func(holder string, seconds int32, renewed *metav1.MicroTime) *coordinationv1.Lease {
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: LeaseName},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(seconds), RenewTime: renewed},
		}
	}
	for _, tc := range []struct {
		name    string
		lease   *coordinationv1.Lease
		wantErr bool
	}{
		{name: "no lease leaves the way free", lease: nil},
		{name: "this host's own lease is taken over", lease: lease("vm", 15, &now)},
		{name: "a lease another identity renews is refused", lease: lease("other", 15, &now), wantErr: true},
		{name: "another identity's expired lease is waited out", lease: lease("other", 15, &stale)},
		{name: "a lease held for good and never renewed is refused", lease: lease("virtshard", 2147483647, nil), wantErr: true},
		{name: "a lease without a holder is free", lease: lease("", 15, &now)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := fake.NewClientset()
			if tc.lease != nil {
				client = fake.NewClientset(tc.lease)
			}
			err := checkLease(context.Background(), client, "vm")
			if (err != nil) != tc.wantErr {
				t.Errorf("checkLease = %v, want error %t", err, tc.wantErr)
			}
		})
	}
}
