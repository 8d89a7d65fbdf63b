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
