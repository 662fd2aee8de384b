package app

import (
	"flag"
	"fmt"
	"io"
	"strings"
)

// WriteFlagReference writes the replica's flags as a Markdown table, with
// the defaults a replica has when nothing in its environment sets them
// (the identity and namespace come from the pod, see their help).
func WriteFlagReference(w io.Writer) error {
	o := NewOptions()
	o.Identity, o.Namespace = "", ""
	fs := flag.NewFlagSet("virtshard-controller", flag.ContinueOnError)
	o.AddFlags(fs)
	var b strings.Builder
	b.WriteString("| flag | default | what it does |\n|---|---|---|\n")
	fs.VisitAll(func(f *flag.Flag) {
		def := "`" + f.DefValue + "`"
		if f.DefValue == "" {
			def = ""
		}
		fmt.Fprintf(&b, "| `--%s` | %s | %s |\n", f.Name, def, strings.ReplaceAll(f.Usage, "|", `\|`))
	})
	_, err := io.WriteString(w, b.String())
	return err
}
