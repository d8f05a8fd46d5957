package deploy_test

// Tests of the Dockerfile and .dockerignore: the image is static, version
// stamped, non-root, with a HEALTHCHECK, and gets the files it builds from.

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/repotest"
)

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
	for _, line := range strings.Split(string(repotest.Read(t, path)), "\n") {
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
	// embedded brokers (cmd/shaper's demo_test.go checks what the tag
	// leaves out).
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
	code, stdout, _ := runShaper(t, "healthcheck", "-h")
	m := regexp.MustCompile(`\(default (http://\S+)\)`).FindStringSubmatch(stdout)
	if code != exitOK || m == nil {
		t.Fatalf("shaper healthcheck -h = %d, %q; want 0 and a default --url", code, stdout)
	}
	u, err := url.Parse(m[1])
	if err != nil {
		t.Fatal(err)
	}
	return u.Port()
}

func TestDockerignoreKeepsTheBuildInputs(t *testing.T) {
	var patterns []string
	for _, line := range strings.Split(string(repotest.Read(t, filepath.Join(repoRoot, ".dockerignore"))), "\n") {
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
	for _, skip := range []string{".git", "deploy/docker-compose.yml", "cmd/shaper/main_test.go"} {
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
