// Command virtshard-image builds the controller's container image as a
// tarball, without a container engine: one layer holding the static
// binary, on an empty base, run as a non-root user. `make image` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var o Options
	flag.StringVar(&o.Binary, "binary", "", "static virtshard-controller binary to put in the image")
	flag.StringVar(&o.Version, "version", "dev", "version: the image tag and its org.opencontainers.image.version label")
	flag.StringVar(&o.Repository, "repository", "virtshard/virtshard-controller", "image repository the tarball names")
	flag.StringVar(&o.Out, "out", "bin/virtshard-controller-image.tar", "tarball to write")
	flag.Parse()
	if err := Build(o); err != nil {
		fmt.Fprintln(os.Stderr, "virtshard-image:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%s:%s)\n", o.Out, o.Repository, o.Version)
}
