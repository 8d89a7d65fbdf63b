package respserver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestErrorTextsInOnePlace keeps errors.go's word: every error text a
// client can get is written there, but for the one it names (server.go's
// refusal of a connection past MaxConns). A new "ERR …" literal elsewhere
// fails here, with where it is.
func TestErrorTextsInOnePlace(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]int{"errors.go": -1, "server.go": 1}
	codes := []string{"ERR ", "-ERR ", "NOAUTH ", "WRONGPASS ", "NOPROTO ", "EXECABORT "}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		found := 0
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			for _, code := range codes {
				if strings.HasPrefix(v, code) {
					found++
					if allowed[name] >= 0 && found > allowed[name] {
						t.Errorf("%s: error text %q: word it in errors.go", fset.Position(lit.Pos()), v)
					}
					break
				}
			}
			return true
		})
	}
}
