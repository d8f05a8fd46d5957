package main

// Tests of the deployment artifacts: the Dockerfile, deploy/docker-compose.yml
// and every file it mounts, the Grafana dashboard, the Prometheus alert rules
// and the Kubernetes manifests. There is no Docker or Kubernetes here: the
// files are parsed and checked against each other, against `shaper validate`,
// and against the metrics a running shaper really exports.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/segmentio/kafka-go"
	"go.yaml.in/yaml/v3"

	"github.com/shaper-dev/shaper/shaper"
)

// repoRoot is the repository root, seen from this package's directory (where
// go test runs).
const repoRoot = "../.."

var deployDir = filepath.Join(repoRoot, "deploy")

// The ldflags of the Dockerfile and the Makefile stamp main.version; -X
// silently does nothing unless it names a string variable.
var _ *string = &version

// --- Dockerfile ----------------------------------------------------------------

// dockerInstruction is one Dockerfile instruction, continuation lines joined.
type dockerInstruction struct {
	cmd  string // upper case: FROM, RUN, ...
	args string
}

// dockerStage is the instructions of one FROM and what follows it.
type dockerStage struct {
	from  string // the image, ARGs of the global scope substituted
	name  string // AS name, or ""
	instr []dockerInstruction
}

func parseDockerfile(t *testing.T, path string) []dockerStage {
	t.Helper()
	var lines []string
	var cur strings.Builder
	for _, line := range strings.Split(string(readRepoFile(t, path)), "\n") {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "#") || (trimmed == "" && cur.Len() == 0) {
			continue
		}
		if strings.HasSuffix(trimmed, `\`) {
			cur.WriteString(strings.TrimSuffix(trimmed, `\`) + " ")
			continue
		}
		cur.WriteString(trimmed)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	globalArgs := map[string]string{}
	var stages []dockerStage
	for _, line := range lines {
		cmd, args, _ := strings.Cut(line, " ")
		in := dockerInstruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)}
		switch {
		case in.cmd == "ARG" && len(stages) == 0:
			name, def, _ := strings.Cut(in.args, "=")
			globalArgs[name] = def
		case in.cmd == "FROM":
			fields := strings.Fields(in.args)
			fields = slices.DeleteFunc(fields, func(f string) bool { return strings.HasPrefix(f, "--platform=") })
			st := dockerStage{from: os.Expand(fields[0], func(k string) string { return globalArgs[k] })}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				st.name = fields[2]
			}
			stages = append(stages, st)
		case len(stages) == 0:
			t.Fatalf("%s: %s before the first FROM", path, in.cmd)
		default:
			stages[len(stages)-1].instr = append(stages[len(stages)-1].instr, in)
		}
	}
	return stages
}

func (st dockerStage) all(cmd string) []string {
	var out []string
	for _, in := range st.instr {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// last returns the args of the stage's last cmd instruction (the one in
// force), or "".
func (st dockerStage) last(cmd string) string {
	all := st.all(cmd)
	if len(all) == 0 {
		return ""
	}
	return all[len(all)-1]
}

// execForm parses an exec-form (JSON array) argument such as ["/shaper", "run"].
func execForm(t *testing.T, what, s string) []string {
	t.Helper()
	var out []string
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("%s: want the exec form, a JSON array; got %q: %v", what, s, err)
	}
	return out
}

// dockerfileRun returns the final stage's ENTRYPOINT and CMD.
func dockerfileRun(t *testing.T) (entrypoint, cmd []string) {
	t.Helper()
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	final := stages[len(stages)-1]
	return execForm(t, "ENTRYPOINT", final.last("ENTRYPOINT")), execForm(t, "CMD", final.last("CMD"))
}

// configFlagValue returns the value of --config in args.
func configFlagValue(args []string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v, true
		}
		if (a == "--config" || a == "-config") && i+1 < len(args) {
			return args[i+1], true
		}
	}
	return "", false
}

func TestDockerfileBuildsAStaticVersionStampedNonRootImageWithAHealthcheck(t *testing.T) {
	stages := parseDockerfile(t, filepath.Join(repoRoot, "Dockerfile"))
	if len(stages) < 2 {
		t.Fatalf("Dockerfile has %d stages; want a builder and a runtime stage", len(stages))
	}
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.from, "golang:1.26") || build.name == "" {
		t.Errorf("first stage FROM %q AS %q; want golang:1.26 with a name", build.from, build.name)
	}
	if final.from != "gcr.io/distroless/static-debian12:nonroot" {
		t.Errorf("runtime stage FROM %q; want gcr.io/distroless/static-debian12:nonroot", final.from)
	}

	// The build: static, stamped, of ./cmd/shaper, without the demo's
	// embedded brokers (demo_test.go checks what the tag leaves out).
	var goBuild string
	for _, run := range build.all("RUN") {
		if strings.Contains(run, "go build") {
			goBuild = run
		}
	}
	for _, want := range []string{"CGO_ENABLED=0", "-X main.version=${VERSION}", "-tags nodemo", "./cmd/shaper"} {
		if !strings.Contains(goBuild, want) {
			t.Errorf("builder's go build lacks %q: %q", want, goBuild)
		}
	}
	if !slices.ContainsFunc(build.all("ARG"), func(a string) bool { return a == "VERSION" || strings.HasPrefix(a, "VERSION=") }) {
		t.Error("builder stage does not declare ARG VERSION, so --build-arg VERSION=... would not reach go build")
	}
	copied := false
	for _, c := range final.all("COPY") {
		if strings.Contains(c, "--from="+build.name) && strings.HasSuffix(c, " /shaper") {
			copied = true
		}
	}
	if !copied {
		t.Errorf("runtime stage does not COPY --from=%s the binary to /shaper: %q", build.name, final.all("COPY"))
	}

	if user := final.last("USER"); user == "" || user == "root" || user == "0" || strings.HasPrefix(user, "0:") {
		t.Errorf("runtime USER = %q; want a non-root user", user)
	}
	if expose := final.last("EXPOSE"); expose != "9090" {
		t.Errorf("EXPOSE %q; want 9090", expose)
	}

	entrypoint, cmd := dockerfileRun(t)
	if !slices.Equal(entrypoint, []string{"/shaper"}) {
		t.Errorf("ENTRYPOINT %q; want [\"/shaper\"]", entrypoint)
	}
	if !slices.Equal(cmd, []string{"run", "--config", "/etc/shaper/shaper.yaml"}) {
		t.Errorf("CMD %q; want [\"run\", \"--config\", \"/etc/shaper/shaper.yaml\"]", cmd)
	}

	hc := final.last("HEALTHCHECK")
	_, hcCmd, ok := strings.Cut(hc, "CMD ")
	if !ok {
		t.Fatalf("HEALTHCHECK %q has no CMD", hc)
	}
	if args := execForm(t, "HEALTHCHECK CMD", hcCmd); !slices.Equal(args, []string{"/shaper", "healthcheck"}) {
		t.Errorf("HEALTHCHECK CMD %q; want [\"/shaper\", \"healthcheck\"]", args)
	}
	// The healthcheck's default URL must hit the exposed port.
	if port := healthcheckDefaultPort(t); port != "9090" {
		t.Errorf("shaper healthcheck defaults to port %s; the image EXPOSEs 9090", port)
	}
}

// healthcheckDefaultPort reads the default --url of `shaper healthcheck`
// from its flag help.
func healthcheckDefaultPort(t *testing.T) string {
	t.Helper()
	code, _, stderr := runMain(t, "healthcheck", "-h")
	m := regexp.MustCompile(`default "(http://[^"]+)"`).FindStringSubmatch(stderr)
	if code != exitOK || m == nil {
		t.Fatalf("shaper healthcheck -h = %d, %q; want 0 and a default --url", code, stderr)
	}
	u, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func TestDockerHealthcheckSubcommandReportsHealthAndFailure(t *testing.T) {
	healthy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer healthy.Close()
	if code, out, errs := runMain(t, "healthcheck", "--url", healthy.URL+"/healthz"); code != exitOK || out != "ok\n" {
		t.Errorf("healthcheck against a healthy server = %d, %q, %q; want 0, \"ok\\n\"", code, out, errs)
	}
	if code, _, _ := runMain(t, "healthcheck", "--url", healthy.URL+"/elsewhere"); code != exitRuntime {
		t.Errorf("healthcheck against a 404 = %d; want %d", code, exitRuntime)
	}
	healthy.CloseClientConnections()
}

