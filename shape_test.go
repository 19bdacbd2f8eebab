package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines bounds every function of the module's non-test Go files,
// from `func` to its closing brace (issue 22): the run loop reads like the
// lifecycle, each concern beside it is a hook of its own (docs/hooks.md),
// and everywhere else a function reads as its named steps, so that a reader
// new to the code follows each on a screen or two.
const maxFuncLines = 120

// TestNoLongFunctions checks every non-test Go file of the module (testdata
// and hidden directories aside, as the go command skips them) against
// maxFuncLines.
func TestNoLongFunctions(t *testing.T) {
	fset := token.NewFileSet()
	longest, where, files := 0, "", 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		af, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, decl := range af.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			if n > maxFuncLines {
				t.Errorf("%s: %s is %d lines (at most %d): split it into named steps, or, in the run loop, move a concern into a hook (docs/hooks.md)",
					fset.Position(fd.Pos()), fd.Name.Name, n, maxFuncLines)
			}
			if n > longest {
				longest, where = n, path+":"+fd.Name.Name
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d Go files: is the test running in the module's root?", files)
	}
	t.Logf("%d files; longest function: %s, %d lines", files, where, longest)
}
