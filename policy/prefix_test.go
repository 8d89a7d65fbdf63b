package policy

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// TestPrefixesNeverMeet is the property behind prefixesApart: for random
// names and prefixes over a small alphabet rich in colons (so that they
// often start one another), a file is accepted exactly when no two of its
// policies can address one state key, and when accepted, no pair of keys,
// random or built to make them meet, gives two policies one state key
// (a policy's state key is its prefix followed by the client's key).
func TestPrefixesNeverMeet(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 1))
	word := func(min, max int) string {
		const alphabet = "tu:x"
		n := min + rng.IntN(max-min+1)
		var b strings.Builder
		for range n {
			b.WriteByte(alphabet[rng.IntN(len(alphabet))])
		}
		return b.String()
	}
	accepted, refused := 0, 0
	for run := range 3000 {
		var yaml strings.Builder
		yaml.WriteString("policies:\n")
		names := map[string]bool{}
		for range 1 + rng.IntN(4) {
			name := word(1, 4)
			if names[name] {
				continue
			}
			names[name] = true
			fmt.Fprintf(&yaml, "  %q: {algorithm: fixed, limit: 2, period: 1h", name)
			if rng.IntN(2) == 0 {
				fmt.Fprintf(&yaml, ", prefix: %q", word(1, 5))
			}
			yaml.WriteString("}\n")
		}
		set, err := Parse("p.yaml", []byte(yaml.String()))
		meet := ""
		prefixes := map[string]string{} // name → prefix, read back from what was accepted or recomputed
		if err == nil {
			for _, n := range set.Names() {
				p, _ := set.Lookup(n)
				prefixes[n] = p.Prefix
			}
		} else {
			if !strings.Contains(err.Error(), "field prefix") {
				t.Fatalf("run %d: %v\n%s", run, err, yaml.String())
			}
			// Recompute each policy's prefix as the loader gives it.
			for _, line := range strings.Split(yaml.String(), "\n")[1:] {
				if line == "" {
					continue
				}
				var name string
				fmt.Sscanf(strings.TrimSpace(line), "%q", &name)
				prefix := name + ":"
				if i := strings.Index(line, "prefix: "); i >= 0 {
					fmt.Sscanf(line[i+len("prefix: "):], "%q", &prefix)
				}
				prefixes[name] = prefix
			}
		}
		for a, pa := range prefixes {
			for b, pb := range prefixes {
				if a == b {
					continue
				}
				// Random keys, plus the pair built to meet when pb starts with pa.
				keys := [][2]string{{word(1, 3), word(1, 3)}, {word(1, 3), word(1, 3)}}
				if strings.HasPrefix(pb, pa) {
					k := word(1, 3)
					keys = append(keys, [2]string{pb[len(pa):] + k, k})
				}
				for _, k := range keys {
					if pa+k[0] == pb+k[1] {
						meet = fmt.Sprintf("policy %q key %q and policy %q key %q both address %q", a, k[0], b, k[1], pa+k[0])
					}
				}
			}
		}
		switch {
		case err == nil && meet != "":
			t.Fatalf("run %d: accepted, but %s\n%s", run, meet, yaml.String())
		case err != nil && meet == "":
			t.Fatalf("run %d: refused (%v), but no two policies can meet\n%s", run, err, yaml.String())
		case err == nil:
			accepted++
		default:
			refused++
		}
	}
	// Both sides of the property must have been exercised.
	if accepted < 100 || refused < 100 {
		t.Fatalf("accepted %d, refused %d files: the generator no longer tests both sides", accepted, refused)
	}
}

// FuzzParse feeds the loader arbitrary files: it returns a Set or an
// *Error, never panics, and a Set it accepts has no two policies whose
// prefixes start one another, nor an empty name or prefix.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"policies:\n  t: {algorithm: fixed, limit: 2, period: 1h}\n  \"t:u\": {algorithm: fixed, limit: 2, period: 1h}\n",
		"policies:\n  a: {algorithm: gcra, rate: 1, period: 1s, prefix: x}\n  b: {algorithm: gcra, rate: 1, period: 1s, prefix: xy}\n",
		"policies:\n  a: {algorithm: gcra, rate: 1, period: 1s, prefix: x}\n  b: {algorithm: gcra, rate: 1, period: 1s, prefix: y}\n",
		"policies:\n  \"\": {algorithm: gcra, rate: 1, period: 1s}\n",
		"policies:\n  s:\n    limits:\n      - {name: a, algorithm: gcra, rate: 1, period: 1s}\n",
		"policies:\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		set, err := Parse("f.yaml", data)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		names := set.Names()
		for _, a := range names {
			pa, _ := set.Lookup(a)
			if a == "" || pa.Prefix == "" {
				t.Fatalf("accepted policy %q with prefix %q", a, pa.Prefix)
			}
			for _, b := range names {
				if pb, _ := set.Lookup(b); a != b && strings.HasPrefix(pb.Prefix, pa.Prefix) {
					t.Fatalf("accepted %q (prefix %q) and %q (prefix %q): they share state keys", a, pa.Prefix, b, pb.Prefix)
				}
			}
		}
	})
}
