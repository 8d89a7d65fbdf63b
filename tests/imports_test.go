package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// The dependency arrows point one way (DESIGN.md): engine imports none of
// the packages built on it; a front door (respserver) reaches the stores
// only through the service, and never knows Redis or policies; the service
// knows engine and its policies interface, never a door; only app composes
// them, and cmd/sluice only calls app.
func TestImportsPointDown(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps=false", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/sluice-rl/sluice/"
	doors := []string{"respserver", "rls", "httpcheck"}
	// What no door may import: the store's client, the policies' loader,
	// telemetry and the composition root. rls alone reads rlsconfig.
	door := []string{"upstream", "policy", "telemetry", "app", "cmd/", "lua", "engine/"}
	forbidden := map[string][]string{
		"engine":     append([]string{"engine/", "service", "upstream", "policy", "telemetry", "app", "cmd/", "lua"}, doors...),
		"service":    append([]string{"engine/", "upstream", "policy", "telemetry", "app", "cmd/", "lua"}, doors...),
		"respserver": append([]string{"rls", "httpcheck", "rlsconfig"}, door...),
		"rls":        append([]string{"respserver", "httpcheck"}, door...),
		"httpcheck":  append([]string{"respserver", "rls", "rlsconfig"}, door...),
		"rlsconfig":  append([]string{"service", "upstream", "policy", "telemetry", "app", "cmd/", "lua"}, doors...),
		"telemetry":  append([]string{"upstream", "policy", "app", "cmd/", "lua"}, doors...),
		"policy":     append([]string{"service", "upstream", "telemetry", "app", "cmd/", "lua"}, doors...),
		"upstream":   append([]string{"service", "policy", "telemetry", "app", "cmd/"}, doors...),
		"lua":        append([]string{"engine", "service", "upstream", "policy", "app", "cmd/"}, doors...),
		"app":        {"cmd/", "inject", "webhook"},
		// The injector renders the sidecar from app's settings table; it
		// decides nothing, so it reaches no store, door or policy.
		"inject":     append([]string{"engine", "service", "upstream", "policy", "telemetry", "lua", "rlsconfig", "webhook", "cmd/"}, doors...),
		"webhook":    append([]string{"engine", "service", "upstream", "policy", "telemetry", "lua", "rlsconfig", "cmd/"}, doors...),
		"cmd/sluice": append([]string{"engine", "service", "upstream", "policy", "telemetry", "lua", "rlsconfig"}, doors...),
	}
	// The chain and the memory store know engine alone, not each other.
	forbidden["engine/chain"] = append([]string{"engine/memstore", "engine/enginetest"}, forbidden["engine"][1:]...)
	forbidden["engine/memstore"] = append([]string{"engine/chain", "engine/enginetest"}, forbidden["engine"][1:]...)
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
	if seen < 12 {
		t.Errorf("checked %d packages; go list printed:\n%s", seen, out)
	}
}

// The event loop package is shared by a door (respserver) and the store
// (upstream), which know nothing of each other: it depends on no package
// of the project, directly or through another.
func TestEventLoopDependsOnNoProjectPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../internal/evloop").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/sluice-rl/sluice/"
	deps := strings.Fields(string(out))
	if len(deps) == 0 || deps[len(deps)-1] != mod+"internal/evloop" {
		t.Fatalf("go list -deps printed no internal/evloop last:\n%s", out)
	}
	for _, dep := range deps[:len(deps)-1] {
		if strings.HasPrefix(dep, mod) {
			t.Errorf("internal/evloop depends on %s", dep)
		}
	}
}
