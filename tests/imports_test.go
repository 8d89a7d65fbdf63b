package tests

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The dependency arrows point one way (README.md, "How it is built"):
// engine imports none of the packages built on it; a front door
// (respserver, rls, httpcheck) reaches the stores only through the
// service, and never knows Redis or policies; the service knows engine
// and its policies interface, never a door; only app composes them, and
// cmd/sluice only calls app.
func TestImportsPointDown(t *testing.T) {
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
		// A recording is a format: it knows the engine's types, nothing
		// that decides. simulate replays one on the memory store, outside
		// any sidecar; it reads rlsconfig, which the prefix "rls" would
		// forbid too, so the other doors are named.
		"record":   append([]string{"engine/", "service", "upstream", "policy", "telemetry", "app", "cmd/", "lua", "internal/"}, doors...),
		"simulate": {"engine/chain", "upstream", "telemetry", "app", "cmd/", "lua", "internal/", "respserver", "httpcheck", "service"},
	}
	// The chain and the memory store know engine alone, not each other.
	forbidden["engine/chain"] = append([]string{"engine/memstore", "engine/enginetest"}, forbidden["engine"][1:]...)
	forbidden["engine/memstore"] = append([]string{"engine/chain", "engine/enginetest"}, forbidden["engine"][1:]...)
	checkArrows(t, "{{.ImportPath}} {{join .Imports \" \"}}", forbidden)
}

// The arrows hold through every package in between, not only the direct
// imports (go list's Deps): a door that reached Redis through a helper
// package would still be a door that knows Redis.
func TestDepsPointDown(t *testing.T) {
	// What a door may not depend on, however far down: the store's
	// client, the scripts, the chain and memory store (reached through the
	// service's contract only), the composition root, another door.
	door := []string{"upstream", "lua", "engine/chain", "engine/memstore", "policy", "telemetry", "app", "cmd/"}
	forbidden := map[string][]string{
		"respserver": append([]string{"rls", "httpcheck"}, door...),
		"rls":        append([]string{"respserver", "httpcheck"}, door...),
		"httpcheck":  append([]string{"respserver", "rls"}, door...),
		// The store knows no door and no rule the doors share.
		"upstream": {"respserver", "rls", "httpcheck", "service", "policy", "telemetry", "app", "cmd/"},
		"service":  {"engine/", "upstream", "lua", "respserver", "rls", "httpcheck", "policy", "telemetry", "app", "cmd/", "internal/"},
		// The core, the loop and the wire format depend on no package of
		// the project; the scripts (whose batch arguments are RESP), the
		// admin replies' text and MONITOR's hub on the wire format alone.
		"engine":             {""},
		"internal/evloop":    {""},
		"internal/accept":    {""},
		"internal/lograte":   {""},
		"internal/resp":      {""},
		"internal/membudget": {""}, // the doors' shared input budget
		// The fleet's membership says this sidecar is alive over go-redis
		// and counts the others: no store, no chain, no script.
		"internal/fleet": {""},
		// The pipelined connection to Redis knows RESP and the event loop,
		// and nothing of what its commands mean: no store, no scripts, no
		// engine.
		"internal/redispipe": allBut(t, "internal/resp", "internal/evloop"),
		// What watches the upstream Redis (its health, eviction and
		// failovers) takes a go-redis client and knows no store, script
		// or engine; the one ticking loop is internal/watch's.
		"internal/redisobserve": allBut(t, "internal/watch"),
		// The client is made from the address alone.
		"internal/redisclient": allBut(t, "internal/redisurl"),
		"lua":                  allBut(t, "internal/resp"),
		"internal/redisadmin":  allBut(t, "internal/resp"),
		"internal/monitor":     allBut(t, "internal/resp"),
		// The transports serve bytes and hand batches to the service: they
		// know no command, reply text or store.
		"internal/transport": {"respserver", "rls", "httpcheck", "upstream", "lua", "engine/chain", "engine/memstore",
			"policy", "telemetry", "app", "cmd/", "internal/resp", "internal/redisadmin", "internal/monitor"},
	}
	// The settings table and what renders it (the injector, its webhook,
	// the peer's environment) read and write settings: they link no door,
	// no store, no script and no Redis or gRPC client, so that a tool that
	// edits YAML carries none of them.
	leaf := []string{"respserver", "rls", "httpcheck", "upstream", "engine/", "service", "lua", "policy", "telemetry", "app", "cmd/",
		"github.com/redis/go-redis/", "google.golang.org/grpc"}
	for _, pkg := range []string{"internal/settings", "internal/peerenv", "inject", "webhook"} {
		forbidden[pkg] = leaf
	}
	checkArrows(t, "{{.ImportPath}} {{join .Deps \" \"}}", forbidden)
}

// allBut is a rule that forbids every package of the module but the ones
// named.
func allBut(t *testing.T, allowed ...string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var forbid []string
	for _, pkg := range strings.Fields(string(out)) {
		pkg = strings.TrimPrefix(pkg, "github.com/sluice-rl/sluice/")
		if !slices.Contains(allowed, pkg) {
			forbid = append(forbid, pkg)
		}
	}
	return forbid
}

// checkArrows lists every package of the module with go list's format
// (its path, then the packages it imports or depends on) and fails on
// each that reaches a package its rules forbid (prefixes of the module's
// paths, "" forbidding them all, or of another module's, which start with
// a domain), and when a package the rules name is not
// listed, so that a renamed package cannot slip out of its rules.
func checkArrows(t *testing.T, format string, forbidden map[string][]string) {
	t.Helper()
	out, err := exec.Command("go", "list", "-f", format, "../...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/sluice-rl/sluice/"
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
		for _, dep := range fields[1:] {
			for _, bad := range rules {
				if host, _, _ := strings.Cut(bad, "/"); !strings.Contains(host, ".") {
					bad = mod + bad
				}
				if strings.HasPrefix(dep, bad) {
					t.Errorf("%s reaches %s", pkg, dep)
				}
			}
		}
	}
	if seen != len(forbidden) {
		t.Errorf("checked %d of %d packages; go list printed:\n%s", seen, len(forbidden), out)
	}
}
