// Command virtshard-shards prints the shard map of a running virtshard:
// per member, the ranges it holds and whether it leads; per range, its
// holder, its assigned member, its lease age and its transitions.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/virtshard/virtshard/shard"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-shards:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	flags := flag.NewFlagSet("virtshard-shards", flag.ContinueOnError)
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	namespace := flags.String("namespace", shard.DefaultNamespace(), "namespace of virtshard's Leases")
	name := flags.String("name", "virtshard", "name of the sharded controller (prefix of its Leases)")
	if err := flags.Parse(args); err != nil {
		return err
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = *kubeconfig
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	m, err := shard.ReadMap(ctx, client, *namespace, *name)
	if err != nil {
		return err
	}
	return m.Write(os.Stdout, time.Now())
}