func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	var patterns []string
	for _, line := range strings.Split(string(readRepoFile(t, filepath.Join(repoRoot, ".dockerignore"))), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			patterns = append(patterns, line)
		}
	}
	ignored := func(path string) bool {
		out := false
		for _, p := range patterns {
			neg := strings.HasPrefix(p, "!")
			p = strings.TrimSuffix(strings.TrimPrefix(p, "!"), "/")
			if dockerignoreMatch(p, path) {
				out = !neg
			}
		}
		return out
	}
	// The build needs go.mod, go.sum and every file of every package
	// directory but tests: Go files, and what they embed (limiter/shared.lua).
	need := []string{"go.mod", "go.sum"}
	packageDirs := map[string]bool{}
	var files []string
	err := filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && rel != "." || d.Name() == "testdata" || rel == "deploy") {
			return filepath.SkipDir
		}
		if !d.IsDir() && !strings.HasSuffix(rel, "_test.go") {
			files = append(files, rel)
			if strings.HasSuffix(rel, ".go") {
				packageDirs[filepath.ToSlash(filepath.Dir(rel))] = true
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if packageDirs[filepath.ToSlash(filepath.Dir(f))] {
			need = append(need, f)
		}
	}
	if !slices.Contains(need, "cmd/shaper/main.go") {
		t.Fatalf("the walk found %q; want cmd/shaper/main.go among them", need)
	}
	for _, f := range need {
		if ignored(f) {
			t.Errorf(".dockerignore excludes %s, which the build needs", f)
		}
	}
	for _, skip := range []string{".git", "deploy/docker-compose.yml", "cmd/shaper/deploy_test.go"} {
		if !ignored(skip) {
			t.Errorf(".dockerignore does not exclude %s", skip)
		}
	}
}

// dockerignoreMatch matches a .dockerignore pattern the way Docker does for
// the forms used here: path.Match per element, a leading **/ for any depth,
// and a matched directory excluding everything under it.
func dockerignoreMatch(pattern, path string) bool {
	if rest, ok := strings.CutPrefix(pattern, "**/"); ok {
		parts := strings.Split(path, "/")
		for i := range parts {
			if dockerignoreMatch(rest, strings.Join(parts[i:], "/")) {
				return true
			}
		}
		return false
	}
	for p := path; p != "." && p != ""; p = filepath.Dir(p) {
		if ok, _ := filepath.Match(pattern, p); ok {
			return true
		}
	}
	return false
}

// --- docker compose ------------------------------------------------------------

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
}

