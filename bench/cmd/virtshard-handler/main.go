// Command virtshard-handler is the local cluster's simulated virt-handler
// (package bench/handler): KubeVirt's node agent for every kwok node, in
// one process; with --cdi-kubeconfig, the simulated CDI (bench/cdi) runs
// beside it, as CDI's identity. The local cluster starts it (bench/cluster).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/virtshard/virtshard/bench/cdi"
	"github.com/virtshard/virtshard/bench/handler"
	"github.com/virtshard/virtshard/client/kubevirt"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-handler:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("virtshard-handler", flag.ContinueOnError)
	klog.InitFlags(flags)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig of the identity to write as (virt-handler's)")
	cdiKubeconfig := flags.String("cdi-kubeconfig", "", "kubeconfig of the simulated CDI's identity; no simulated CDI when empty")
	opts := handler.Options{}
	flags.StringVar(&opts.NodeSelector, "node-selector", "type=kwok", "label selector of the nodes to play virt-handler on")
	flags.IntVar(&opts.Workers, "workers", handler.DefaultWorkers, "VMIs synced in parallel, over every node")
	flags.DurationVar(&opts.MigrationDuration, "migration-duration", handler.DefaultMigrationDuration, "how long a migration's domain takes to reach its target")
	flags.DurationVar(&opts.HeartbeatInterval, "heartbeat-interval", handler.DefaultHeartbeatInterval, "how often each node's heartbeat is written")
	if err := flags.Parse(args); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("load kubeconfig: %w", err)
	}
	// The bench measures the server and the controllers, not client-go's
	// token bucket; the real virt-handler's is per node, and this process
	// is every node.
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = handler.UserAgent
	if opts.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return err
	}
	if opts.KubeVirt, err = kubevirt.NewForConfig(cfg); err != nil {
		return err
	}
	h, err := handler.New(opts)
	if err != nil {
		return err
	}
	ctx = klog.NewContext(ctx, klog.Background())
	if *cdiKubeconfig == "" {
		return h.Run(ctx)
	}
	sim, err := newCDI(*cdiKubeconfig)
	if err != nil {
		return err
	}
	// Either one ending ends both: the cluster restarts the process.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 2)
	go func() { done <- h.Run(ctx) }()
	go func() { done <- sim.Run(ctx) }()
	err = <-done
	cancel()
	return errors.Join(err, <-done)
}

// newCDI is the simulated CDI, writing as the identity of kubeconfig.
func newCDI(kubeconfig string) (*cdi.Sim, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load the CDI kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = -1, 0
	cfg.UserAgent = cdi.UserAgent
	opts := cdi.Options{}
	if opts.Kube, err = kubernetes.NewForConfig(cfg); err != nil {
		return nil, err
	}
	if opts.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
		return nil, err
	}
	return cdi.New(opts)
}
