package simulate

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sluice-rl/sluice/engine"
	"github.com/sluice-rl/sluice/policy"
	"github.com/sluice-rl/sluice/record"
	"github.com/sluice-rl/sluice/rlsconfig"
)

const usage = `Usage: sluice simulate --policies FILE [flags] RECORDING...
       sluice simulate --rls-config DIR [flags] RECORDING...

Replays a recording made with --record against a proposed policies file
and/or gateway configuration (requests under a gateway's rule are met by
the rule's label), on the in-memory store with the recording's clock, and reports per policy
the requests admitted and refused under the recorded configuration and
the proposed one, the keys that change most, when each is first refused
where it was admitted, and the decisions that differ. Give a rotated
recording's files oldest first (FILE.2 FILE.1 FILE); - reads standard
input. Nothing is sent anywhere: the sidecar need not run.

Exit status: 0, 1 when a --fail-if condition holds, 2 when the proposed
configuration or the recording cannot be read (nothing is replayed then).

Flags:
`

// conditions is --fail-if, which may be given more than once.
type conditions []Condition

func (c *conditions) String() string { return "" }

func (c *conditions) Set(s string) error {
	cond, err := ParseCondition(s)
	if err != nil {
		return errors.New(strings.TrimPrefix(err.Error(), "invalid --fail-if "))
	}
	*c = append(*c, cond)
	return nil
}

// Main is `sluice simulate`; its result is the exit status.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sluice simulate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	policies := fs.String("policies", "", "the proposed policies `file` (YAML, as sluice --policies)")
	rules := fs.String("rls-config", "", "the proposed gateway configuration: a `directory` of envoyproxy/ratelimit YAML files, as sluice --rls-config")
	asJSON := fs.Bool("json", false, "write the report as JSON, for CI, instead of a table")
	keys := fs.Int("keys", 10, "list this many of the keys that change most (`n`)")
	diffs := fs.Int("differences", 20, "list this many of the decisions that differ (`n`); all are counted")
	var fail conditions
	fs.Var(&fail, "fail-if", "exit 1 when the replay passes this bound (`condition`), such as refused>5%, newly_refused[api]>0 or changed>1%; "+
		"refused counts shadow mode's refusals; may be given more than once")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			fs.SetOutput(stdout)
			fs.PrintDefaults()
			return 0
		}
		fmt.Fprintf(stderr, "sluice simulate: %v; sluice simulate --help lists the flags\n", err)
		return 2
	}
	switch {
	case *policies == "" && *rules == "":
		fmt.Fprintln(stderr, "sluice simulate: --policies FILE or --rls-config DIR is required: the configuration to replay the recording against")
		return 2
	case fs.NArg() == 0:
		fmt.Fprintln(stderr, "sluice simulate: no recording: name the file(s) --record wrote, oldest first")
		return 2
	case *keys < 1 || *diffs < 1:
		fmt.Fprintln(stderr, "sluice simulate: --keys and --differences must be 1 or more")
		return 2
	}
	var cfg Config
	if *policies != "" {
		set, err := policy.Load(*policies)
		if err != nil {
			fmt.Fprintf(stderr, "sluice simulate: the proposed configuration is not valid, nothing was replayed: %v\n", err)
			return 2
		}
		cfg.Policies = set
	}
	if *rules != "" {
		rc, err := rlsconfig.Load(*rules)
		if err != nil {
			fmt.Fprintf(stderr, "sluice simulate: the proposed configuration is not valid, nothing was replayed: %v\n", err)
			return 2
		}
		cfg.Rules = map[string]Rule{}
		rc.EachRule(func(label string, limit engine.Limit, unlimited, refusesAll, shadow bool) {
			cfg.Rules[label] = Rule{Limit: limit, Unlimited: unlimited, RefusesAll: refusesAll, Shadow: shadow}
		})
	}
	var entries []record.Entry
	sampling := record.Sampling{Sample: 1}
	for _, name := range fs.Args() {
		es, n, err := readFile(name, stdin)
		if err != nil {
			fmt.Fprintf(stderr, "sluice simulate: nothing was replayed: %s: %v\n", name, err)
			return 2
		}
		entries = append(entries, es...)
		sampling = record.Sampling{Sample: max(sampling.Sample, n.Sample), ByDecision: sampling.ByDecision || n.ByDecision}
	}
	cfg.Keys, cfg.Differences = *keys, *diffs
	rep, err := Run(cfg, entries, sampling)
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	} else {
		err = rep.Table(stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
		return 2
	}
	status := 0
	for _, c := range fail {
		broken, v, err := c.Check(rep)
		if err != nil {
			fmt.Fprintf(stderr, "sluice simulate: %v\n", err)
			return 2
		}
		if broken {
			unit := ""
			if c.Share {
				unit = "%"
			}
			fmt.Fprintf(stderr, "sluice simulate: --fail-if %s holds: %.4g%s\n", c, v, unit)
			status = 1
		}
	}
	return status
}

// readFile reads one recording file, - standard input.
func readFile(name string, stdin io.Reader) ([]record.Entry, record.Sampling, error) {
	if name == "-" {
		return Read(stdin)
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, record.Sampling{}, err
	}
	defer f.Close()
	return Read(f)
}
