package controller_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
	"github.com/virtshard/virtshard/test/clustertest"
	"github.com/virtshard/virtshard/test/controllertest"
)

// With --secure-serving, /metrics and /debug/pprof answer only a client the
// API server authenticates and authorizes for the path; health checks stay
// open for the kubelet.
func TestSecureServingDelegatesToTheAPIServer(t *testing.T) {
	ctx := context.Background()
	ns := clustertest.Namespace(t)
	kube := kubernetes.NewForConfigOrDie(clustertest.Config(t))
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	controllertest.Start(t, ns, "replica-s", func(o *app.Options) {
		o.Listener, o.SecureServing, o.Pprof = listener, true, true
	})
	base := "https://" + listener.Addr().String()
	// The certificate is self-signed, as a PodMonitor with
	// insecureSkipVerify expects.
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	if code, _ := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("GET /healthz without a token: %d, want 200", code)
	}
	for _, path := range []string{"/metrics", "/debug/pprof/"} {
		if code, _ := get(path, ""); code != http.StatusUnauthorized {
			t.Errorf("GET %s without a token: %d, want 401", path, code)
		}
		if code, _ := get(path, "not-a-token"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a bad token: %d, want 401", path, code)
		}
	}

	// A service account of its own: authenticated, but not allowed yet.
	sa, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "scraper"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token
	if code, _ := get("/metrics", token); code != http.StatusForbidden {
		t.Errorf("GET /metrics by a service account without the role: %d, want 403", code)
	}

	// Grant get on /metrics only, as deploy/'s metrics reader role does.
	name := "virtshard-test-metrics-" + ns
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: sa.Name}}}
	if _, err := kube.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = kube.RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
	})

	// The earlier denial is cached for a few seconds.
	var code int
	var body string
	err = wait.PollUntilContextTimeout(ctx, time.Second, time.Minute, true, func(context.Context) (bool, error) {
		code, body = get("/metrics", token)
		return code == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("GET /metrics with the role: %d, want 200", code)
	}
	if !strings.Contains(body, "virtshard_") {
		t.Errorf("/metrics has no virtshard metrics:\n%.500s", body)
	}
	if code, _ := get("/debug/pprof/", token); code != http.StatusForbidden {
		t.Errorf("GET /debug/pprof/ with a role for /metrics only: %d, want 403", code)
	}
}

// A replica refuses to serve unprotected beyond loopback.
func TestUnprotectedServingOnlyOnLoopback(t *testing.T) {
	for address, ok := range map[string]bool{
		"127.0.0.1:8080": true,
		"[::1]:8080":     true,
		"localhost:8080": true,
		":8080":          false,
		"0.0.0.0:8080":   false,
		"10.0.0.5:8080":  false,
		"8080":           false,
	} {
		o := app.NewOptions()
		o.Address = address
		if err := o.Validate(); (err == nil) != ok {
			t.Errorf("--address %s: Validate() = %v, want ok=%v", address, err, ok)
		}
		o.SecureServing = true
		if err := o.Validate(); err != nil && strings.Contains(address, ":") {
			t.Errorf("--address %s --secure-serving: %v", address, err)
		}
	}
}
