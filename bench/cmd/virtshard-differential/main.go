// Command virtshard-differential is `make differential`: every scenario of
// a directory run under KubeVirt v1.8.1's virt-controller and under
// virtshard on the local cluster, and every object they wrote compared.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/virtshard/virtshard/bench/differential"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var cmd differential.Command
	if err := cmd.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-differential:", err)
		os.Exit(2)
	}
	if err := cmd.Run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-differential:", err)
		os.Exit(1)
	}
}
