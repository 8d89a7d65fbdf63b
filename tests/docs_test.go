package tests

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	pb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// The docs that run: the README and every page of docs/ show each file of
// examples/ whole, and the tests run each one (the client examples in
// clients_test.go, the policies and the envoyproxy/ratelimit configuration
// here), so no page can show a file that does not work. Their console
// sessions that start Sluice run here against the binary, line by line.

// docPage is one Markdown page of the docs, its path from tests/ and its
// text.
type docPage struct {
	path string // "../README.md", "../docs/gateways.md"
	text string
}

// docPages returns the README and every page of docs/.
func docPages(t *testing.T) []docPage {
	t.Helper()
	paths, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	var pages []docPage
	for _, p := range append([]string{"../README.md"}, paths...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		pages = append(pages, docPage{path: p, text: string(b)})
	}
	return pages
}

// fences returns a page's fenced code blocks of the given language ("" for
// any), without their fences.
func fences(text, lang string) []string {
	var blocks []string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l, ok := strings.CutPrefix(lines[i], "```")
		if !ok {
			continue
		}
		var b strings.Builder
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			b.WriteString(lines[i] + "\n")
		}
		if lang == "" || l == lang {
			blocks = append(blocks, b.String())
		}
	}
	return blocks
}

// shownFile is a line that names the file the code block after it shows:
// [`examples/x.py`](examples/x.py) in the README,
// [`examples/x.py`](../examples/x.py) in docs/: the name is the path from
// the repository's root, the link the path from the page.
var shownFile = regexp.MustCompile("^\\[`([^`]+)`\\]\\(([^)]+)\\)$")

// shownBlocks returns the code blocks of every page that follow a
// shownFile line, by the file they show.
func shownBlocks(t *testing.T) map[string]string {
	t.Helper()
	blocks := map[string]string{}
	for _, page := range docPages(t) {
		lines := strings.Split(page.text, "\n")
		for i := 0; i+1 < len(lines); i++ {
			m := shownFile.FindStringSubmatch(lines[i])
			if m == nil || !strings.HasPrefix(lines[i+1], "```") {
				continue
			}
			if target := filepath.Join(filepath.Dir(page.path), m[2]); target != filepath.Join("..", m[1]) {
				t.Errorf("%s: the link to %s leads to %s", page.path, m[1], target)
			}
			var b strings.Builder
			for i += 2; i < len(lines) && lines[i] != "```"; i++ {
				b.WriteString(lines[i] + "\n")
			}
			if _, dup := blocks[m[1]]; dup {
				t.Errorf("%s shows %s, which another page shows too", page.path, m[1])
			}
			blocks[m[1]] = b.String()
		}
	}
	return blocks
}

// TestDocsShowTheExampleFiles: every file in examples/ is shown whole and
// exactly on one page, under a link to it.
func TestDocsShowTheExampleFiles(t *testing.T) {
	blocks := shownBlocks(t)
	n := 0
	err := filepath.WalkDir("../examples", func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		n++
		rel := strings.TrimPrefix(filepath.ToSlash(path), "../")
		code, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		switch shown, ok := blocks[rel]; {
		case !ok:
			t.Errorf("no page shows %s (a line [`%s`](%s), then the file in a code block)", rel, rel, rel)
		case shown != string(code):
			t.Errorf("a page shows %s otherwise than the file holds:\n%s", rel, shown)
		}
		delete(blocks, rel)
		return nil
	})
	if err != nil || n < 5 {
		t.Fatalf("examples/: %d files, %v", n, err)
	}
	for rel := range blocks {
		t.Errorf("a page shows %s, which is not in examples/", rel)
	}
}

// A session's lines, as a user types them from the repository's root.
var (
	// startLine starts Sluice: "$ ./sluice --flags &", with environment
	// variables before it; "go run ./cmd/sluice" is read the same way.
	startLine = regexp.MustCompile(`^\$ ((?:[A-Z_]+=\S+ )*)(?:\./sluice|go run \./cmd/sluice)((?: \S+)*) &$`)
	// buildLine builds the binary, as TestMain has.
	buildLine = "$ go build -o sluice ./cmd/sluice"
	// killLine stops the Sluice started last: it must drain and exit 0.
	killLine = "$ kill %1"
	// cliLine asks the Sluice started last, over RESP2 or RESP3 (-3).
	cliLine = regexp.MustCompile(`^\$ redis-cli( -3)? -p 6380 (.+)$`)
	// comment ends a line for the reader; "# varies" marks an output line
	// whose numbers and ids differ from run to run.
	comment = regexp.MustCompile(`\s+#.*$`)
	// varying is a number or hex id in a "# varies" line.
	varying = regexp.MustCompile(`[0-9a-f]*[0-9][0-9a-f]*`)
)