type composeService struct {
	Image       string                    `yaml:"image"`
	Build       any                       `yaml:"build"` // a context path, or a mapping
	Command     any                       `yaml:"command"`
	Environment any                       `yaml:"environment"` // a mapping or a KEY=value list
	Volumes     []any                     `yaml:"volumes"`     // "src:dst[:mode]" or a mapping
	Ports       []string                  `yaml:"ports"`
	DependsOn   map[string]map[string]any `yaml:"depends_on"`
	Healthcheck map[string]any            `yaml:"healthcheck"`
	StopGrace   string                    `yaml:"stop_grace_period"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal(readRepoFile(t, filepath.Join(deployDir, "docker-compose.yml")), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	return c
}

// buildContext returns the service's build context and Dockerfile, relative
// to deploy/, or ok false when it is not built.
func (s composeService) buildContext() (dir, dockerfile string, ok bool) {
	switch b := s.Build.(type) {
	case string:
		return b, "Dockerfile", true
	case map[string]any:
		dir, _ = b["context"].(string)
		dockerfile, _ = b["dockerfile"].(string)
		if dir == "" {
			dir = "."
		}
		if dockerfile == "" {
			dockerfile = "Dockerfile"
		}
		return dir, dockerfile, true
	}
	return "", "", false
}

// composeMount is one volume of a compose service: a host path (relative to
// deploy/, or a named volume) mounted at target.
type composeMount struct {
	source, target string
	bind           bool
}

func (s composeService) mounts(t *testing.T) []composeMount {
	t.Helper()
	var out []composeMount
	for _, v := range s.Volumes {
		switch v := v.(type) {
		case string:
			parts := strings.Split(v, ":")
			if len(parts) < 2 {
				continue // an anonymous volume
			}
			src := parts[0]
			out = append(out, composeMount{source: src, target: parts[1], bind: strings.HasPrefix(src, ".") || strings.HasPrefix(src, "/")})
		case map[string]any:
			src, _ := v["source"].(string)
			dst, _ := v["target"].(string)
			out = append(out, composeMount{source: src, target: dst, bind: v["type"] == "bind"})
		default:
			t.Fatalf("volume %v: unexpected form", v)
		}
	}
	return out
}

// hostPath returns the host file mounted so that containerPath exists in the
// container: a file mount at that path, or a directory mount above it.
func (s composeService) hostPath(t *testing.T, containerPath string) (string, bool) {
	t.Helper()
	for _, m := range s.mounts(t) {
		if !m.bind {
			continue
		}
		if m.target == containerPath {
			return filepath.Join(deployDir, m.source), true
		}
		if rest, ok := strings.CutPrefix(containerPath, strings.TrimSuffix(m.target, "/")+"/"); ok {
			return filepath.Join(deployDir, m.source, rest), true
		}
	}
	return "", false
}

func (s composeService) env() map[string]string {
	out := map[string]string{}
	switch e := s.Environment.(type) {
	case map[string]any:
		for k, v := range e {
			out[k] = fmt.Sprint(v)
		}
	case []any:
		for _, kv := range e {
			k, v, _ := strings.Cut(fmt.Sprint(kv), "=")
			out[k] = v
		}
	}
	return out
}

// argList returns a command or entrypoint as a list, whether written as a
// string or a list.
func argList(v any) []string {
	switch v := v.(type) {
	case string:
		return strings.Fields(v)
	case []any:
		out := make([]string, len(v))
		for i, a := range v {
			out[i] = fmt.Sprint(a)
		}
		return out
	}
	return nil
}

// shaperServices returns the compose services built from the repository's
// Dockerfile, by name.
func shaperServices(t *testing.T, c composeFile) map[string]composeService {
	t.Helper()
	out := map[string]composeService{}
	root, _ := filepath.Abs(repoRoot)
	for name, s := range c.Services {
		ctx, dockerfile, ok := s.buildContext()
		if !ok {
			continue
		}
		abs, _ := filepath.Abs(filepath.Join(deployDir, ctx))
		if abs == root && dockerfile == "Dockerfile" {
			out[name] = s
		}
	}
	if len(out) < 2 {
		t.Fatalf("docker-compose.yml builds %d shaper services from the Dockerfile; want two replicas", len(out))
	}
	return out
}

// composedShaper is a shaper service with its config, as the container sees it.
type composedShaper struct {
	name       string
	service    composeService
	configPath string // on the host
	config     *shaper.Config
	configText string
}

// composedShapers returns every shaper service of the compose file with the
// config it mounts, loaded with the service's environment variable names set.
func composedShapers(t *testing.T, c composeFile) []composedShaper {
	t.Helper()
	_, cmd := dockerfileRun(t)
	var out []composedShaper
	for name, s := range shaperServices(t, c) {
		runArgs := cmd
		if s.Command != nil {
			runArgs = argList(s.Command)
		}
		inContainer, ok := configFlagValue(runArgs)
		if !ok {
			t.Fatalf("service %s runs %q: no --config", name, runArgs)
		}
		host, ok := s.hostPath(t, inContainer)
		if !ok {
			t.Fatalf("service %s: no bind mount provides its config %s", name, inContainer)
		}
		text := string(readRepoFile(t, host))
		env := s.env()
		for _, v := range configVars(text) {
			if _, ok := env[v]; !ok {
				t.Errorf("service %s: its config %s references ${%s}, which the service's environment does not set", name, host, v)
			}
			t.Setenv(v, "from-the-compose-environment")
		}
		cfg, err := shaper.Load(host)
		if err != nil {
			t.Fatalf("service %s: config %s: %v", name, host, err)
		}
		out = append(out, composedShaper{name: name, service: s, configPath: host, config: cfg, configText: text})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

var configVarRE = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// configVars returns the ${VAR} names a config references, outside comments.
func configVars(text string) []string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if i := strings.Index(line, "#"); i >= 0 && (i == 0 || line[i-1] == ' ') {
			line = line[:i]
		}
		for _, m := range configVarRE.FindAllStringSubmatch(line, -1) {
			if !slices.Contains(out, m[1]) {
				out = append(out, m[1])
			}
		}
	}
	return out
}

func adminPort(t *testing.T, listen string) string {
	t.Helper()
	_, port, err := net.SplitHostPort(listen)
	if err != nil {
		t.Fatalf("admin.listen %q: %v", listen, err)
	}
	return port
}

func TestComposeServicesReferOnlyToFilesAndServicesThatExist(t *testing.T) {
	c := loadCompose(t)
	for name, s := range c.Services {
		if ctx, dockerfile, ok := s.buildContext(); ok {
			dir := filepath.Join(deployDir, ctx)
			if st, err := os.Stat(dir); err != nil || !st.IsDir() {
				t.Errorf("service %s: build context %s is not a directory", name, dir)
			}
			if _, err := os.Stat(filepath.Join(dir, dockerfile)); err != nil {
				t.Errorf("service %s: %v", name, err)
			}
		} else if s.Image == "" {
			t.Errorf("service %s has neither image nor build", name)
		}
		for _, m := range s.mounts(t) {
			if !m.bind {
				continue
			}
			if _, err := os.Stat(filepath.Join(deployDir, m.source)); err != nil {
				t.Errorf("service %s mounts %s at %s: %v", name, m.source, m.target, err)
			}
		}
		for dep, opts := range s.DependsOn {
			target, ok := c.Services[dep]
			if !ok {
				t.Errorf("service %s depends on %s, which is not a service", name, dep)
				continue
			}
			switch cond := opts["condition"]; cond {
			case "service_healthy":
				// A service built from the Dockerfile has its HEALTHCHECK.
				if _, _, built := target.buildContext(); target.Healthcheck == nil && !built {
					t.Errorf("service %s waits for %s to be healthy, but %s has no healthcheck", name, dep, dep)
				}
			case "service_started", "service_completed_successfully", nil:
			default:
				t.Errorf("service %s: depends_on %s condition %v: not a compose condition", name, dep, cond)
			}
		}
	}
}

func TestComposeShaperConfigsPassValidateAndMatchTheStack(t *testing.T) {
	c := loadCompose(t)
	shapers := composedShapers(t, c)
	prom := prometheusConfig(t, c)
	targets := prom.shaperTargets()

	for _, sh := range shapers {
		t.Run(sh.name, func(t *testing.T) {
			// The exact check the daemon makes at start, through the CLI.
			if code, _, errs := runMain(t, "validate", "--config", sh.configPath); code != exitOK {
				t.Fatalf("shaper validate %s = %d; want 0:\n%s", sh.configPath, code, errs)
			}
			cfg := sh.config
			if host, _, _ := net.SplitHostPort(cfg.Admin.Listen); host != "0.0.0.0" && host != "" {
				t.Errorf("admin.listen %q: other containers (Prometheus) cannot reach it; want 0.0.0.0", cfg.Admin.Listen)
			}
			port := adminPort(t, cfg.Admin.Listen)
			if !slices.Contains(targets, sh.name+":"+port) {
				t.Errorf("Prometheus scrapes %q; want %s:%s (the service's admin.listen)", targets, sh.name, port)
			}
			for _, p := range sh.service.Ports {
				parts := strings.Split(p, ":")
				if container := parts[len(parts)-1]; container != port {
					t.Errorf("ports %q maps container port %s; admin.listen is on %s", p, container, port)
				}
			}
			if hc := argList(sh.service.Healthcheck["test"]); len(hc) > 0 {
				if !slices.Contains(hc, "healthcheck") {
					t.Errorf("healthcheck %q does not run shaper healthcheck", hc)
				} else if !slices.Contains(hc, "--url") && port != healthcheckDefaultPort(t) {
					t.Errorf("healthcheck %q uses the default URL, but admin.listen is on port %s", hc, port)
				}
			}
			grace, err := time.ParseDuration(sh.service.StopGrace)
			if err != nil || grace <= cfg.Shutdown.DrainTimeout {
				t.Errorf("stop_grace_period %q; want a duration above shutdown.drain_timeout (%v), or the drain is killed", sh.service.StopGrace, cfg.Shutdown.DrainTimeout)
			}
			checkConfigDialsComposeServices(t, c, cfg)
			checkComposeCreatesWhatTheConfigConsumes(t, c, cfg)
			checkSharedBucketsDrainWithinMaxQueueTime(t, cfg, len(shapers))
		})
	}
}

// checkSharedBucketsDrainWithinMaxQueueTime checks the sizing of pipelines
// whose replicas share one rate: each replica holds its bucket's capacity to
// limit x max_queue_time, but the replicas together drain at limit, so their
// buckets together must fit in limit x max_queue_time, or a large burst
// expires messages.
func checkSharedBucketsDrainWithinMaxQueueTime(t *testing.T, cfg *shaper.Config, replicas int) {
	t.Helper()
	for _, p := range cfg.Pipelines {
		if p.Rate.Shared == nil {
			continue
		}
		perReplica := min(float64(p.Bucket.Capacity), p.Rate.Limit*p.Bucket.MaxQueueTime.Seconds())
		if drain := float64(replicas) * perReplica / p.Rate.Limit; drain > p.Bucket.MaxQueueTime.Seconds() {
			t.Errorf("pipeline %s: %d replicas hold %v messages, which take %.0fs to leave at the shared %v/s; max_queue_time is %v",
				p.Name, replicas, float64(replicas)*perReplica, drain, p.Rate.Limit, p.Bucket.MaxQueueTime)
		}
	}
}

// checkConfigDialsComposeServices checks that every address in the config
// names a compose service.
func checkConfigDialsComposeServices(t *testing.T, c composeFile, cfg *shaper.Config) {
	t.Helper()
	check := func(key, hostport string) {
		t.Helper()
		host, _, err := net.SplitHostPort(hostport)
		if err != nil {
			t.Errorf("%s: %q: %v", key, hostport, err)
			return
		}
		if _, ok := c.Services[host]; !ok {
			t.Errorf("%s: %q: %s is not a compose service", key, hostport, host)
		}
	}
	checkURL := func(key, raw string) {
		t.Helper()
		u, err := url.Parse(raw)
		if err != nil {
			t.Errorf("%s: %v", key, err)
			return
		}
		host := u.Host
		if u.Port() == "" {
			host += ":80"
		}
		check(key, host)
	}
	checkKafka := func(key string, k shaper.KafkaConnConfig) {
		for i, b := range k.Brokers {
			check(fmt.Sprintf("%s.brokers[%d]", key, i), b)
		}
	}
	for i, p := range cfg.Pipelines {
		key := fmt.Sprintf("pipelines[%d]", i)
		if k := p.Source.Kafka; k != nil {
			checkKafka(key+".source.kafka", k.KafkaConnConfig)
		}
		if n := p.Source.NATS; n != nil {
			checkURL(key+".source.nats.url", n.URL)
		}
		if sh := p.Rate.Shared; sh != nil {
			check(key+".rate.shared.redis.addr", sh.Redis.Addr)
		}
		if h := p.Sink.HTTP; h != nil {
			checkURL(key+".sink.http.url", h.URL)
		}
		if k := p.Sink.Kafka; k != nil {
			checkKafka(key+".sink.kafka", k.KafkaConnConfig)
		}
		if n := p.Sink.NATS; n != nil {
			checkURL(key+".sink.nats.url", n.URL)
		}
		if dl := p.DeadLetter; dl != nil && dl.Kafka != nil {
			checkKafka(key+".dead_letter.kafka", dl.Kafka.KafkaConnConfig)
		}
		if dl := p.DeadLetter; dl != nil && dl.NATS != nil {
			checkURL(key+".dead_letter.nats.url", dl.NATS.URL)
		}
	}
}

// checkComposeCreatesWhatTheConfigConsumes checks that some compose service
// creates the Kafka topics and JetStream streams the config needs (the broker
// does not create them), and that a producer feeds each source.
func checkComposeCreatesWhatTheConfigConsumes(t *testing.T, c composeFile, cfg *shaper.Config) {
	t.Helper()
	var scripts []string
	for _, s := range c.Services {
		scripts = append(scripts, strings.Join(argList(s.Command), " "))
	}
	created := func(needle string) bool {
		return slices.ContainsFunc(scripts, func(s string) bool {
			return strings.Contains(s, needle+" ") || strings.HasSuffix(s, needle)
		})
	}
	for i, p := range cfg.Pipelines {
		if k := p.Source.Kafka; k != nil {
			if !created("--create --if-not-exists --topic " + k.Topic) {
				t.Errorf("pipelines[%d]: no compose service creates the source topic %q", i, k.Topic)
			}
			if !created("--topic " + k.Topic) {
				t.Errorf("pipelines[%d]: no compose service produces to %q", i, k.Topic)
			}
		}
		if dl := p.DeadLetter; dl != nil && dl.Kafka != nil && !created("--create --if-not-exists --topic "+dl.Kafka.Topic) {
			t.Errorf("pipelines[%d]: no compose service creates the dead-letter topic %q", i, dl.Kafka.Topic)
		}
		if n := p.Source.NATS; n != nil {
			if n.Stream != "" && !created("stream add "+n.Stream) {
				t.Errorf("pipelines[%d]: no compose service creates the JetStream stream %q", i, n.Stream)
			}
			if !created("pub " + n.Subject) {
				t.Errorf("pipelines[%d]: no compose service publishes to %q", i, n.Subject)
			}
		}
	}
}

// promConfig is the part of prometheus.yml these tests read.
type promConfig struct {
	RuleFiles     []string `yaml:"rule_files"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`

	service composeService
}

func (p promConfig) shaperTargets() []string {
	var out []string
	for _, sc := range p.ScrapeConfigs {
		if sc.JobName != "shaper" {
			continue
		}
		for _, st := range sc.StaticConfigs {
			out = append(out, st.Targets...)
		}
	}
	return out
}

// prometheusConfig loads the config the compose prometheus service runs.
func prometheusConfig(t *testing.T, c composeFile) promConfig {
	t.Helper()
	s, ok := c.Services["prometheus"]
	if !ok {
		t.Fatal("docker-compose.yml has no prometheus service")
	}
	path := "/etc/prometheus/prometheus.yml" // the image's default
	for _, a := range argList(s.Command) {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			path = v
		}
	}
	host, ok := s.hostPath(t, path)
	if !ok {
		t.Fatalf("prometheus: nothing is mounted at its config %s", path)
	}
	var p promConfig
	if err := yaml.Unmarshal(readRepoFile(t, host), &p); err != nil {
		t.Fatalf("%s: %v", host, err)
	}
	p.service = s
	return p
}

func TestComposePrometheusScrapesEveryShaperAndLoadsTheAlertRules(t *testing.T) {
	c := loadCompose(t)
	prom := prometheusConfig(t, c)
	shapers := composedShapers(t, c)

	var want []string
	for _, sh := range shapers {
		want = append(want, sh.name+":"+adminPort(t, sh.config.Admin.Listen))
	}
	got := slices.Clone(prom.shaperTargets())
	sort.Strings(got)
	if !slices.Equal(got, want) {
		t.Errorf("job shaper scrapes %q; want every shaper replica's admin port %q", got, want)
	}
	for _, sc := range prom.ScrapeConfigs {
		if sc.JobName == "shaper" && sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
			t.Errorf("job shaper metrics_path %q; shaper serves /metrics", sc.MetricsPath)
		}
	}

	alerts := filepath.Join(deployDir, "prometheus", "alerts.yml")
	loaded := false
	for _, rf := range prom.RuleFiles {
		host, ok := prom.service.hostPath(t, rf)
		if !ok {
			t.Errorf("rule_files %s: not mounted into the prometheus service", rf)
			continue
		}
		if _, err := os.Stat(host); err != nil {
			t.Errorf("rule_files %s: %v", rf, err)
		}
		if abs1, abs2 := absPath(t, host), absPath(t, alerts); abs1 == abs2 {
			loaded = true
		}
	}
	if !loaded {
		t.Errorf("prometheus rule_files %q do not load deploy/prometheus/alerts.yml", prom.RuleFiles)
	}
}

func absPath(t *testing.T, path string) string {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	return abs
}

func TestComposeGrafanaProvisionsThePrometheusDatasourceAndTheDashboard(t *testing.T) {
	c := loadCompose(t)
	g, ok := c.Services["grafana"]
	if !ok {
		t.Fatal("docker-compose.yml has no grafana service")
	}
	prov, ok := g.hostPath(t, "/etc/grafana/provisioning")
	if !ok {
		t.Fatal("grafana: nothing mounted at /etc/grafana/provisioning")
	}

	// Datasources: the Prometheus one points at the prometheus service.
	files, _ := filepath.Glob(filepath.Join(prov, "datasources", "*.y*ml"))
	if len(files) == 0 {
		t.Fatalf("no datasource provisioning under %s/datasources", prov)
	}
	promURL := ""
	for _, f := range files {
		var ds struct {
			Datasources []struct {
				Type string `yaml:"type"`
				URL  string `yaml:"url"`
			} `yaml:"datasources"`
		}
		if err := yaml.Unmarshal(readRepoFile(t, f), &ds); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, d := range ds.Datasources {
			if d.Type == "prometheus" {
				promURL = d.URL
			}
		}
	}
	u, err := url.Parse(promURL)
	if err != nil || u.Hostname() != "prometheus" || u.Port() != "9090" {
		t.Errorf("Prometheus datasource URL %q; want http://prometheus:9090, the prometheus service", promURL)
	}
	if _, ok := c.Services[u.Hostname()]; !ok {
		t.Errorf("datasource host %q is not a compose service", u.Hostname())
	}

	// Dashboards: the provider's path is mounted and holds shaper.json.
	files, _ = filepath.Glob(filepath.Join(prov, "dashboards", "*.y*ml"))
	if len(files) == 0 {
		t.Fatalf("no dashboard provisioning under %s/dashboards", prov)
	}
	found := false
	for _, f := range files {
		var dp struct {
			Providers []struct {
				Type    string `yaml:"type"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		if err := yaml.Unmarshal(readRepoFile(t, f), &dp); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		for _, p := range dp.Providers {
			host, ok := g.hostPath(t, p.Options.Path)
			if !ok {
				t.Errorf("dashboard provider path %s is not mounted into grafana", p.Options.Path)
				continue
			}
			if _, err := os.Stat(filepath.Join(host, "shaper.json")); err == nil && absPath(t, host) == absPath(t, filepath.Join(deployDir, "grafana", "dashboards")) {
				found = true
			}
		}
	}
	if !found {
		t.Error("no dashboard provider loads deploy/grafana/dashboards/shaper.json")
	}
	if home := g.env()["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		if host, ok := g.hostPath(t, home); !ok {
			t.Errorf("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH %s is not mounted", home)
		} else if _, err := os.Stat(host); err != nil {
			t.Errorf("GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH: %v", err)
		}
	}
}

