// Command virtshard-handler is the local cluster's simulated virt-handler
// (package bench/handler): KubeVirt's node agent for every kwok node, in
// one process. The local cluster starts it (bench/cluster).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

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
	return h.Run(klog.NewContext(ctx, klog.Background()))
}
