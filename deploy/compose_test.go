package deploy_test

// Tests of deploy/docker-compose.yml and every file it mounts: the services,
// the shaper configs (through `shaper validate`), Prometheus and Grafana
// provisioning.

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"go.yaml.in/yaml/v3"

	"github.com/shaper-dev/shaper/config"
	"github.com/shaper-dev/shaper/internal/kafkaconn"
	"github.com/shaper-dev/shaper/internal/repotest"
	"github.com/shaper-dev/shaper/shaper"
)

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
	if err := yaml.Unmarshal(repotest.Read(t, filepath.Join(deployDir, "docker-compose.yml")), &c); err != nil {
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
	config     *config.File
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
		text := string(repotest.Read(t, host))
		env := s.env()
		for _, v := range configVars(text) {
			if _, ok := env[v]; !ok {
				t.Errorf("service %s: its config %s references ${%s}, which the service's environment does not set", name, host, v)
			}
			t.Setenv(v, "from-the-compose-environment")
		}
		cfg, err := config.Load(host)
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

// TestComposeFileLoadsAsDockerComposeDoes loads deploy/docker-compose.yml
// with compose-go, the loader inside docker compose, with no environment
// set: what `docker compose config` refuses (a key the compose schema does
// not know, a value of the wrong type, a depends_on condition or service
// that does not exist) fails here. It also checks that the other tests,
// which read the file as plain YAML, see the services and images compose
// sees once anchors and merges are applied.
func TestComposeFileLoadsAsDockerComposeDoes(t *testing.T) {
	path := filepath.Join(deployDir, "docker-compose.yml")
	opts, err := cli.NewProjectOptions([]string{path}, cli.WithEnv(nil))
	if err != nil {
		t.Fatal(err)
	}
	project, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker compose would refuse %s: %v", path, err)
	}
	c := loadCompose(t)
	got, want := slices.Sorted(maps.Keys(project.Services)), slices.Sorted(maps.Keys(c.Services))
	if !slices.Equal(got, want) {
		t.Fatalf("compose loads services %q; the YAML has %q", got, want)
	}
	for name, s := range c.Services {
		if image := project.Services[name].Image; s.Image != "" && image != s.Image {
			t.Errorf("service %s: compose runs image %q; read as YAML it is %q", name, image, s.Image)
		}
	}
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
			if code, _, errs := runShaper(t, "validate", "--config", sh.configPath); code != exitOK {
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
func checkSharedBucketsDrainWithinMaxQueueTime(t *testing.T, cfg *config.File, replicas int) {
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
func checkConfigDialsComposeServices(t *testing.T, c composeFile, cfg *config.File) {
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
	checkKafka := func(key string, k kafkaconn.Config) {
		for i, b := range k.Brokers {
			check(fmt.Sprintf("%s.brokers[%d]", key, i), b)
		}
	}
	for i, p := range cfg.Pipelines {
		key := fmt.Sprintf("pipelines[%d]", i)
		if k := p.Source.Kafka; k != nil {
			checkKafka(key+".source.kafka", k.Config)
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
			checkKafka(key+".sink.kafka", k.Config)
		}
		if n := p.Sink.NATS; n != nil {
			checkURL(key+".sink.nats.url", n.URL)
		}
		if dl := p.DeadLetter; dl != nil && dl.Kafka != nil {
			checkKafka(key+".dead_letter.kafka", dl.Kafka.Config)
		}
		if dl := p.DeadLetter; dl != nil && dl.NATS != nil {
			checkURL(key+".dead_letter.nats.url", dl.NATS.URL)
		}
	}
}

// checkComposeCreatesWhatTheConfigConsumes checks that some compose service
// creates the Kafka topics and JetStream streams the config needs (the broker
// does not create them), and that a producer feeds each source.
func checkComposeCreatesWhatTheConfigConsumes(t *testing.T, c composeFile, cfg *config.File) {
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
	if err := yaml.Unmarshal(repotest.Read(t, host), &p); err != nil {
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
		target := sh.name + ":" + adminPort(t, sh.config.Admin.Listen)
		want = append(want, target)
		// Prometheus sends the target as Host: any name the replica does
		// not know as its own is answered 421.
		if hosts := (shaper.AdminHosts{Listen: sh.config.Admin.Listen, Allowed: sh.config.Admin.AllowedHosts}); !hosts.Allows(target, netip.Addr{}) {
			t.Errorf("%s answers 421 to Prometheus's Host %s; want %s in its admin.allowed_hosts %q", sh.name, target, sh.name, sh.config.Admin.AllowedHosts)
		}
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
		if err := yaml.Unmarshal(repotest.Read(t, f), &ds); err != nil {
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
		if err := yaml.Unmarshal(repotest.Read(t, f), &dp); err != nil {
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
