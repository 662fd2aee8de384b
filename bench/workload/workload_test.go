package workload

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	virtv1 "kubevirt.io/api/core/v1"

	"github.com/virtshard/virtshard/client/kubevirt"
	"github.com/virtshard/virtshard/controllers/clusterconfig"
	"github.com/virtshard/virtshard/controllers/template"
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
		{&url.Error{Op: "Post", URL: "https://127.0.0.1/apis", Err: &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.EPIPE)}}, true},
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

// The workload VMI is stored as virt-api would store it and renders the
// launcher pod of a container-disk VMI: the disk's init and serving
// containers, and a memory request above the guest's.
func TestVMIIsRealisticAndDefaulted(t *testing.T) {
	sizes := map[string]bool{}
	for i := range 40 {
		vmi := VMI(fmt.Sprintf("vmi-%05d", i))
		guest := vmi.Spec.Domain.Memory
		if guest == nil || guest.Guest == nil {
			t.Fatalf("%s: no spec.domain.memory.guest: not defaulted", vmi.Name)
		}
		sizes[guest.Guest.String()] = true
		if vmi.Spec.Domain.Machine == nil || vmi.Spec.Domain.Machine.Type == "" {
			t.Errorf("%s: no machine type: not defaulted", vmi.Name)
		}
		if !slices.Contains(vmi.Finalizers, virtv1.VirtualMachineInstanceFinalizer) {
			t.Errorf("%s: finalizers %v, want virt-api's %s", vmi.Name, vmi.Finalizers, virtv1.VirtualMachineInstanceFinalizer)
		}
		vmi.Namespace, vmi.UID = "ns", types.UID(fmt.Sprintf("uid-%d", i))
		pod, err := template.Render(vmi, 0, template.Options{LauncherImage: "virt-launcher"},
			clusterconfig.DefaultConfig("amd64"), &template.StaticObjects{})
		if err != nil {
			t.Fatalf("render %s: %v", vmi.Name, err)
		}
		containers := map[string]bool{}
		for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
			containers[c.Name] = true
		}
		for _, want := range []string{"compute", "volumecontainerdisk", "volumecontainerdisk-init", "container-disk-binary"} {
			if !containers[want] {
				t.Errorf("%s: launcher pod has no container %s (has %v)", vmi.Name, want, containers)
			}
		}
		compute := pod.Spec.Containers[0].Resources.Requests[corev1.ResourceMemory]
		if compute.Cmp(*guest.Guest) <= 0 {
			t.Errorf("%s: compute requests %s, want more than the guest's %s (KubeVirt's overhead)", vmi.Name, compute.String(), guest.Guest.String())
		}
	}
	if len(sizes) != len(memorySizes) {
		t.Errorf("memory sizes %v over 40 VMIs, want all of %v", sizes, memorySizes)
	}
}

// Open-loop arrivals are a Poisson process: exponential gaps, whose mean is
// the rate's period and whose standard deviation equals the mean (a fixed
// ticker's is 0, and phase-locks arrivals to whole seconds).
func TestArrivalsArePoisson(t *testing.T) {
	const rate, n = 20.0, 20000
	gaps := PoissonGaps(rate, n, 1)
	var sum, sumSq float64
	for _, g := range gaps {
		s := g.Seconds()
		sum += s
		sumSq += s * s
	}
	mean := sum / n
	cv := math.Sqrt(sumSq/n-mean*mean) / mean
	if math.Abs(mean-1/rate)/(1/rate) > 0.03 || math.Abs(cv-1) > 0.03 {
		t.Errorf("gaps: mean %.4f s (want %.4f), coefficient of variation %.3f (want 1)", mean, 1/rate, cv)
	}
	if again := PoissonGaps(rate, n, 1); !slices.Equal(again, gaps) {
		t.Error("one seed gave two different arrival sequences")
	}
}

// Every arrival is handed out once, and the channel closes after the last,
// so that waiting creators stop.
func TestArrivalsCloseAfterTheLast(t *testing.T) {
	gaps := PoissonGaps(1000, 50, 2)
	got := 0
	for range arrivals(context.Background(), gaps) {
		got++
	}
	if got != len(gaps) {
		t.Errorf("%d arrivals, want %d", got, len(gaps))
	}
}
