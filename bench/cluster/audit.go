package cluster

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// AuditedUser is the one identity whose writes the cluster's API server
// records in its audit log (AuditLogPath): the chaos scenario's replicas
// authenticate as it (AuditedKubeconfig), so their writes can be checked
// against their range Leases while nothing else pays for auditing.
const AuditedUser = "virtshard-audited"

// auditPolicy records AuditedUser's Lease writes with their bodies (the
// holder) and its other writes with their metadata; nothing else.
const auditPolicy = `apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived, ResponseStarted, Panic]
rules:
- level: Request
  users: [` + AuditedUser + `]
  verbs: [create, update, patch, delete]
  resources:
  - group: coordination.k8s.io
    resources: [leases]
- level: Metadata
  users: [` + AuditedUser + `]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`

// auditArgs are kwokctl's flags for the audit log: the policy, and no
// rotation (at the default 100 MB a 20,000-VMI chaos run lost its first
// part to a rotated file).
func (o Options) auditArgs() ([]string, error) {
	policy, err := o.writeWorkfile("audit-policy.yaml", auditPolicy)
	if err != nil {
		return nil, err
	}
	return []string{"--kube-audit-policy", policy, "--extra-args", "kube-apiserver=audit-log-maxsize=0"}, nil
}

// AuditLogPath is the cluster API server's audit log.
func (o Options) AuditLogPath() string {
	return filepath.Join(o.Workdir(), "clusters", o.Name, "logs", "audit.log")
}

// AuditLogEnd is the audit log's size now: the events of the requests that
// follow are written after it.
func (o Options) AuditLogEnd() (int64, error) {
	fi, err := os.Stat(o.AuditLogPath())
	if err != nil {
		return 0, fmt.Errorf("the cluster's audit log (recreate the cluster: make cluster-down cluster-up): %w", err)
	}
	return fi.Size(), nil
}

// OpenAuditLog opens the audit log at offset from, an AuditLogEnd.
func (o Options) OpenAuditLog(from int64) (*os.File, error) {
	f, err := os.Open(o.AuditLogPath())
	if err != nil {
		return nil, err
	}
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// audited reports whether a cluster's kube-apiserver arguments have the
// audit policy (clusters created before it was added do not).
func audited(apiserverArgs []string) bool {
	for _, a := range apiserverArgs {
		if strings.HasPrefix(a, "--audit-policy-file=") {
			return true
		}
	}
	return false
}

// WriteAuditedKubeconfig writes to dst the cluster's kubeconfig with its
// credentials replaced by a client certificate for AuditedUser in
// system:masters, signed by the cluster's CA.
func (o Options) WriteAuditedKubeconfig(dst string) error {
	return o.writeUserKubeconfig(dst, AuditedUser)
}

// writeUserKubeconfig writes to dst the cluster's kubeconfig with its
// credentials replaced by a client certificate for user in
// system:masters, signed by the cluster's CA.
func (o Options) writeUserKubeconfig(dst, user string) error {
	pki := filepath.Join(o.Workdir(), "clusters", o.Name, "pki")
	cas, err := cert.CertsFromFile(filepath.Join(pki, "ca.crt"))
	if err != nil {
		return err
	}
	caKey, err := keyutil.PrivateKeyFromFile(filepath.Join(pki, "ca.key"))
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return err
	}
	now := time.Now()
	template := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: user, Organization: []string{"system:masters"}},
		NotBefore:    now.Add(-time.Minute),
		NotAfter:     now.Add(30 * 24 * time.Hour), // the simulated virt-handler runs as long as the cluster
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, template, cas[0], key.Public(), caKey)
	if err != nil {
		return fmt.Errorf("sign the %s certificate: %w", user, err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.LoadFromFile(o.KubeconfigPath())
	if err != nil {
		return err
	}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{user: {
		ClientCertificateData: pem.EncodeToMemory(&pem.Block{Type: cert.CertificateBlockType, Bytes: der}),
		ClientKeyData:         pem.EncodeToMemory(&pem.Block{Type: keyutil.ECPrivateKeyBlockType, Bytes: keyDER}),
	}}
	for _, c := range cfg.Contexts {
		c.AuthInfo = user
	}
	return clientcmd.WriteToFile(*cfg, dst)
}

// RestartAPIServer kills the cluster's kube-apiserver (SIGKILL, as a crash)
// and has kwokctl start it again with the same flags; it returns once the
// server is ready.
func (o Options) RestartAPIServer(ctx context.Context) error {
	pidFile := filepath.Join(o.Workdir(), "clusters", o.Name, "pids", "kube-apiserver.pid")
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return fmt.Errorf("%s: %w", pidFile, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill kube-apiserver (pid %d): %w", pid, err)
	}
	// kwokctl starts only what is not running; wait until the old process
	// is gone (the init process reaps it: kwokctl does not wait for it).
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH), nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver (pid %d) did not exit: %w", pid, err)
	}
	if err := o.kwokctl(ctx, "start", "cluster", "--name", o.Name); err != nil {
		return err
	}
	// Every client lists again at once after a restart: in a 4,000-VMI
	// chaos run the server was not ready within the minute this allowed.
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		return o.healthy(ctx), nil
	})
	if err != nil {
		return fmt.Errorf("kube-apiserver not ready 3 minutes after its restart: %w", err)
	}
	return nil
}
