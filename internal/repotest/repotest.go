// Package repotest reads the repository's own files for the tests that
// check them against the code and against each other: the docs, the
// Makefile, the Dockerfile and the deployment artefacts.
package repotest

import (
	"os"
	"testing"
)

// Read reads the file at path, relative to the test's package directory
// (where go test runs it), or fails the test.
func Read(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
