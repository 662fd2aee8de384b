// Command virtshard-controller is one replica of virtshard: it claims shard
// ranges and runs the VMI controller over them.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/virtshard/virtshard/cmd/virtshard-controller/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	opts := app.NewOptions()
	if err := opts.Parse(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-controller:", err)
		os.Exit(2)
	}
	if err := opts.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-controller:", err)
		os.Exit(1)
	}
}
