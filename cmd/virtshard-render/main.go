// Command virtshard-render prints the virt-launcher pod virtshard would
// create for a VMI: the answer to "what pod will my VMI get?". See
// docs/controller.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
)

func main() {
	o := newOptions()
	fs := flag.NewFlagSet("virtshard-render", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: virtshard-render [--kubevirt-cr FILE] [--api-defaults] [--out DIR] INPUT...\n\n%s\n", usage)
		fs.PrintDefaults()
	}
	o.AddFlags(fs)
	if err := fs.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		os.Exit(2)
	}
	o.Inputs = fs.Args()
	if err := o.Validate(); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-render:", err)
		fs.Usage()
		os.Exit(2)
	}
	if err := o.Run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-render:", err)
		os.Exit(1)
	}
}
