package supervisortest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpuguard/gpuguard/internal/supervisor/supervisortest"
)

// Every mode of the fake trainer is registered by some package's table
// (supervisortest.Modes in a TestMain), where the unused-helper check then
// holds it to a test; a mode that no package registers is dead.
func TestEveryModeIsRegistered(t *testing.T) {
	root := moduleRoot(t)
	self, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]string{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || path == self) {
			return filepath.SkipDir // not this package's own tests: they register modes to test Main
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Modes" {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "supervisortest" {
				return true
			}
			for _, a := range call.Args {
				if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
					name, _ := strconv.Unquote(lit.Value)
					for m := range supervisortest.Modes(name) { // with the modes it starts
						registered[m] = path
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(registered) == 0 {
		t.Fatalf("no supervisortest.Modes call found under %s", root)
	}
	for mode := range supervisortest.Trainer {
		if _, ok := registered[mode]; !ok {
			t.Errorf("fake trainer mode %q is registered by no package's TestMain: delete it from supervisortest.Trainer, or register it where a test runs it", mode)
		}
	}
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the package")
		}
		dir = parent
	}
}
