package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// UnshardedAPIServer is a second kube-apiserver of the local cluster, on the
// same etcd, started without the ShardedListAndWatch feature gate: a real
// server that ignores shard selectors, as every server before 1.36 does.
type UnshardedAPIServer struct {
	Config *rest.Config
	// Address is its host:port.
	Address string
	args    []string
	logFile string
	cmd     *exec.Cmd
	done    chan struct{}
}

// StartUnshardedAPIServer starts it with the running cluster's own
// kube-apiserver arguments (from kwokctl's kwok.yaml), minus the feature
// gate and the audit log, on a free loopback port, logging to logFile.
func (o Options) StartUnshardedAPIServer(ctx context.Context, logFile string) (*UnshardedAPIServer, error) {
	args, err := o.apiserverArgs()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	var kept []string
	for _, a := range args {
		for _, drop := range []string{"--feature-gates=", "--audit-", "--secure-port=", "--bind-address="} {
			if strings.HasPrefix(a, drop) {
				a = ""
			}
		}
		if a != "" {
			kept = append(kept, a)
		}
	}
	kept = append(kept, "--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1")
	s := &UnshardedAPIServer{Address: "127.0.0.1:" + strconv.Itoa(port), args: kept, logFile: logFile}
	cfg, err := o.RESTConfig()
	if err != nil {
		return nil, err
	}
	cfg.Host = "https://" + s.Address
	s.Config = cfg
	if err := s.start(ctx, o.bin("kube-apiserver")); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *UnshardedAPIServer) start(ctx context.Context, binary string) error {
	log, err := os.OpenFile(s.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(binary, s.args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("start kube-apiserver: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()
	s.cmd, s.done = cmd, done
	client, err := kubernetes.NewForConfig(s.Config)
	if err != nil {
		s.Stop()
		return err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		s.Stop()
		return fmt.Errorf("kube-apiserver on %s not ready (see %s): %w", s.Address, s.logFile, err)
	}
	return nil
}

// Stop kills the server and waits until it is gone.
func (s *UnshardedAPIServer) Stop() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

// apiserverArgs reads the running cluster's kube-apiserver arguments.
func (o Options) apiserverArgs() ([]string, error) {
	saved, err := os.ReadFile(o.savedConfigPath())
	if err != nil {
		return nil, err
	}
	return apiserverArgsOf(saved)
}

// apiserverArgsOf returns the kube-apiserver arguments in kwokctl's saved
// configuration.
func apiserverArgsOf(saved []byte) ([]string, error) {
	var config struct {
		Components []struct {
			Name string   `json:"name"`
			Args []string `json:"args"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(saved, &config); err != nil {
		return nil, fmt.Errorf("parse kwok.yaml: %w", err)
	}
	for _, c := range config.Components {
		if c.Name == "kube-apiserver" {
			return c.Args, nil
		}
	}
	return nil, fmt.Errorf("no kube-apiserver in kwok.yaml")
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
