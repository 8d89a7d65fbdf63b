package inject

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/internal/settings"
)

// Main is `sluice inject`: args are the command's flags, after "inject";
// its result is the exit status: 2 for a bad flag, 1 for a failure.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	s := DefaultSettings()
	fs := flag.NewFlagSet("sluice inject", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	in := fs.String("f", "-", "the YAML `file` to read; - for standard input")
	out := fs.String("o", "-", "the `file` to write; - for standard output")
	s.Register(fs)
	if err := settings.Parse(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			Usage(stdout, fs, injectUsage, "")
			return 0
		}
		fmt.Fprintf(stderr, "sluice inject: %v\nRun sluice inject --help for the flags.\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "sluice inject: unexpected argument %q: give the file with -f\n", fs.Arg(0))
		return 2
	}
	err := CheckFlags(fs, "")
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice inject: %v\n", err)
		return 2
	}
	r := stdin
	if *in != "-" {
		f, err := os.Open(*in)
		if err != nil {
			fmt.Fprintf(stderr, "sluice inject: %v\n", err)
			return 1
		}
		defer f.Close()
		r = f
	}
	var w strings.Builder
	err = s.Documents(r, &w, func(msg string) { fmt.Fprintf(stderr, "sluice inject: warning: %s\n", msg) })
	if err != nil {
		fmt.Fprintf(stderr, "sluice inject: %s: %v\n", *in, err)
		return 1
	}
	if *out == "-" {
		_, err = io.WriteString(stdout, w.String())
	} else {
		err = os.WriteFile(*out, []byte(w.String()), 0o644)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice inject: %v\n", err)
		return 1
	}
	return 0
}

const injectUsage = `Usage: sluice inject [-f app.yaml] [-o out.yaml] [flags]

Adds the Sluice sidecar to every pod and pod template (Pod, Deployment,
StatefulSet, DaemonSet, ReplicaSet, Job, CronJob) in the YAML documents
read, and writes every other document as it was. A pod labelled or
annotated sluice.io/inject: "false" is left alone, as is one already
injected (sluice.io/status) or with a container named sluice. A pod's
annotations sluice.io/<flag> override the flags below for that pod.

Flags:
`

// Usage prints head, then fs's flags as the docs write them (-f, but
// --name), leaving out the sidecar settings the injector refuses (each
// name after prefix): they are registered only to be refused with why.
func Usage(w io.Writer, fs *flag.FlagSet, head, prefix string) {
	fmt.Fprint(w, head)
	fs.VisitAll(func(f *flag.Flag) {
		if name, ok := strings.CutPrefix(f.Name, prefix); ok && refused[name] != "" {
			return
		}
		arg, text := flag.UnquoteUsage(f)
		dashes := "--"
		if len(f.Name) == 1 {
			dashes = "-"
		}
		fmt.Fprintf(w, "  %s%s %s\n    \t%s", dashes, f.Name, arg, strings.ReplaceAll(text, "\n", "\n    \t"))
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0s" {
			fmt.Fprintf(w, " (default %s)", f.DefValue)
		}
		fmt.Fprintln(w)
	})
}
