// Command reference runs KubeVirt v1.8.1's own code on the conformance corpus
// and writes the golden files that virtshard's launcher-pod renderer is held
// against: for each corpus file NAME.yaml, the VMI after virt-api's create-time
// defaults (NAME.vmi.yaml) and the virt-launcher Pod that virt-controller's
// TemplateService renders for it (NAME.pod.yaml), or the error KubeVirt refused
// it with (NAME.error.txt). A corpus file with a VirtualMachineInstanceMigration
// also gets the source pod it was given (NAME.source.pod.yaml) and the
// migration target pod (NAME.target.pod.yaml, or NAME.target.error.txt).
//
// It is test support, built only for the conformance suite. It is a module of
// its own so that kubevirt.io/kubevirt, and the replace directives it needs,
// never enter virtshard's go.mod. kubevirt.io/kubevirt is unknown to the public
// checksum database: run go commands here with GONOSUMDB=kubevirt.io/kubevirt.
//
//	go run . --out ../testdata/kubevirt ../corpus/*.yaml
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("out", "", "directory to write the golden files to")
	flag.Parse()
	if *out == "" || flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "usage: reference --out DIR CORPUS_FILE...")
		os.Exit(2)
	}
	if err := run(*out, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "reference:", err)
		os.Exit(1)
	}
}