// wantLine is the pattern a printed line must match for a session's
// output line: the line itself, or for a "# varies" line the same with
// any number or hex id in place of each of its own.
func wantLine(line string) *regexp.Regexp {
	text := comment.ReplaceAllString(line, "")
	pattern := regexp.QuoteMeta(text)
	if c := comment.FindString(line); strings.HasPrefix(strings.TrimSpace(c), "# varies") {
		var b strings.Builder
		last := 0
		for _, m := range varying.FindAllStringIndex(text, -1) {
			b.WriteString(regexp.QuoteMeta(text[last:m[0]]) + `[0-9a-f]+`)
			last = m[1]
		}
		pattern = b.String() + regexp.QuoteMeta(text[last:])
	}
	return regexp.MustCompile("^" + pattern + "$")
}

// TestDocSessions runs the console sessions of the README and of docs/
// that start Sluice: the built binary with the start line's flags and
// environment, from the repository's root as the docs' paths are, then
// each "$ redis-cli -p 6380 …" line, whose output must be the lines the
// page shows under it, less their # comments. Every console session of
// docs/ that talks to Sluice must start it, so that all of them run; a
// session that cannot run one client at a time (its output elided with
// "…", or what several clients did together, as MONITOR and redis-cli
// --stat show it) says so in its fence, ```console illustrative, and is
// read, not run.
func TestDocSessions(t *testing.T) {
	withPolicies := false
	for _, page := range docPages(t) {
		for _, block := range fences(page.text, "console") {
			lines := strings.Split(strings.TrimSuffix(block, "\n"), "\n")
			starts := slices.ContainsFunc(lines, func(l string) bool { return startLine.MatchString(comment.ReplaceAllString(l, "")) })
			if !starts {
				if page.path != "../README.md" && slices.ContainsFunc(lines, cliLine.MatchString) {
					t.Errorf("%s: a session asks Sluice without starting it (a line $ ./sluice … &), so no test runs it:\n%s", page.path, block)
				}
				continue
			}
			t.Run(filepath.Base(page.path)+"/"+lines[0], func(t *testing.T) {
				runSession(t, lines, &withPolicies)
			})
		}
	}
	if !withPolicies {
		t.Errorf("no session loads examples/policies.yaml (./sluice --policies examples/policies.yaml), as RL.ALLOW needs")
	}
}

