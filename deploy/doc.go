// Package deploy checks the deployment artefacts: the Dockerfile and
// .dockerignore, make dist's release binaries, deploy/docker-compose.yml
// and every file it mounts, the Grafana dashboard, the Prometheus alert
// rules and the Kubernetes manifests. There is no Docker or Kubernetes
// where the tests run: the files are parsed (the compose file by
// compose-go, the loader of docker compose; every PromQL expression by
// Prometheus's own parser) and checked against each other, against
// `shaper validate`, and against the metrics a running shaper really
// exports. TestMain builds the shaper binary they run.
//
// The package holds tests only:
//
//	go test -race -count=1 ./deploy/
package deploy
