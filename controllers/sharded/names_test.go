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

// No controller creates with a generated name (the contract in names.go):
// this walks every non-test Go file under controllers/ and fails on a
// GenerateName set to anything but "" other than beside a Name set in the
// same composite literal or assignment.
func TestNoControllerCreatesWithAGeneratedName(t *testing.T) {
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
		for _, pos := range generatedNames(file) {
			t.Errorf("%s: a GenerateName is set without a Name beside it; derive the name (sharded.ChildName)", fset.Position(pos))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 50 {
		t.Fatalf("checked %d files under %s: not the controllers' tree", checked, root)
	}
}

func TestAGenerateNameIsFoundUnlessANameIsBesideIt(t *testing.T) {
	for src, want := range map[string]int{
		`m := metav1.ObjectMeta{GenerateName: "a-"}`:              1,
		`m := metav1.ObjectMeta{Name: "a-x", GenerateName: "a-"}`: 0,
		`m := metav1.ObjectMeta{Name: "", GenerateName: "a-"}`:    1,
		`m := metav1.ObjectMeta{GenerateName: ""}`:                0,
		`m.GenerateName = "a-"`:                                   1,
		`m.Name, m.GenerateName = name, "a-"`:                     0,
		`m.Name, m.GenerateName = "", "a-"`:                       1,
		`m.GenerateName = ""`:                                     0,
		`m.SetGenerateName("a-")`:                                 1,
	} {
		file, err := parser.ParseFile(token.NewFileSet(), "x.go", "package x\nfunc f() {\n"+src+"\n}", 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(generatedNames(file)); got != want {
			t.Errorf("%s: %d found, want %d", src, got, want)
		}
	}
}

// generatedNames are the places in file that set a GenerateName with no
// Name set beside it.
func generatedNames(file *ast.File) []token.Pos {
	var out []token.Pos
	ast.Inspect(file, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit: // an ObjectMeta literal
			set := map[string]bool{}
			var at token.Pos
			for _, e := range n.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if id, ok := kv.Key.(*ast.Ident); ok && !emptyString(kv.Value) {
						set[id.Name] = true
						if id.Name == "GenerateName" {
							at = kv.Pos()
						}
					}
				}
			}
			if set["GenerateName"] && !set["Name"] {
				out = append(out, at)
			}
		case *ast.AssignStmt: // obj.Name, obj.GenerateName = ...
			set := map[string]bool{}
			for k, lhs := range n.Lhs {
				if sel, ok := lhs.(*ast.SelectorExpr); ok && (k >= len(n.Rhs) || !emptyString(n.Rhs[k])) {
					set[sel.Sel.Name] = true
				}
			}
			if set["GenerateName"] && !set["Name"] {
				out = append(out, n.Pos())
			}
		case *ast.CallExpr: // obj.SetGenerateName(...)
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "SetGenerateName" && (len(n.Args) != 1 || !emptyString(n.Args[0])) {
				out = append(out, n.Pos())
			}
		}
		return true
	})
	return out
}

func emptyString(e ast.Expr) bool {
	lit, ok := e.(*ast.BasicLit)
	return ok && lit.Kind == token.STRING && (lit.Value == `""` || lit.Value == "``")
}
