package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
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
	cmd    *exec.Cmd
}

// StartUnshardedAPIServer starts it with the running cluster's own
// kube-apiserver arguments (from kwokctl's kwok.yaml), minus the feature
// gate, on a free loopback port, logging to logFile.
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
		switch {
		case strings.HasPrefix(a, "--feature-gates="), strings.HasPrefix(a, "--secure-port="), strings.HasPrefix(a, "--bind-address="):
		default:
			kept = append(kept, a)
		}
	}
	kept = append(kept, "--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1")

	log, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(o.bin("kube-apiserver"), kept...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start unsharded kube-apiserver: %w", err)
	}
	go func() { _ = cmd.Wait(); log.Close() }()
	s := &UnshardedAPIServer{cmd: cmd}

	cfg, err := o.RESTConfig()
	if err != nil {
		s.Stop()
		return nil, err
	}
	cfg.Host = "https://127.0.0.1:" + strconv.Itoa(port)
	s.Config = cfg
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		s.Stop()
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil && string(body) == "ok", nil
	})
	if err != nil {
		s.Stop()
		return nil, fmt.Errorf("unsharded kube-apiserver not ready (see %s): %w", logFile, err)
	}
	return s, nil
}

// Stop kills the server.
func (s *UnshardedAPIServer) Stop() {
	if s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
	}
}

// apiserverArgs reads the running cluster's kube-apiserver arguments.
func (o Options) apiserverArgs() ([]string, error) {
	data, err := os.ReadFile(filepath.Join(o.Workdir(), "clusters", o.Name, "kwok.yaml"))
	if err != nil {
		return nil, err
	}
	var config struct {
		Components []struct {
			Name string   `json:"name"`
			Args []string `json:"args"`
		} `json:"components"`
	}
	if err := yaml.Unmarshal(data, &config); err != nil {
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
