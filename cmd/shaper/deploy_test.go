package main

// Tests of the deployment artifacts: the Dockerfile, deploy/docker-compose.yml
// and every file it mounts, the Grafana dashboard, the Prometheus alert rules
// and the Kubernetes manifests. There is no Docker or Kubernetes here: the
// files are parsed and checked against each other, against `shaper validate`,
// and against the metrics a running shaper really exports.

import (
	"os"
	"path/filepath"
	"testing"
)

// repoRoot is the repository root, seen from this package's directory (where
// go test runs).
const repoRoot = "../.."

var deployDir = filepath.Join(repoRoot, "deploy")

// The ldflags of the Dockerfile and the Makefile stamp main.version; -X
// silently does nothing unless it names a string variable.
var _ *string = &version

// readRepoFile reads a file of the repository or fails the test.
func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
