// Package serving is a replica's HTTP endpoint: /metrics, /healthz, /readyz
// and, when asked for, /debug/pprof.
//
// Unprotected, it must listen on loopback only. Protected, it serves HTTPS
// and delegates every request but the health checks to the API server, as
// kube-controller-manager does: the bearer token is authenticated with a
// TokenReview and the request authorized with a SubjectAccessReview for the
// non-resource path (e.g. get /metrics), so Prometheus needs a ClusterRole
// granting it.
package serving

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilcache "k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/client-go/kubernetes"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
)

// Options of the endpoint.
type Options struct {
	// Address to listen on, host:port.
	Address string
	// Listener, when set, is used instead of listening on Address (tests).
	Listener net.Listener
	// Secure serves HTTPS and requires an authenticated, authorized client
	// for everything but /healthz and /readyz. Client is then the API server
	// the checks are delegated to.
	Secure bool
	Client kubernetes.Interface
	// CertFile and KeyFile serve a given certificate; empty means a
	// self-signed one made at start.
	CertFile, KeyFile string
	// Pprof serves /debug/pprof.
	Pprof bool
	// Metrics serves /metrics; Ready answers /readyz.
	Metrics http.Handler
	Ready   func() bool
}

// Validate refuses an unprotected endpoint on anything but loopback.
func (o Options) Validate() error {
	if o.Secure || o.Listener != nil {
		return nil
	}
	host, _, err := net.SplitHostPort(o.Address)
	if err != nil {
		return fmt.Errorf("--address %q: %w", o.Address, err)
	}
	if ip := net.ParseIP(host); host == "localhost" || (ip != nil && ip.IsLoopback()) {
		return nil
	}
	return fmt.Errorf("--address %q is not a loopback address: serving metrics and pprof there needs --secure-serving", o.Address)
}

// Server is a started endpoint.
type Server struct {
	http     *http.Server
	listener net.Listener
}

// Start listens at once, so that a taken port fails the replica rather than
// leaving it running without metrics or readiness, and serves in the
// background.
func Start(o Options) (*Server, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	handler, err := o.handler()
	if err != nil {
		return nil, err
	}
	l := o.Listener
	if l == nil {
		if l, err = net.Listen("tcp", o.Address); err != nil {
			return nil, err
		}
	}
	if o.Secure {
		cert, err := o.certificate()
		if err != nil {
			l.Close()
			return nil, err
		}
		l = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	}
	s := &Server{http: &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}, listener: l}
	go func() {
		if err := s.http.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.Background().Error(err, "HTTP endpoint stopped", "address", l.Addr())
		}
	}()
	return s, nil
}

// Addr is where the server listens.
func (s *Server) Addr() net.Addr { return s.listener.Addr() }

// Shutdown stops the server.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

func (o Options) handler() (http.Handler, error) {
	protected := http.NewServeMux()
	protected.Handle("/metrics", o.Metrics)
	if o.Pprof {
		protected.HandleFunc("/debug/pprof/", pprof.Index)
		protected.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		protected.HandleFunc("/debug/pprof/profile", pprof.Profile)
		protected.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		protected.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	var guarded http.Handler = protected
	if o.Secure {
		g, err := newGuard(o.Client, protected)
		if err != nil {
			return nil, err
		}
		guarded = g
	}
	// The kubelet probes without credentials.
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !o.Ready() {
			http.Error(w, "ranges not synced", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.Handle("/", guarded)
	return mux, nil
}

func (o Options) certificate() (tls.Certificate, error) {
	if o.CertFile != "" || o.KeyFile != "" {
		return tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("virtshard-controller", nil, nil)
	if err != nil {
		return tls.Certificate{}, fmt.Errorf("self-signed serving certificate: %w", err)
	}
	return tls.X509KeyPair(certPEM, keyPEM)
}

// guard authenticates and authorizes each request through the API server.
// It asks the API server directly rather than through k8s.io/apiserver's
// delegating authenticator and authorizer: those pull gRPC, OpenTelemetry
// and CEL into the binary and doubled its size.
type guard struct {
	client kubernetes.Interface
	next   http.Handler
	// decisions caches recent answers by token and request, as the API
	// server's webhook clients do, so a scrape costs no review.
	decisions *utilcache.LRUExpireCache
}

const decisionTTL = 10 * time.Second

func newGuard(client kubernetes.Interface, next http.Handler) (*guard, error) {
	if client == nil {
		return nil, errors.New("secure serving needs an API server client")
	}
	return &guard{client: client, next: next, decisions: utilcache.NewLRUExpireCache(1024)}, nil
}

func (g *guard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok || token == "" {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
		return
	}
	verb := strings.ToLower(r.Method)
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:]) + " " + verb + " " + r.URL.Path
	status, cached := g.decisions.Get(key)
	if !cached {
		var err error
		if status, err = g.review(r.Context(), token, verb, r.URL.Path); err != nil {
			// Not cached: the next request asks again.
			klog.FromContext(r.Context()).Error(err, "Cannot review a request", "path", r.URL.Path)
			http.Error(w, "cannot review the request", http.StatusServiceUnavailable)
			return
		}
		g.decisions.Add(key, status, decisionTTL)
	}
	if code := status.(int); code != http.StatusOK {
		http.Error(w, http.StatusText(code), code)
		return
	}
	g.next.ServeHTTP(w, r)
}

// review returns 200, 401 (token not authenticated) or 403 (user not
// allowed verb on path).
func (g *guard) review(ctx context.Context, token, verb, path string) (int, error) {
	tr, err := g.client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("token review: %w", err)
	}
	if !tr.Status.Authenticated {
		return http.StatusUnauthorized, nil
	}
	user := tr.Status.User
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar, err := g.client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user.Username, UID: user.UID, Groups: user.Groups, Extra: extra,
			NonResourceAttributes: &authorizationv1.NonResourceAttributes{Verb: verb, Path: path},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		return 0, fmt.Errorf("subject access review: %w", err)
	}
	if !sar.Status.Allowed {
		klog.FromContext(ctx).V(2).Info("Forbidden", "user", user.Username, "verb", verb, "path", path, "reason", sar.Status.Reason)
		return http.StatusForbidden, nil
	}
	return http.StatusOK, nil
}
