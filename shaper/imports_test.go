package shaper

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The core bends no part of the Go runtime: its code (every build, tests
// aside) imports neither system calls nor the runtime's knobs, nor the
// package that holds them (internal/tuning, docs/tuning.md). A pipeline
// gets a tuned clock through Parts.Clock, and a sink writes its bytes as
// it likes.
func TestTheCoreImportsNoSystemCallsAndNoRuntimeTuning(t *testing.T) {
	forbidden := func(path string) bool {
		switch path {
		case "syscall", "unsafe", "runtime", "runtime/debug", "github.com/shaper-dev/shaper/internal/tuning":
			return true
		}
		return strings.HasPrefix(path, "golang.org/x/sys/")
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), name, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		checked++
		for _, imp := range f.Imports {
			if path, _ := strconv.Unquote(imp.Path.Value); forbidden(path) {
				t.Errorf("%s imports %s; want the core free of it (it belongs in internal/tuning)", name, path)
			}
		}
	}
	if checked < 10 {
		t.Fatalf("checked %d files of package shaper; want all of them", checked)
	}
}
