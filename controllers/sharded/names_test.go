package sharded

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestChildNameIsTheSameForTheSamePartsAndLooksGenerated(t *testing.T) {
	a := ChildName("kubevirt-evacuation-", "uid", "node-1", "0")
	if a != ChildName("kubevirt-evacuation-", "uid", "node-1", "0") {
		t.Error("the same parts gave two names")
	}
	if a == ChildName("kubevirt-evacuation-", "uid", "node-1", "1") || a == ChildName("kubevirt-evacuation-", "uid", "node-10") {
		t.Error("other parts gave the same name")
	}
	if !regexp.MustCompile(`^kubevirt-evacuation-[` + suffixAlphabet + `]{5}$`).MatchString(a) {
		t.Errorf("name %q is not the prefix and a suffix of the API server's form", a)
	}
}

// No controller creates with GenerateName (the contract in names.go): this
// walks every non-test Go file under controllers/ and fails on a
// GenerateName set to anything but "".
func TestNoControllerCreatesWithGenerateName(t *testing.T) {
	root := ".."
	fset := token.NewFileSet()
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		file, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		checked++
		ast.Inspect(file, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.KeyValueExpr: // a GenerateName key in an ObjectMeta literal
				if id, ok := n.Key.(*ast.Ident); ok && id.Name == "GenerateName" && !emptyString(n.Value) {
					t.Errorf("%s: a GenerateName is set; derive the name (sharded.ChildName)", fset.Position(n.Pos()))
				}
			case *ast.AssignStmt: // obj.GenerateName = ...
				for k, lhs := range n.Lhs {
					if sel, ok := lhs.(*ast.SelectorExpr); ok && sel.Sel.Name == "GenerateName" && (k >= len(n.Rhs) || !emptyString(n.Rhs[k])) {
						t.Errorf("%s: a GenerateName is set; derive the name (sharded.ChildName)", fset.Position(n.Pos()))
					}
				}
			case *ast.CallExpr: // obj.SetGenerateName(...)
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "SetGenerateName" && (len(n.Args) != 1 || !emptyString(n.Args[0])) {
					t.Errorf("%s: a GenerateName is set; derive the name (sharded.ChildName)", fset.Position(n.Pos()))
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files under %s: not the controllers' tree", checked, root)
	}
}

func emptyString(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	return ok && lit.Kind == token.STRING && (lit.Value == `""` || lit.Value == "``")
}
