package supervisor

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds every function of the run loop's package (issue 22)
// and of the process side it drives (internal/attempt): the loop reads like
// the lifecycle, each concern beside it is a hook of its own (hooks.go), and
// starting an attempt reads as its steps, so no function here needs more
// than a screen or two.
const maxFuncLines = 120

func TestNoLongFunctions(t *testing.T) {
	var files []string
	for _, dir := range []string{".", filepath.Join("..", "attempt")} {
		fs, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil || len(fs) == 0 {
			t.Fatalf("no Go files in %s: %v", dir, err)
		}
		files = append(files, fs...)
	}
	fset := token.NewFileSet()
	longest, where := 0, ""
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines {
				t.Errorf("%s: %s is %d lines (at most %d): split it, or move a concern into a hook (docs/hooks.md)", fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
			}
			if n > longest {
				longest, where = n, f+":"+fd.Name.Name
			}
		}
	}
	t.Logf("longest function: %s, %d lines", where, longest)
}
