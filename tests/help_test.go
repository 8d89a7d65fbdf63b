package tests

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// flagLine is a flag's line in --help or in the README's "Running it"
// block: its name, then (on that line or the next, for --help) its
// default.
var (
	flagLine    = regexp.MustCompile(`^  --([a-z][a-z-]*)\b`)
	defaultText = regexp.MustCompile(`\(default ([^;)]*)`)
)

// flagDefaults reads name → default ("" for none) from lines in which a
// flag's line may be followed by its description's lines.
func flagDefaults(lines []string) map[string]string {
	flags := map[string]string{}
	name := ""
	for _, l := range lines {
		if m := flagLine.FindStringSubmatch(l); m != nil {
			name = m[1]
			flags[name] = ""
		}
		if m := defaultText.FindStringSubmatch(l); m != nil && name != "" {
			flags[name] = m[1]
		}
	}
	return flags
}

// TestHelpReadsLikeTheREADME: --help lists the flags the README's
// "Running it" block lists, in the README's --flag form, with the same
// defaults and none quoted. (A mistake's one line: cli_test.go.)
func TestHelpReadsLikeTheREADME(t *testing.T) {
	var out, errb bytes.Buffer
	help := exec.Command(sluiceBin, "--help")
	help.Stdout, help.Stderr = &out, &errb
	if err := help.Run(); err != nil {
		t.Fatalf("--help: %v\n%s", err, errb.String())
	}
	text := out.String()
	if regexp.MustCompile(`(?m)^ +-[a-z]`).MatchString(text) || strings.Contains(text, `(default "`) {
		t.Errorf("--help lists a flag with one dash, or a quoted default:\n%s", text)
	}
	// --help puts the description, and so the default, on the line after
	// the flag's.
	inHelp := flagDefaults(strings.Split(text, "\n"))

	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(readme), "```\nsluice [flags]\n")
	block, _, _ = strings.Cut(block, "```")
	inREADME := flagDefaults(strings.Split(block, "\n"))
	if len(inREADME) < 10 {
		t.Fatalf("the README's flag block lists %d flags:\n%s", len(inREADME), block)
	}
	for name, def := range inHelp {
		switch readmeDef, ok := inREADME[name]; {
		case !ok:
			t.Errorf("--%s is in --help, not in the README", name)
		case readmeDef != def:
			t.Errorf("--%s: the default is %q in --help, %q in the README", name, def, readmeDef)
		}
	}
	for name := range inREADME {
		if _, ok := inHelp[name]; !ok {
			t.Errorf("--%s is in the README, not in --help", name)
		}
	}

}
