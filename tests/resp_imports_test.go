package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestWireImportsNoProjectPackage: internal/resp, the RESP wire format, is
// pure (DESIGN.md): none of its dependencies, direct or not, is a package
// of this project, so that it can be fuzzed alone and read alone.
func TestWireImportsNoProjectPackage(t *testing.T) {
	const mod = "github.com/sluice-rl/sluice/"
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", "../internal/resp").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 5 {
		t.Fatalf("go list -deps printed %q", deps)
	}
	for _, dep := range deps {
		if strings.HasPrefix(dep, mod) && dep != mod+"internal/resp" {
			t.Errorf("internal/resp depends on %s", dep)
		}
	}
}
