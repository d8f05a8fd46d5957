package deploy_test

// Tests of the Kubernetes manifests under deploy/k8s: they agree with the
// config, the image and each other.

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/repotest"
)

// kubeObject is one manifest: its kind and name, and the whole document.
type kubeObject struct {
	file string
	kind string
	name string
	doc  map[string]any
}

func loadKubeFile(t *testing.T, path string) []kubeObject {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(string(repotest.Read(t, path))))
	var out []kubeObject
	for {
		var doc map[string]any
		err := dec.Decode(&doc)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if doc == nil {
			continue // an empty document between ---
		}
		kind, _ := doc["kind"].(string)
		name, _ := yamlDig(doc, "metadata", "name").(string)
		if _, ok := doc["apiVersion"].(string); !ok || kind == "" || (name == "" && kind != "Kustomization") {
			t.Errorf("%s: a document without apiVersion, kind or metadata.name", path)
		}
		out = append(out, kubeObject{file: filepath.Base(path), kind: kind, name: name, doc: doc})
	}
	return out
}

// yamlDig walks nested mappings and lists (by int index) of a YAML document.
func yamlDig(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func yamlList(v any) []any {
	l, _ := v.([]any)
	return l
}

func yamlStr(v any) string {
	if v == nil {
		return ""
	}
	return fmt.Sprint(v)
}

// kubeManifests loads deploy/k8s: the kustomization's resources and the
// Secret example, by kind.
func kubeManifests(t *testing.T) (byKind map[string]kubeObject, kustomization map[string]any) {
	t.Helper()
	dir := filepath.Join(deployDir, "k8s")
	kz := loadKubeFile(t, filepath.Join(dir, "kustomization.yaml"))
	if len(kz) != 1 {
		t.Fatalf("kustomization.yaml: %d documents; want 1", len(kz))
	}
	kustomization = kz[0].doc
	byKind = map[string]kubeObject{}
	listed := map[string]bool{}
	for _, r := range yamlList(kustomization["resources"]) {
		file := yamlStr(r)
		listed[file] = true
		for _, o := range loadKubeFile(t, filepath.Join(dir, file)) {
			if _, dup := byKind[o.kind]; dup {
				t.Errorf("two %s manifests", o.kind)
			}
			byKind[o.kind] = o
		}
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		base := filepath.Base(f)
		if base == "kustomization.yaml" || strings.Contains(base, ".example.") {
			continue
		}
		if !listed[base] {
			t.Errorf("kustomization.yaml does not list %s", base)
		}
	}
	for _, o := range loadKubeFile(t, filepath.Join(dir, "secret.example.yaml")) {
		byKind[o.kind] = o
	}
	for _, kind := range []string{"Deployment", "ConfigMap", "Service", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule", "Secret"} {
		if _, ok := byKind[kind]; !ok {
			t.Fatalf("deploy/k8s has no %s", kind)
		}
	}
	return byKind, kustomization
}

func sameLabels(selector, labels any) bool {
	sel, _ := selector.(map[string]any)
	lab, _ := labels.(map[string]any)
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if yamlStr(lab[k]) != yamlStr(v) {
			return false
		}
	}
	return true
}

