package tests

import (
	"bytes"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// flagLine is a flag's line in --help or in docs/running.md's
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

// TestHelpReadsLikeTheDocs: --help lists the flags docs/running.md's
// flag block lists, in the page's --flag form, with the same
// defaults and none quoted. (A mistake's one line: cli_test.go.)
func TestHelpReadsLikeTheDocs(t *testing.T) {
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

	page, err := os.ReadFile("../docs/running.md")
	if err != nil {
		t.Fatal(err)
	}
	_, block, _ := strings.Cut(string(page), "```\nsluice [flags]\n")
	block, _, _ = strings.Cut(block, "```")
	inPage := flagDefaults(strings.Split(block, "\n"))
	if len(inPage) < 10 {
		t.Fatalf("docs/running.md's flag block lists %d flags:\n%s", len(inPage), block)
	}
	for name, def := range inHelp {
		switch pageDef, ok := inPage[name]; {
		case !ok:
			t.Errorf("--%s is in --help, not in docs/running.md", name)
		case pageDef != def:
			t.Errorf("--%s: the default is %q in --help, %q in docs/running.md", name, def, pageDef)
		}
	}
	for name := range inPage {
		if _, ok := inHelp[name]; !ok {
			t.Errorf("--%s is in docs/running.md, not in --help", name)
		}
	}

}