func runSession(t *testing.T, lines []string, withPolicies *bool) {
	var s *sluice
	for i := 0; i < len(lines); i++ {
		line := comment.ReplaceAllString(lines[i], "")
		if line == buildLine {
			continue
		}
		if line == killLine && s != nil {
			s.stop(t)
			s = nil
			continue
		}
		if m := startLine.FindStringSubmatch(line); m != nil {
			for _, kv := range strings.Fields(m[1]) {
				k, v, _ := strings.Cut(kv, "=")
				t.Setenv(k, v)
			}
			*withPolicies = *withPolicies || strings.Contains(m[2], "--policies examples/policies.yaml")
			s = startSluiceIn(t, "..", strings.Fields(m[2])...)
			continue
		}
		m := cliLine.FindStringSubmatch(line)
		if m == nil || s == nil {
			t.Fatalf("line %q: want a line that starts Sluice, then redis-cli -p 6380 lines", lines[i])
		}
		var want []string
		for i+1 < len(lines) && !strings.HasPrefix(lines[i+1], "$ ") {
			i++
			want = append(want, lines[i])
		}
		args := []string{"--no-raw"}
		if m[1] != "" {
			args = append(args, "-3")
		}
		got := strings.Split(strings.TrimSuffix(redisCLI(t, s, "", append(args, strings.Fields(m[2])...)...), "\n"), "\n")
		match := len(got) == len(want)
		for j := 0; match && j < len(want); j++ {
			match = wantLine(want[j]).MatchString(got[j])
		}
		if !match {
			t.Errorf("redis-cli%s -p 6380 %s printed\n%s\nwhere the page shows\n%s", m[1], m[2], strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// policyUse is a policy named in a code block's command, as typed or as
// MONITOR quotes it: by RL.ALLOW, by the POLICY form of RL.ACQUIRE,
// RL.RELEASE and RL.RESET, or by the HTTP check's query and header.
var policyUse = regexp.MustCompile(`(?:\bRL\.ALLOW"? "?|\bRL\.(?:ACQUIRE|RELEASE|RESET)"? "?POLICY"? "?|[?&]policy=|key: X-Sluice-Policy, value: )([A-Za-z0-9_-]+)`)

// TestDocPoliciesAreTheExampleFile: examples/policies.yaml holds every
// policy the pages use, and a page that shows a policy's YAML shows it as
// the file has it, so that a reader who starts Sluice with the file gets
// what the page says.
func TestDocPoliciesAreTheExampleFile(t *testing.T) {
	b, err := os.ReadFile("../examples/policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var file struct{ Policies map[string]any }
	if err := yaml.Unmarshal(b, &file); err != nil || len(file.Policies) == 0 {
		t.Fatalf("examples/policies.yaml: %d policies, %v", len(file.Policies), err)
	}
	shown := 0
	for _, page := range docPages(t) {
		for _, block := range fences(page.text, "") {
			for _, line := range strings.Split(block, "\n") {
				if strings.HasPrefix(strings.TrimSpace(line), "#") || strings.Contains(line, "ERR invalid policy") {
					continue // a comment, or a page showing a mistyped name's error
				}
				for _, m := range policyUse.FindAllStringSubmatch(line, -1) {
					if _, ok := file.Policies[m[1]]; !ok {
						t.Errorf("%s uses a policy %q, which examples/policies.yaml lacks: %s", page.path, m[1], line)
					}
				}
			}
		}
		for _, block := range fences(page.text, "yaml") {
			var doc struct{ Policies map[string]any }
			if yaml.Unmarshal([]byte(block), &doc) != nil {
				continue // another file's YAML: a Kubernetes manifest, a gateway's
			}
			for name, p := range doc.Policies {
				shown++
				if !reflect.DeepEqual(p, file.Policies[name]) {
					t.Errorf("%s shows the policy %s as\n%v\nwhere examples/policies.yaml has\n%v", page.path, name, p, file.Policies[name])
				}
			}
		}
	}
	if shown < len(file.Policies) {
		t.Errorf("the pages show %d policies in YAML, fewer than examples/policies.yaml's %d", shown, len(file.Policies))
	}
}

// TestRatelimitExample: the gRPC door loads examples/ratelimit unchanged
// and answers the call of docs/gateways.md's grpcurl example by its rule,
// and Envoy's remote_address descriptor by the other. Only first answers
// are asserted: the windows are minutes aligned to the clock, so a second
// call may fall in the next one.
func TestRatelimitExample(t *testing.T) {
	page, err := os.ReadFile("../docs/gateways.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^grpcurl -plaintext -d '([^']+)' \\\n\s+\S+ envoy\.service\.ratelimit\.v3\.RateLimitService/ShouldRateLimit$`).FindSubmatch(page)
	if m == nil {
		t.Fatal("docs/gateways.md has no grpcurl ... -d '{json}' ... RateLimitService/ShouldRateLimit example")
	}
	var req pb.RateLimitRequest
	if err := protojson.Unmarshal(m[1], &req); err != nil {
		t.Fatalf("docs/gateways.md's grpcurl request %s: %v", m[1], err)
	}
	d := startDoors(t, "../examples/ratelimit")
	c, _ := rlsClient(t, d.GRPC)
	resp, err := c.ShouldRateLimit(ctxT(t), &req)
	if err != nil {
		t.Fatalf("ShouldRateLimit(%s): %v", m[1], err)
	}
	checkStatuses(t, resp, rlOK, st{rlOK, 5, rlMinute, "", 4})
	checkStatuses(t, ask(t, c, "shop", 0, desc("remote_address", "192.0.2.1")), rlOK, st{rlOK, 100, rlMinute, "", 99})
}

// TestReadmeIsAFrontPage: the README stays short enough to read in the
// two minutes a newcomer gives it, and links every page of docs/, so that
// the reference it leaves out is one click away.
func TestReadmeIsAFrontPage(t *testing.T) {
	pages := docPages(t)
	readme := pages[0].text
	if n := strings.Count(readme, "\n"); n > 400 {
		t.Errorf("README.md has %d lines; a front page has at most 400: move the reference to docs/", n)
	}
	for _, page := range pages[1:] {
		link := "](docs/" + filepath.Base(page.path) + ")"
		if !strings.Contains(readme, link) {
			t.Errorf("README.md does not link %s (a link ending %s)", page.path, link)
		}
	}
}