// --- Grafana dashboard and alert rules -----------------------------------------------

type grafanaPanel struct {
	Title   string         `json:"title"`
	Type    string         `json:"type"`
	Panels  []grafanaPanel `json:"panels"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

type grafanaDashboard struct {
	UID        string         `json:"uid"`
	Title      string         `json:"title"`
	Panels     []grafanaPanel `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Type       string `json:"type"`
			Query      any    `json:"query"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

func loadDashboard(t *testing.T) grafanaDashboard {
	t.Helper()
	var d grafanaDashboard
	path := filepath.Join(deployDir, "grafana", "dashboards", "shaper.json")
	if err := json.Unmarshal(readRepoFile(t, path), &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return d
}

// exprs returns every PromQL expression of the dashboard: panel targets and
// query variables, by where they are.
func (d grafanaDashboard) exprs() map[string]string {
	out := map[string]string{}
	var walk func([]grafanaPanel)
	walk = func(panels []grafanaPanel) {
		for _, p := range panels {
			for i, tg := range p.Targets {
				if tg.Expr != "" {
					out[fmt.Sprintf("panel %q target %d", p.Title, i)] = tg.Expr
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			out["variable "+v.Name] = v.Definition
		}
	}
	return out
}

type alertRuleFile struct {
	Groups []struct {
		Name  string `yaml:"name"`
		Rules []struct {
			Alert       string            `yaml:"alert"`
			Record      string            `yaml:"record"`
			Expr        string            `yaml:"expr"`
			For         string            `yaml:"for"`
			Labels      map[string]string `yaml:"labels"`
			Annotations map[string]string `yaml:"annotations"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

func loadAlerts(t *testing.T) alertRuleFile {
	t.Helper()
	var f alertRuleFile
	path := filepath.Join(deployDir, "prometheus", "alerts.yml")
	dec := yaml.NewDecoder(strings.NewReader(string(readRepoFile(t, path))))
	dec.KnownFields(true) // a misspelt key (anotations:) is an error, as in Prometheus
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

func TestAlertRulesAreWellFormed(t *testing.T) {
	f := loadAlerts(t)
	if len(f.Groups) == 0 {
		t.Fatal("alerts.yml has no groups")
	}
	names := map[string]bool{}
	for _, g := range f.Groups {
		if g.Name == "" || len(g.Rules) == 0 {
			t.Errorf("group %q: want a name and rules", g.Name)
		}
		for i, r := range g.Rules {
			where := fmt.Sprintf("group %s rule %d (%s)", g.Name, i, r.Alert)
			if r.Alert == "" {
				t.Errorf("%s: no alert name", where)
			}
			if names[r.Alert] {
				t.Errorf("%s: duplicate alert name", where)
			}
			names[r.Alert] = true
			if strings.TrimSpace(r.Expr) == "" {
				t.Errorf("%s: no expr", where)
			} else if err := promQLBalanced(r.Expr); err != nil {
				t.Errorf("%s: expr %q: %v", where, r.Expr, err)
			}
			if d, err := time.ParseDuration(r.For); err != nil || d <= 0 {
				t.Errorf("%s: for %q; want a positive duration", where, r.For)
			}
			if sev := r.Labels["severity"]; sev != "info" && sev != "warning" && sev != "critical" {
				t.Errorf("%s: labels.severity %q; want info, warning or critical", where, sev)
			}
			for _, a := range []string{"summary", "description"} {
				if strings.TrimSpace(r.Annotations[a]) == "" {
					t.Errorf("%s: no annotations.%s", where, a)
				}
			}
		}
	}
	for _, want := range []string{"ShaperQueueWaitNearMaxQueueTime", "ShaperDeadLettersRising", "ShaperLimiterFallback", "ShaperSinkErrorRatioHigh", "ShaperConsumerLagGrowing"} {
		if !names[want] {
			t.Errorf("alerts.yml lacks %s", want)
		}
	}
}

// promQLBalanced reports unbalanced brackets or quotes in a PromQL expression.
func promQLBalanced(expr string) error {
	var stack []rune
	pairs := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var quote rune
	for _, r := range expr {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '"' || r == '\'':
			quote = r
		case r == '(' || r == '[' || r == '{':
			stack = append(stack, r)
		case pairs[r] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pairs[r] {
				return fmt.Errorf("unbalanced %q", r)
			}
			stack = stack[:len(stack)-1]
		}
	}
	if quote != 0 || len(stack) > 0 {
		return fmt.Errorf("unclosed %q", append(stack, quote))
	}
	return nil
}

// TestAlertQueueWaitComparesWithTheExportedMaxQueueTime checks that the
// queue-wait alert and panel read each pipeline's max_queue_time from
// shaper_max_queue_time_seconds instead of a number that could drift from
// the configs.
func TestAlertQueueWaitComparesWithTheExportedMaxQueueTime(t *testing.T) {
	const want = "0.8 * max by (pipeline) (shaper_max_queue_time_seconds)"
	found := false
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			if r.Alert == "ShaperQueueWaitNearMaxQueueTime" {
				found = true
				if !strings.Contains(r.Expr, want) {
					t.Errorf("ShaperQueueWaitNearMaxQueueTime expr %q; want it to compare with %q", r.Expr, want)
				}
			}
		}
	}
	if !found {
		t.Fatal("no ShaperQueueWaitNearMaxQueueTime alert")
	}
}

