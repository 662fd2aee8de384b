// Command virtshard-bench runs virtshard's benchmark scenarios against the
// local kwok cluster and prints a report.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/virtshard/virtshard/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := bench.NewOptions()
	if err := opts.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-bench:", err)
		os.Exit(2)
	}
	if err := opts.Run(ctx, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-bench:", err)
		os.Exit(1)
	}
}
