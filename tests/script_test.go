package tests

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestScriptRunsEveryStep runs scripts/test with a go command that fails
// go vet and one fuzz target and succeeds at everything else (go list is
// the real one, which the script asks for the fuzz targets), and package
// tools that install nothing: every step still runs, the script ends with
// the list of exactly the failed steps and exits 1. Then with every step
// passing it exits 0.
func TestScriptRunsEveryStep(t *testing.T) {
	realGo, err := exec.LookPath("go")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(bin, name), []byte("#!/bin/sh\n"+body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// The tools the install steps may call: nothing is installed.
	for _, tool := range []string{"apt-get", "npm", "sudo"} {
		write(tool, "exit 0\n")
	}
	run := func(fail string) (string, int) {
		t.Helper()
		write("go", `[ "$1" = list ] && exec `+realGo+` "$@"
echo "go $*"
case "$*" in `+fail+`) exit 1 ;; esac
`)
		cmd := exec.Command("scripts/test")
		cmd.Dir = ".."
		cmd.Env = append(cleanEnv(), "PATH="+bin+":"+os.Getenv("PATH"))
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		switch {
		case err == nil:
			return string(out), 0
		case errors.As(err, &exit):
			return string(out), exit.ExitCode()
		}
		t.Fatalf("scripts/test: %v\n%s", err, out)
		return "", 0
	}

	out, code := run("vet*|*-fuzz=^FuzzLoad\\$*")
	if code != 1 {
		t.Errorf("scripts/test exited %d with failed steps; want 1:\n%s", code, out)
	}
	// Every step after the failed vet ran: the race tests, the memory
	// bounds and each fuzz target, as the go commands it was given show.
	var ran []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "go ") {
			ran = append(ran, l)
		}
	}
	for _, want := range []string{"go test -race -count=1 -timeout 20m ./...", "go test -count=1 -run TestMemoryStaysBounded ./engine",
		"-fuzz=^FuzzLoad$ ", "-fuzz=^FuzzParse$ ", "-fuzz=^FuzzDifferentialRedis$ -fuzztime=3000x "} {
		if !strings.Contains(strings.Join(ran, "\n"), want) {
			t.Errorf("scripts/test did not run %q after a failed step; it ran:\n%s", want, strings.Join(ran, "\n"))
		}
	}
	m := regexp.MustCompile(`(?s)\nscripts/test: (\d+) failed step\(s\):\n(.*)$`).FindStringSubmatch(out)
	// go vet fails in the Helm module's step too, which vets its own module.
	if m == nil || m[1] != "3" || m[2] != "  vet\n  helm-module\n  fuzz FuzzLoad\n" {
		t.Errorf("scripts/test does not end with the list of exactly the failed steps (vet, helm-module, fuzz FuzzLoad):\n%s", out)
	}

	if out, code := run("--never--"); code != 0 || !strings.HasSuffix(out, "scripts/test: all passed\n") {
		t.Errorf("scripts/test exited %d with every step passing; want 0 and all passed:\n%s", code, out)
	}
}