func TestGrafanaDashboardHasAPipelineVariableThatEveryQueryUses(t *testing.T) {
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" || len(d.Panels) == 0 {
		t.Fatalf("dashboard uid %q title %q with %d panels; want all three", d.UID, d.Title, len(d.Panels))
	}
	hasVar := false
	for _, v := range d.Templating.List {
		if v.Name == "pipeline" && v.Type == "query" && strings.Contains(v.Definition, "pipeline") {
			hasVar = true
		}
	}
	if !hasVar {
		t.Error("dashboard has no query variable pipeline over the pipeline label")
	}
	for where, expr := range d.exprs() {
		if err := promQLBalanced(expr); err != nil {
			t.Errorf("%s: %q: %v", where, expr, err)
		}
		if strings.HasPrefix(where, "panel") && strings.Contains(expr, "shaper_") && !strings.Contains(expr, `pipeline=~"$pipeline"`) {
			t.Errorf("%s: %q does not filter by the pipeline variable", where, expr)
		}
	}
}

// --- metric names in PromQL, against a running shaper ---------------------------------

var (
	promStringRE   = regexp.MustCompile(`"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'`)
	promGrafanaVar = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\[\[[A-Za-z_][A-Za-z0-9_]*\]\]`)
	promBracesRE   = regexp.MustCompile(`\{[^}]*\}`)
	promRangeRE    = regexp.MustCompile(`\[[^\]]*\]`)
	promGroupingRE = regexp.MustCompile(`\b(by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)`)
	promTokenRE    = regexp.MustCompile(`[A-Za-z_:][A-Za-z0-9_:]*|[0-9][0-9A-Za-z_.]*`)
	promSelectorRE = regexp.MustCompile(`([A-Za-z_:][A-Za-z0-9_:]*)\s*\{([^}]*)\}`)
	promMatcherRE  = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)`)

	// promKeywords are PromQL words that look like metric names: aggregation
	// operators (which may be followed by "by (...)" before their
	// parenthesis), binary operators and modifiers.
	promKeywords = map[string]bool{
		"sum": true, "min": true, "max": true, "avg": true, "group": true, "stddev": true, "stdvar": true,
		"count": true, "count_values": true, "bottomk": true, "topk": true, "quantile": true, "limitk": true,
		"limit_ratio": true, "by": true, "without": true, "on": true, "ignoring": true, "group_left": true,
		"group_right": true, "bool": true, "offset": true, "and": true, "or": true, "unless": true, "atan2": true,
		"inf": true, "nan": true, "Inf": true, "NaN": true,
	}
)

