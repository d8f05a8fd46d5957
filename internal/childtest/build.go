package childtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
)

// Build builds cmd/shaper, as go build makes it by default (with the
// demo), into a new temporary directory, and returns the binary's path and
// a function that removes the directory. A test binary that runs with the
// race detector gets a child built with it too, so that Start fails a test
// whose child reports a data race. It is for a TestMain: one build serves
// every test of the package.
func Build() (bin string, remove func(), err error) {
	dir, err := os.MkdirTemp("", "shaper-childtest-")
	if err != nil {
		return "", nil, fmt.Errorf("childtest: build: %w", err)
	}
	remove = func() { os.RemoveAll(dir) }
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		goTool = "go"
	}
	bin = filepath.Join(dir, "shaper")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	args = append(args, "github.com/shaper-dev/shaper/cmd/shaper")
	if out, err := exec.Command(goTool, args...).CombinedOutput(); err != nil {
		remove()
		return "", nil, fmt.Errorf("childtest: go %v: %v\n%s", args, err, out)
	}
	return bin, remove, nil
}
