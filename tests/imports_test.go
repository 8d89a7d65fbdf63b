package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// The dependency arrows point one way (DESIGN.md): engine imports none of
// the packages built on it, respserver talks to a store only through
// engine.Store, and only cmd/sluice composes them.
func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/sluice-rl/sluice/"
	forbidden := map[string][]string{
		"engine":     {"respserver", "upstream", "policy", "cmd/", "lua"},
		"respserver": {"upstream", "cmd/", "lua", "telemetry"},
		"telemetry":  {"respserver", "upstream", "policy", "cmd/", "lua"},
		"policy":     {"respserver", "upstream", "cmd/", "lua"},
		"upstream":   {"respserver", "policy", "cmd/"},
		"lua":        {"engine", "respserver", "upstream", "policy", "cmd/"},
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		pkg, ok := strings.CutPrefix(fields[0], mod)
		if !ok {
			continue
		}
		rules, ok := forbidden[pkg]
		if !ok {
			continue
		}
		seen++
		for _, imp := range fields[1:] {
			for _, bad := range rules {
				if strings.HasPrefix(imp, mod+bad) {
					t.Errorf("%s imports %s", pkg, imp)
				}
			}
		}
	}
	if seen < 4 {
		t.Errorf("checked %d packages; go list printed:\n%s", seen, out)
	}
}