// promQLMetrics returns the metric names an expression selects, Grafana
// variables left out. A word followed by "(" is a function.
func promQLMetrics(expr string) []string {
	s := promGrafanaVar.ReplaceAllString(expr, "0")
	s = promStringRE.ReplaceAllString(s, `""`)
	s = promBracesRE.ReplaceAllString(s, " ")
	s = promRangeRE.ReplaceAllString(s, " ")
	s = promGroupingRE.ReplaceAllString(s, " ")
	var out []string
	for _, loc := range promTokenRE.FindAllStringIndex(s, -1) {
		tok := s[loc[0]:loc[1]]
		if tok[0] >= '0' && tok[0] <= '9' || promKeywords[tok] {
			continue
		}
		if rest := strings.TrimLeft(s[loc[1]:], " \t\n"); strings.HasPrefix(rest, "(") {
			continue // a function call
		}
		if !slices.Contains(out, tok) {
			out = append(out, tok)
		}
	}
	return out
}

// promQLLabels returns the label names an expression matches on or groups by.
func promQLLabels(expr string) []string {
	s := promGrafanaVar.ReplaceAllString(expr, "0")
	var out []string
	for _, m := range promSelectorRE.FindAllStringSubmatch(promStringRE.ReplaceAllString(s, `""`), -1) {
		for _, mm := range promMatcherRE.FindAllStringSubmatch(m[2], -1) {
			out = append(out, mm[1])
		}
	}
	for _, m := range promGroupingRE.FindAllStringSubmatch(s, -1) {
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func TestDeployPromQLHelpersFindMetricNamesAndLabels(t *testing.T) {
	tests := []struct {
		give       string
		wantMetric []string
		wantLabels []string
	}{
		{`sum by (pipeline) (irate(shaper_messages_received_total{pipeline=~"$pipeline"}[$__rate_interval]))`,
			[]string{"shaper_messages_received_total"}, []string{"pipeline"}},
		{`histogram_quantile(0.99, sum by (pipeline, le) (rate(shaper_queue_wait_seconds_bucket[5m]))) > 0.8 * 45`,
			[]string{"shaper_queue_wait_seconds_bucket"}, []string{"le", "pipeline"}},
		{`sum(rate(a_total{code!~"2.."}[5m])) / sum (rate(a_total[5m])) > bool 0.05 and on(x) b`,
			[]string{"a_total", "b"}, []string{"code", "x"}},
		{`label_values(shaper_messages_received_total, pipeline)`, []string{"shaper_messages_received_total", "pipeline"}, nil},
		{`max by (pipeline, instance) (shaper_limiter_fallback) == 1`, []string{"shaper_limiter_fallback"}, []string{"instance", "pipeline"}},
	}
	for _, tt := range tests {
		if got := promQLMetrics(tt.give); !slices.Equal(got, tt.wantMetric) {
			t.Errorf("promQLMetrics(%q) = %q; want %q", tt.give, got, tt.wantMetric)
		}
		if got := promQLLabels(tt.give); !slices.Equal(got, tt.wantLabels) {
			t.Errorf("promQLLabels(%q) = %q; want %q", tt.give, got, tt.wantLabels)
		}
	}
}

// scrapedMetrics is what one /metrics scrape showed: each family's type, and
// the label names of its samples.
type scrapedMetrics struct {
	types   map[string]string          // family -> counter, gauge, histogram, ...
	samples map[string]map[string]bool // sample name (with _bucket etc.) -> label names
}

var expositionLabelRE = regexp.MustCompile(`([A-Za-z_][A-Za-z0-9_]*)="`)

// parseExposition reads the Prometheus text format, enough for names, types
// and label names.
func parseExposition(text string) scrapedMetrics {
	m := scrapedMetrics{types: map[string]string{}, samples: map[string]map[string]bool{}}
	for _, line := range strings.Split(text, "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			if f := strings.Fields(rest); len(f) == 2 {
				m.types[f[0]] = f[1]
			}
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, labels := line, ""
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
			if line[i] == '{' {
				labels = line[i+1 : strings.LastIndex(line, "}")]
			}
		}
		if m.samples[name] == nil {
			m.samples[name] = map[string]bool{}
		}
		for _, mm := range expositionLabelRE.FindAllStringSubmatch(labels, -1) {
			m.samples[name][mm[1]] = true
		}
	}
	return m
}