func TestKubeManifestsAgreeWithTheConfigTheImageAndEachOther(t *testing.T) {
	k, kustomization := kubeManifests(t)
	dep, cm, svc, pdb, sm, secret := k["Deployment"].doc, k["ConfigMap"].doc, k["Service"].doc, k["PodDisruptionBudget"].doc, k["ServiceMonitor"].doc, k["Secret"].doc
	pod := yamlDig(dep, "spec", "template", "spec")
	podLabels := yamlDig(dep, "spec", "template", "metadata", "labels")
	containers := yamlList(yamlDig(pod, "containers"))
	if len(containers) != 1 {
		t.Fatalf("Deployment has %d containers; want 1", len(containers))
	}
	ctr := containers[0]

	if r := yamlStr(yamlDig(dep, "spec", "replicas")); r != "2" {
		t.Errorf("Deployment replicas %s; want 2", r)
	}
	if !sameLabels(yamlDig(dep, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("Deployment selector does not match its pod labels")
	}

	// The config: where the container reads it, and what it is.
	_, dockerCmd := dockerfileRun(t)
	runArgs := dockerCmd
	if a := argList(yamlDig(ctr, "args")); a != nil {
		runArgs = a
	}
	if yamlDig(ctr, "command") != nil {
		t.Errorf("container overrides the image's ENTRYPOINT: %v", yamlDig(ctr, "command"))
	}
	configPath, ok := configFlagValue(runArgs)
	if !ok {
		t.Fatalf("container runs %q: no --config", runArgs)
	}
	if dockerPath, _ := configFlagValue(dockerCmd); dockerPath != configPath {
		t.Errorf("container reads %s; the Dockerfile CMD reads %s", configPath, dockerPath)
	}
	var mountPath, volume string
	for _, m := range yamlList(yamlDig(ctr, "volumeMounts")) {
		if mp := yamlStr(yamlDig(m, "mountPath")); strings.HasPrefix(configPath, strings.TrimSuffix(mp, "/")+"/") {
			mountPath, volume = mp, yamlStr(yamlDig(m, "name"))
			if yamlDig(m, "readOnly") != true {
				t.Errorf("config volume mount %s is not readOnly", mp)
			}
		}
	}
	if mountPath != "/etc/shaper" {
		t.Errorf("config %s is mounted from %q; want a mount at /etc/shaper", configPath, mountPath)
	}
	cmName := ""
	for _, v := range yamlList(yamlDig(pod, "volumes")) {
		if yamlStr(yamlDig(v, "name")) == volume {
			cmName = yamlStr(yamlDig(v, "configMap", "name"))
		}
	}
	if cmName != k["ConfigMap"].name {
		t.Fatalf("volume %q mounts ConfigMap %q; the ConfigMap is %q", volume, cmName, k["ConfigMap"].name)
	}
	key := strings.TrimPrefix(configPath, mountPath+"/")
	text := yamlStr(yamlDig(cm, "data", key))
	if text == "" {
		t.Fatalf("ConfigMap %s has no key %q (the file %s)", cmName, key, configPath)
	}

	// Every ${VAR} of the config comes from the Deployment's env, and every
	// secretKeyRef from the example Secret.
	env := map[string]any{}
	for _, e := range yamlList(yamlDig(ctr, "env")) {
		env[yamlStr(yamlDig(e, "name"))] = e
	}
	for _, v := range configVars(text) {
		e, ok := env[v]
		if !ok {
			t.Errorf("the config references ${%s}; the Deployment does not set it", v)
		}
		if ref := yamlDig(e, "valueFrom", "secretKeyRef"); ref != nil {
			if yamlStr(yamlDig(ref, "name")) != k["Secret"].name {
				t.Errorf("env %s comes from Secret %q; the example Secret is %q", v, yamlStr(yamlDig(ref, "name")), k["Secret"].name)
			}
			if yamlDig(secret, "stringData", yamlStr(yamlDig(ref, "key"))) == nil && yamlDig(secret, "data", yamlStr(yamlDig(ref, "key"))) == nil {
				t.Errorf("env %s comes from key %q, which the example Secret lacks", v, yamlStr(yamlDig(ref, "key")))
			}
		}
		t.Setenv(v, "from-the-secret-0123456789")
	}
	path := filepath.Join(t.TempDir(), filepath.Base(configPath))
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errs := runShaper(t, "validate", "--config", path); code != exitOK {
		t.Fatalf("shaper validate on the ConfigMap's %s = %d; want 0:\n%s", key, code, errs)
	}
	cfg, err := config.Load(path)
	if err != nil {
		t.Fatal(err)
	}

	// Ports and probes.
	port := adminPort(t, cfg.Admin.Listen)
	var portName string
	for _, p := range yamlList(yamlDig(ctr, "ports")) {
		if yamlStr(yamlDig(p, "containerPort")) == port {
			portName = yamlStr(yamlDig(p, "name"))
		}
	}
	if portName != "metrics" {
		t.Errorf("no container port named metrics at admin.listen's port %s (found %q)", port, portName)
	}
	for probe, want := range map[string]string{"livenessProbe": "/healthz", "readinessProbe": "/readyz"} {
		got, gotPort := yamlStr(yamlDig(ctr, probe, "httpGet", "path")), yamlStr(yamlDig(ctr, probe, "httpGet", "port"))
		if got != want || (gotPort != "metrics" && gotPort != port) {
			t.Errorf("%s GET %s on port %s; want %s on the metrics port", probe, got, gotPort, want)
		}
	}

	// Shutdown: the drain fits in the grace period.
	grace, err := strconv.Atoi(yamlStr(yamlDig(pod, "terminationGracePeriodSeconds")))
	if err != nil || time.Duration(grace)*time.Second <= cfg.Shutdown.DrainTimeout {
		t.Errorf("terminationGracePeriodSeconds %v; want more than shutdown.drain_timeout (%v)", yamlDig(pod, "terminationGracePeriodSeconds"), cfg.Shutdown.DrainTimeout)
	}

	// Security and resources.
	if yamlDig(pod, "securityContext", "runAsNonRoot") != true && yamlDig(ctr, "securityContext", "runAsNonRoot") != true {
		t.Error("runAsNonRoot is not set")
	}
	// The image's USER is a name; the kubelet verifies runAsNonRoot only
	// against a numeric uid.
	uid := yamlDig(ctr, "securityContext", "runAsUser")
	if uid == nil {
		uid = yamlDig(pod, "securityContext", "runAsUser")
	}
	if n, err := strconv.Atoi(yamlStr(uid)); err != nil || n == 0 {
		t.Errorf("runAsUser %v; want a non-zero uid (65532, distroless nonroot)", uid)
	}
	if yamlDig(ctr, "securityContext", "readOnlyRootFilesystem") != true {
		t.Error("readOnlyRootFilesystem is not true")
	}
	if yamlDig(ctr, "securityContext", "allowPrivilegeEscalation") != false {
		t.Error("allowPrivilegeEscalation is not false")
	}
	for _, r := range []string{"requests", "limits"} {
		if yamlDig(ctr, "resources", r, "memory") == nil {
			t.Errorf("resources.%s.memory is not set", r)
		}
	}
	if yamlDig(ctr, "resources", "requests", "cpu") == nil {
		t.Error("resources.requests.cpu is not set")
	}

	// Service, PodDisruptionBudget, ServiceMonitor.
	if !sameLabels(yamlDig(svc, "spec", "selector"), podLabels) {
		t.Error("Service selector does not match the pods")
	}
	svcPort := ""
	for _, p := range yamlList(yamlDig(svc, "spec", "ports")) {
		if yamlStr(yamlDig(p, "name")) == "metrics" {
			svcPort = yamlStr(yamlDig(p, "targetPort"))
		}
	}
	if svcPort != "metrics" && svcPort != port {
		t.Errorf("Service port metrics targets %q; want the container's metrics port", svcPort)
	}
	if minAvailable := yamlStr(yamlDig(pdb, "spec", "minAvailable")); minAvailable != "1" {
		t.Errorf("PodDisruptionBudget minAvailable %s; want 1", minAvailable)
	}
	if !sameLabels(yamlDig(pdb, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("PodDisruptionBudget selector does not match the pods")
	}
	if api := yamlStr(sm["apiVersion"]); api != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %s", api)
	}
	if !sameLabels(yamlDig(sm, "spec", "selector", "matchLabels"), yamlDig(svc, "metadata", "labels")) {
		t.Error("ServiceMonitor selector does not match the Service's labels")
	}
	endpoints := yamlList(yamlDig(sm, "spec", "endpoints"))
	if len(endpoints) == 0 || yamlStr(yamlDig(endpoints[0], "port")) != "metrics" {
		t.Errorf("ServiceMonitor endpoints %v; want port metrics", endpoints)
	} else if p := yamlStr(yamlDig(endpoints[0], "path")); p != "" && p != "/metrics" {
		t.Errorf("ServiceMonitor path %s; shaper serves /metrics", p)
	}

	// The image the kustomization sets is the one the Deployment names.
	image := yamlStr(yamlDig(ctr, "image"))
	named := false
	for _, img := range yamlList(kustomization["images"]) {
		if yamlStr(yamlDig(img, "name")) == image {
			named = true
		}
	}
	if !named {
		t.Errorf("Deployment image %q is not set by kustomization.yaml images", image)
	}
}

var updatePrometheusRule = flag.Bool("update-prometheusrule", false,
	"rewrite deploy/k8s/prometheusrule.yaml from deploy/prometheus/alerts.yml")

// prometheusRuleHead is deploy/k8s/prometheusrule.yaml up to its groups,
// which are those of deploy/prometheus/alerts.yml.
const prometheusRuleHead = `# The alert rules of deploy/prometheus/alerts.yml for the Prometheus
# Operator. Generated from that file: edit it, then run
#   go test ./deploy/ -run TestKubePrometheusRuleCarriesTheAlertRules -update-prometheusrule
# (the test fails while the groups here differ from its groups). Your
# Prometheus selects PrometheusRules by label (ruleSelector, often
# release: <helm release name>); add that label here if it does.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: shaper
  labels:
    app.kubernetes.io/name: shaper
spec:
`

// prometheusRuleFrom returns the PrometheusRule manifest that carries the
// groups of a Prometheus rule file: the file from its groups key on,
// indented under spec, comments included.
func prometheusRuleFrom(t *testing.T, rules []byte) []byte {
	t.Helper()
	i := bytes.Index(rules, []byte("\ngroups:"))
	if i < 0 {
		t.Fatal("alerts.yml: no top-level groups key")
	}
	out := bytes.NewBufferString(prometheusRuleHead)
	for _, line := range strings.SplitAfter(string(rules[i+1:]), "\n") {
		if strings.TrimSpace(line) != "" {
			out.WriteString("  ")
		}
		out.WriteString(line)
	}
	return out.Bytes()
}

// TestKubePrometheusRuleCarriesTheAlertRules checks that the PrometheusRule
// of deploy/k8s has exactly the groups of deploy/prometheus/alerts.yml, so
// that compose and Kubernetes alert alike, and that the job its rules match
// on is the one the ServiceMonitor's targets get.
func TestKubePrometheusRuleCarriesTheAlertRules(t *testing.T) {
	rulesPath := filepath.Join(deployDir, "prometheus", "alerts.yml")
	rulePath := filepath.Join(deployDir, "k8s", "prometheusrule.yaml")
	if *updatePrometheusRule {
		if err := os.WriteFile(rulePath, prometheusRuleFrom(t, repotest.Read(t, rulesPath)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	k, _ := kubeManifests(t)
	pr, sm, svc := k["PrometheusRule"].doc, k["ServiceMonitor"].doc, k["Service"].doc
	if api := yamlStr(pr["apiVersion"]); api != "monitoring.coreos.com/v1" {
		t.Errorf("PrometheusRule apiVersion %s; want monitoring.coreos.com/v1", api)
	}
	if !sameLabels(yamlDig(sm, "metadata", "labels"), yamlDig(pr, "metadata", "labels")) {
		t.Errorf("PrometheusRule labels %v lack the ServiceMonitor's %v: a Prometheus that selects one by label misses the other",
			yamlDig(pr, "metadata", "labels"), yamlDig(sm, "metadata", "labels"))
	}

	var rules map[string]any
	if err := yaml.Unmarshal(repotest.Read(t, rulesPath), &rules); err != nil {
		t.Fatalf("%s: %v", rulesPath, err)
	}
	want, got := yamlList(rules["groups"]), yamlList(yamlDig(pr, "spec", "groups"))
	if len(want) == 0 {
		t.Fatal("alerts.yml has no groups")
	}
	if !reflect.DeepEqual(got, want) {
		for i := range max(len(got), len(want)) {
			var g, w any
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if !reflect.DeepEqual(g, w) {
				t.Errorf("PrometheusRule spec.groups[%d] differs from alerts.yml groups[%d]:\n got %v\nwant %v", i, i, g, w)
			}
		}
		t.Errorf("deploy/k8s/prometheusrule.yaml is not alerts.yml's groups; regenerate it with\n" +
			"  go test ./deploy/ -run TestKubePrometheusRuleCarriesTheAlertRules -update-prometheusrule")
	}

	// The Prometheus Operator names a ServiceMonitor's job after the Service
	// (unless spec.jobLabel names a label of the Service to take it from).
	job := yamlStr(yamlDig(svc, "metadata", "name"))
	if l := yamlStr(yamlDig(sm, "spec", "jobLabel")); l != "" {
		job = yamlStr(yamlDig(svc, "metadata", "labels", l))
	}
	for _, j := range alertJobs(t) {
		if j != job {
			t.Errorf("the alert rules match job=%q; the ServiceMonitor's targets get job=%q", j, job)
		}
	}
}
