// Command virtshard-run is `make run`: the local cluster, three virtshard
// replicas and a demo workload of VMIs with live progress, until Ctrl-C.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/virtshard/virtshard/bench/demo"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var opts demo.Options
	if err := opts.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-run:", err)
		os.Exit(2)
	}
	if err := opts.Run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-run:", err)
		os.Exit(1)
	}
}