// describedMetrics returns what shaper.NewMetrics registers, by name, with
// each metric's variable label names: the metrics whether or not they have a
// sample yet.
func describedMetrics(t *testing.T) map[string][]string {
	t.Helper()
	rec := &descRecorder{names: map[string][]string{}}
	shaper.NewMetrics(rec)
	if len(rec.names) == 0 {
		t.Fatal("shaper.NewMetrics registered nothing")
	}
	return rec.names
}

// descRecorder is a prometheus.Registerer that keeps the descriptions of what
// is registered with it.
type descRecorder struct {
	names map[string][]string
}

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := descRE.FindStringSubmatch(d.String()); m != nil {
			var labels []string
			for _, l := range strings.Split(m[2], ",") {
				if l = strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"); l != "" {
					labels = append(labels, l)
				}
			}
			r.names[m[1]] = labels
		}
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c) // never fails
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return false }

// scrapeRunningShaper runs a real daemon the way `shaper demo` does, with
// two pipelines, one per embedded broker (NATS JetStream, and Kafka as kfake),
// into an HTTP sink answering 204. It sends messages through both until they
// are delivered, so that the labelled series exist, and returns one scrape of
// its /metrics. It also checks the admin endpoints that the probes and the
// HEALTHCHECK of deploy/ use.
func scrapeRunningShaper(t *testing.T) scrapedMetrics {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	natsBroker, err := startNATSDemo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer natsBroker.close()
	kafkaBroker, err := startKafkaDemo()
	if err != nil {
		t.Fatal(err)
	}
	defer kafkaBroker.close()
	// kafkaDemo.publish writes through kafka-go's DefaultTransport, which
	// keeps its connections for 30s after use; close them, or goleak sees them.
	defer kafka.DefaultTransport.(*kafka.Transport).CloseIdleConnections()
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
	}))
	defer sink.Close()

	brokers := []demoBroker{natsBroker, kafkaBroker}
	cfg := &shaper.Config{
		Admin:    shaper.AdminConfig{Listen: "127.0.0.1:0"},
		Shutdown: shaper.ShutdownConfig{DrainTimeout: 5 * time.Second},
	}
	for i, b := range brokers {
		cfg.Pipelines = append(cfg.Pipelines, shaper.PipelineConfig{
			Name:   fmt.Sprintf("deploy-test-%d", i),
			Source: b.source(),
			Bucket: shaper.BucketConfig{Capacity: 100, MaxQueueTime: 10 * time.Second},
			Rate:   shaper.RateConfig{Mode: shaper.ModeLeaky, Limit: 200},
			Sink:   shaper.SinkConfig{HTTP: &shaper.HTTPSinkConfig{URL: sink.URL + "/callback"}},
		})
	}
	cfg.SetDefaults()
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	d, err := newDaemon(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := d.listen()
	if err != nil {
		d.closeAll()
		t.Fatal(err)
	}
	runCtx, stopRun := context.WithCancel(ctx)
	force, forceStop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- d.serve(runCtx, force, ln) }()
	defer func() {
		stopRun()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("daemon: %v", err)
			}
		case <-time.After(30 * time.Second):
			forceStop()
			<-served
			t.Error("daemon did not drain within 30s")
		}
		forceStop()
	}()

	const n = 8
	bodies := make([][]byte, n)
	for i := range bodies {
		bodies[i] = fmt.Appendf(nil, `{"payment":%d}`, i)
	}
	for _, b := range brokers {
		if err := b.publish(ctx, bodies); err != nil {
			t.Fatalf("%s: publish: %v", b, err)
		}
	}
	for i, p := range d.list() {
		waitUntil(t, 45*time.Second, fmt.Sprintf("%d deliveries from %s", n, brokers[i]), func() bool {
			return p.Status().Outcomes[shaper.OutcomeDelivered] >= n
		})
	}

	client := &http.Client{Transport: &http.Transport{}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := client.Get("http://" + ln.Addr().String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(body)
	}
	// The liveness and readiness probes of deploy/k8s and the image's
	// HEALTHCHECK.
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(path); code != http.StatusOK {
			t.Errorf("GET %s = %d %q; want 200 from a running, connected shaper", path, code, body)
		}
	}
	code, body := get("/metrics")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d", code)
	}
	return parseExposition(body)
}

