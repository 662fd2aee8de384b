// Command virtshard-cluster starts, stops and locates the local kwok cluster
// that tests, `make run` and the bench use:
//
//	virtshard-cluster up [--nodes N]
//	virtshard-cluster down
//	virtshard-cluster kubeconfig
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/virtshard/virtshard/bench/cluster"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-cluster:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: virtshard-cluster up|down|kubeconfig [flags]")
	}
	opts, err := cluster.DefaultOptions()
	if err != nil {
		return err
	}
	flags := flag.NewFlagSet(args[0], flag.ContinueOnError)
	flags.IntVar(&opts.Nodes, "nodes", opts.Nodes, "number of kwok nodes to make sure exist")
	if err := flags.Parse(args[1:]); err != nil {
		return err
	}
	switch args[0] {
	case "up":
		if opts.Nodes < 0 {
			return fmt.Errorf("--nodes must not be negative, got %d", opts.Nodes)
		}
		started, err := cluster.Up(ctx, opts)
		if err != nil {
			return err
		}
		state := "already running"
		if started {
			state = "started"
		}
		fmt.Printf("cluster %q %s with %d kwok nodes; kubeconfig: %s\n", opts.Name, state, opts.Nodes, opts.KubeconfigPath())
		return nil
	case "down":
		return cluster.Down(ctx, opts)
	case "kubeconfig":
		fmt.Println(opts.KubeconfigPath())
		return nil
	default:
		return fmt.Errorf("unknown command %q: want up, down or kubeconfig", args[0])
	}
}
