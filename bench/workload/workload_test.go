package workload

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/virtshard/virtshard/controllers/kubevirt"
)

// A create whose connection breaks after the server took it is retried, and
// the retry's AlreadyExists counts as created; a name taken from the start
// is an error.
func TestCreateVMIRetriesABrokenConnection(t *testing.T) {
	var calls atomic.Int32
	alreadyExists := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"AlreadyExists","code":409}`))
	}
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			// The server went away mid-request, as a restarting API server does.
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				_ = conn.Close()
			}
			return
		}
		alreadyExists(w)
	}))
	defer server.Close()
	kv, err := kubevirt.NewForConfig(&rest.Config{Host: server.URL})
	if err != nil {
		t.Fatal(err)
	}
	if err := createVMI(context.Background(), kv, "ns", VMI("vmi-0")); err != nil {
		t.Errorf("create after a broken connection: %v, want it counted as created", err)
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls, want 2", n)
	}

	taken := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { alreadyExists(w) }))
	defer taken.Close()
	kv, err = kubevirt.NewForConfig(&rest.Config{Host: taken.URL})
	if err != nil {
		t.Fatal(err)
	}
	err = createVMI(context.Background(), kv, "ns", VMI("vmi-0"))
	if !apierrors.IsAlreadyExists(err) {
		t.Errorf("create of a taken name: %v, want AlreadyExists", err)
	}
}

func TestTransientErrors(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		// What a create got while the chaos scenario restarted the API server.
		{&url.Error{Op: "Post", URL: "https://127.0.0.1/apis", Err: errors.New("http2: client connection force closed via ClientConn.Close")}, true},
		{&url.Error{Op: "Post", URL: "https://127.0.0.1/apis", Err: errors.New("http2: client connection lost")}, true},
		{apierrors.NewServiceUnavailable("starting"), true},
		{apierrors.NewTooManyRequests("busy", 1), true},
		{apierrors.NewBadRequest("no"), false},
		{apierrors.NewAlreadyExists(schema.GroupResource{Resource: "virtualmachineinstances"}, "vmi-0"), false},
		{nil, false},
	} {
		if got := transient(tc.err); got != tc.want {
			t.Errorf("transient(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