// notSampledByTheTestDaemon are metrics that exist only after events the
// daemon of scrapeRunningShaper does not cause, so they are checked against
// shaper.NewMetrics' descriptions instead of a live sample:
//   - shaper_messages_nacked_total{reason} gets its first series on the first
//     nack: a drain with messages left, or a dead letter with no target or a
//     failing one; every message of the test daemon is delivered.
//
// shaper_source_lag exists only for Kafka sources; the test daemon has one,
// so it is sampled live.
var notSampledByTheTestDaemon = []string{"shaper_messages_nacked_total"}

// prometheusSeries are series Prometheus itself writes for every target.
var prometheusSeries = map[string][]string{"up": {"job", "instance"}}

func TestGrafanaDashboardAndAlertRulesUseOnlyMetricsARunningShaperExports(t *testing.T) {
	exprs := loadDashboard(t).exprs()
	dashboardMetrics := map[string]bool{}
	for _, e := range exprs {
		for _, m := range promQLMetrics(e) {
			dashboardMetrics[m] = true
		}
	}
	for _, g := range loadAlerts(t).Groups {
		for _, r := range g.Rules {
			exprs["alert "+r.Alert] = r.Expr
		}
	}

	live := scrapeRunningShaper(t)
	described := describedMetrics(t)

	// labelsOf returns the label names of a series name and whether shaper
	// exports it. A histogram is scraped as its _bucket, _sum and _count
	// series, so those names are looked up as they are.
	labelsOf := func(name string) ([]string, bool) {
		if labels, ok := prometheusSeries[name]; ok {
			return labels, true
		}
		if l, ok := live.samples[name]; ok {
			var out []string
			for k := range l {
				out = append(out, k)
			}
			return out, true
		}
		if slices.Contains(notSampledByTheTestDaemon, name) {
			labels, ok := described[name]
			return labels, ok
		}
		return nil, false
	}

	for where, e := range exprs {
		var labels []string
		for _, m := range promQLMetrics(e) {
			if strings.HasPrefix(where, "variable") && m == "pipeline" {
				continue // label_values(metric, label)
			}
			l, ok := labelsOf(m)
			if !ok {
				t.Errorf("%s uses %s, which a running shaper does not export", where, m)
			}
			labels = append(labels, l...)
		}
		for _, l := range promQLLabels(e) {
			if l != "le" && l != "job" && l != "instance" && !slices.Contains(labels, l) {
				t.Errorf("%s matches or groups by label %q, which none of its metrics %q has", where, l, promQLMetrics(e))
			}
		}
	}

	// A _bucket series (what histogram_quantile takes) must be a histogram's.
	for where, e := range exprs {
		for _, m := range promQLMetrics(e) {
			if base, ok := strings.CutSuffix(m, "_bucket"); ok && live.types[base] != "histogram" {
				t.Errorf("%s: %s is not the bucket of a histogram (%s is %q)", where, m, base, live.types[base])
			}
		}
	}

	// Every metric shaper describes is on the dashboard: nothing it exports
	// is invisible.
	for name := range described {
		onDashboard := dashboardMetrics[name]
		if live.types[name] == "histogram" {
			onDashboard = dashboardMetrics[name+"_bucket"]
		}
		if !onDashboard {
			t.Errorf("shaper exports %s, but the dashboard does not show it", name)
		}
	}
	// The allowlist stays honest: each name on it is a real shaper metric.
	for _, name := range notSampledByTheTestDaemon {
		if _, ok := described[name]; !ok {
			t.Errorf("notSampledByTheTestDaemon lists %s, which shaper.NewMetrics does not register", name)
		}
	}
}

// --- Kubernetes -----------------------------------------------------------------

// kubeObject is one manifest: its kind and name, and the whole document.
type kubeObject struct {
	file string
	kind string
	name string
	doc  map[string]any
}

func loadKubeFile(t *testing.T, path string) []kubeObject {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(string(readRepoFile(t, path))))
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
	for _, kind := range []string{"Deployment", "ConfigMap", "Service", "PodDisruptionBudget", "ServiceMonitor", "Secret"} {
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
	if code, _, errs := runMain(t, "validate", "--config", path); code != exitOK {
		t.Fatalf("shaper validate on the ConfigMap's %s = %d; want 0:\n%s", key, code, errs)
	}
	cfg, err := shaper.Load(path)
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

// readRepoFile reads a file of the repository or fails the test.
func readRepoFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
