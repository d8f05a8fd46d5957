package main

// Tests of the command line itself: help in every form, every flag listed,
// --version, the environment variables flags fall back to, and the Command line
// section of docs/operations.md against the help.

import (
	"encoding/json"
	"flag"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shaper-dev/shaper/internal/childtest"
	"github.com/shaper-dev/shaper/internal/freeport"
	"github.com/shaper-dev/shaper/internal/repotest"
	"github.com/shaper-dev/shaper/internal/sinktest"
	"github.com/shaper-dev/shaper/internal/testwait"
)

// commandFlags returns the FlagSet of each command by name, and fails the
// test for a command that does not hand it to parseFlags on --help.
func commandFlags(t *testing.T) map[string]*flag.FlagSet {
	t.Helper()
	sets := map[string]*flag.FlagSet{}
	for _, c := range commands() {
		fs, err := flagsOf(c)
		if err != nil {
			t.Errorf("shaper %s --help does not return its flags: %v", c.name, err)
			continue
		}
		sets[c.name] = fs
	}
	return sets
}

func TestHelpGoesToStdoutWithExitZeroInEveryForm(t *testing.T) {
	top := usage()
	sets := commandFlags(t)
	type form struct {
		args []string
		want string
	}
	forms := []form{{[]string{"--help"}, top}, {[]string{"-h"}, top}, {[]string{"help"}, top}, {[]string{"-help"}, top}}
	for _, c := range commands() {
		if sets[c.name] == nil {
			continue
		}
		want := commandHelp(c, sets[c.name])
		forms = append(forms,
			form{[]string{"help", c.name}, want},
			form{[]string{c.name, "--help"}, want},
			form{[]string{c.name, "-h"}, want})
	}
	for _, tt := range forms {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			code, out, errs := runMain(t, tt.args...)
			if code != exitOK || errs != "" {
				t.Errorf("shaper %s = exit %d, stderr %q; want 0 and nothing on stderr", strings.Join(tt.args, " "), code, errs)
			}
			if out != tt.want {
				t.Errorf("shaper %s printed:\n%s\nwant:\n%s", strings.Join(tt.args, " "), out, tt.want)
			}
		})
	}
}

// The help lists every flag of every command, read from the command's own
// FlagSet: the top help in the command's section, the command's help all of
// them, the global ones with their environment variables. The flags the
// first help left out are named here too.
func TestHelpListsEveryFlagOfEveryCommand(t *testing.T) {
	named := map[string][]string{
		"run":         {"--config", "--watch"},
		"validate":    {"--config"},
		"replay":      {"--config", "--pipeline", "--from", "--to", "--rate", "--dead-letters", "--reason", "--dry-run", "--progress-every"},
		"demo":        {"--rate", "--messages", "--mode", "--burst", "--duration", "--source"},
		"healthcheck": {"--url", "--timeout"},
	}
	top := usage()
	section := func(name string) string {
		_, rest, ok := strings.Cut(top, "\n  shaper "+name+" [flags]")
		if !ok {
			return ""
		}
		if i := strings.Index(rest, "\n  shaper "); i >= 0 {
			rest = rest[:i]
		}
		rest, _, _ = strings.Cut(rest, "\n\n")
		return rest
	}
	flagLine := regexp.MustCompile(`(?m)^\s+(--[a-z-]+)`)
	for name, fs := range commandFlags(t) {
		c, _ := lookupCommand(name)
		help := commandHelp(c, fs)
		var listed []string
		fs.VisitAll(func(f *flag.Flag) {
			listed = append(listed, "--"+f.Name)
			_, usageText := flag.UnquoteUsage(f)
			if !strings.Contains(help, "--"+f.Name) || !strings.Contains(help, usageText) {
				t.Errorf("shaper help %s lacks --%s and its usage %q:\n%s", name, f.Name, usageText, help)
			}
			if f.Name == "log-level" || f.Name == "log-format" {
				return
			}
			if !strings.Contains(section(name), "--"+f.Name+" ") && !strings.HasSuffix(section(name), "--"+f.Name) {
				t.Errorf("shaper --help lacks --%s in the section of %s:\n%s", f.Name, name, section(name))
			}
		})
		for _, want := range named[name] {
			if !slices.Contains(listed, want) {
				t.Errorf("shaper %s has no flag %s", name, want)
			}
		}
		for _, m := range flagLine.FindAllStringSubmatch(section(name), -1) {
			if !slices.Contains(listed, m[1]) {
				t.Errorf("shaper --help lists %s under %s, which it does not take", m[1], name)
			}
		}
	}
	for _, want := range []string{"--log-level string", "[$SHAPER_LOG_LEVEL]", "--log-format string", "[$SHAPER_LOG_FORMAT]",
		"--config string  config file (required) [$SHAPER_CONFIG]", "--version", "-h, --help", "Exit codes: 0 success"} {
		if !strings.Contains(top, want) {
			t.Errorf("shaper --help lacks %q", want)
		}
	}
	for _, c := range commands() {
		if !strings.Contains(top, "\n  "+c.name+" ") {
			t.Errorf("shaper --help does not list command %s", c.name)
		}
	}
}

func TestUsageErrorsGoToStderrWithExitTwo(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no command prints the help", nil, usage()},
		{"unknown top flag", []string{"--verbose"}, "shaper: flag provided but not defined: -verbose\nRun 'shaper --help' for the commands and their flags.\n"},
		{"unknown command", []string{"launch"}, "shaper: unknown command \"launch\"\nRun 'shaper --help' for the commands and their flags.\n"},
		{"unknown flag of a command", []string{"run", "--verbose"}, "shaper: run: flag provided but not defined: -verbose (shaper help run lists its flags)\n"},
		{"help of an unknown command", []string{"help", "launch"}, "shaper: help: unknown command \"launch\"\n"},
		{"bad log level", []string{"--log-level", "loud", "validate", "--config", "x"}, "shaper: --log-level: want debug, info, warn or error, got \"loud\"\n"},
		{"bad log format", []string{"healthcheck", "--log-format", "xml"}, "shaper: --log-format: want json or text, got \"xml\"\n"},
		{"completion without a shell", []string{"completion"}, "shaper: completion: want one shell, bash or zsh, got []\n"},
		{"completion of another shell", []string{"completion", "fish"}, "shaper: completion: want bash or zsh, got \"fish\"\n"},
		{"version with an argument", []string{"version", "now"}, "shaper: version: unexpected argument \"now\"\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := runMain(t, tt.args...)
			if code != exitUsage || errs != tt.want || out != "" {
				t.Errorf("shaper %q = %d, stdout %q, stderr:\n%s\nwant %d, no stdout, stderr:\n%s", tt.args, code, out, errs, exitUsage, tt.want)
			}
		})
	}
}

var versionLine = regexp.MustCompile(`^shaper (\S+) \(commit (\S+), (go\S+) (\S+)/(\S+)\)\n$`)

func TestVersionFlagAndCommandPrintTheBuild(t *testing.T) {
	var lines []string
	for _, args := range [][]string{{"--version"}, {"version"}, {"--log-level", "debug", "--version"}} {
		code, out, errs := runMain(t, args...)
		m := versionLine.FindStringSubmatch(out)
		if code != exitOK || errs != "" || m == nil {
			t.Fatalf("shaper %q = %d, %q, %q; want 0 and shaper VERSION (commit C, GO OS/ARCH)", args, code, out, errs)
		}
		if m[3] != runtime.Version() || m[4] != runtime.GOOS || m[5] != runtime.GOARCH {
			t.Errorf("shaper %q = %q; want %s %s/%s", args, out, runtime.Version(), runtime.GOOS, runtime.GOARCH)
		}
		lines = append(lines, out)
	}
	if lines[0] != lines[1] || lines[1] != lines[2] {
		t.Errorf("--version and version differ: %q", lines)
	}
}

// An unstamped build names the module's version, else the revision it was
// built from; a stamp wins over both.
func TestUnstampedVersionFallsBackToTheBuildInfo(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	vcs := func(modified string) []debug.BuildSetting {
		return []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: rev}, {Key: "vcs.modified", Value: modified}}
	}
	info := func(mainVersion string, settings []debug.BuildSetting) *debug.BuildInfo {
		return &debug.BuildInfo{Main: debug.Module{Path: "github.com/shaper-dev/shaper", Version: mainVersion}, Settings: settings}
	}
	tests := []struct {
		name        string
		give        build
		info        *debug.BuildInfo
		wantVersion string
		wantCommit  string
	}{
		{"stamped by make", build{version: "v1.2.3", commit: rev}, info("(devel)", nil), "v1.2.3", rev},
		{"stamped version, revision from Go", build{version: "v1.2.3-4-gabcdef"}, info("(devel)", vcs("false")), "v1.2.3-4-gabcdef", rev},
		{"go install @v1.2.3", build{}, info("v1.2.3", nil), "v1.2.3", "unknown"},
		{"go build in a checkout", build{}, info("v0.0.0-20260101000000-0123456789ab+dirty", vcs("true")), "v0.0.0-20260101000000-0123456789ab+dirty", rev},
		{"revision only, clean", build{}, info("(devel)", vcs("false")), rev, rev},
		{"revision only, dirty", build{}, info("(devel)", vcs("true")), rev + "+dirty", rev},
		{"nothing recorded", build{}, info("(devel)", nil), "dev", "unknown"},
		{"no build info", build{}, nil, "dev", "unknown"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := describeBuild(tt.give, tt.info)
			if got.version != tt.wantVersion || got.commit != tt.wantCommit || got.goVersion != runtime.Version() {
				t.Errorf("describeBuild = %+v; want version %q, commit %q, Go %s", got, tt.wantVersion, tt.wantCommit, runtime.Version())
			}
		})
	}
}

// SHAPER_CONFIG stands for --config of run, validate and replay,
// SHAPER_LOG_LEVEL and SHAPER_LOG_FORMAT for the global flags; a flag given
// wins, and a bad value in a variable (SHAPER_TUNING too) is a usage error
// that names it.
func TestEnvironmentVariablesStandInForFlagsNotGiven(t *testing.T) {
	good := childtest.WriteConfig(t, validConfig)
	const missing = "/nonexistent/from-the-environment.yaml"
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"validate reads SHAPER_CONFIG", map[string]string{"SHAPER_CONFIG": good}, []string{"validate"}, exitOK, good + ": ok (1 pipelines)\n", ""},
		{"--config wins over SHAPER_CONFIG", map[string]string{"SHAPER_CONFIG": missing}, []string{"validate", "--config", good}, exitOK, good + ": ok (1 pipelines)\n", ""},
		{"run reads SHAPER_CONFIG", map[string]string{"SHAPER_CONFIG": missing}, []string{"run"}, exitUsage, "", "shaper: " + missing + ":\n"},
		{"replay reads SHAPER_CONFIG", map[string]string{"SHAPER_CONFIG": good}, []string{"replay", "--pipeline", "nope"}, exitUsage, "",
			`shaper: replay: --pipeline "nope": no such pipeline in ` + good + " (it has psp)\n"},
		{"bad SHAPER_LOG_LEVEL", map[string]string{"SHAPER_LOG_LEVEL": "loud"}, []string{"validate", "--config", good}, exitUsage, "",
			"shaper: SHAPER_LOG_LEVEL: want debug, info, warn or error, got \"loud\"\n"},
		{"--log-level before the command wins", map[string]string{"SHAPER_LOG_LEVEL": "loud"}, []string{"--log-level", "warn", "validate", "--config", good}, exitOK, good + ": ok (1 pipelines)\n", ""},
		{"--log-level after the command wins", map[string]string{"SHAPER_LOG_LEVEL": "loud"}, []string{"validate", "--config", good, "--log-level", "warn"}, exitOK, good + ": ok (1 pipelines)\n", ""},
		{"bad SHAPER_LOG_FORMAT", map[string]string{"SHAPER_LOG_FORMAT": "xml"}, []string{"healthcheck"}, exitUsage, "",
			"shaper: SHAPER_LOG_FORMAT: want json or text, got \"xml\"\n"},
		{"bad SHAPER_TUNING", map[string]string{"SHAPER_TUNING": "fast"}, []string{"run", "--config", good}, exitUsage, "",
			"shaper: SHAPER_TUNING: want on, off or off:KNOB,... (knobs: clock, procs, heap, conn), got \"fast\"\n"},
		{"--log-format wins", map[string]string{"SHAPER_LOG_FORMAT": "xml"}, []string{"--log-format", "json", "validate", "--config", good}, exitOK, good + ": ok (1 pipelines)\n", ""},
		{"help ignores the environment", map[string]string{"SHAPER_LOG_LEVEL": "loud", "SHAPER_CONFIG": missing}, []string{"run", "--help"}, exitOK, "Usage: shaper run [flags]\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, out, errs := runMain(t, tt.args...)
			if code != tt.wantCode || !strings.HasPrefix(out, tt.wantOut) || !strings.HasPrefix(errs, tt.wantErr) || (tt.wantErr == "" && errs != "") {
				t.Errorf("%v shaper %q = %d, stdout %q, stderr %q; want %d, stdout %q..., stderr %q...", tt.env, tt.args, code, out, errs, tt.wantCode, tt.wantOut, tt.wantErr)
			}
		})
	}
}

// A real `shaper run` child with no flags but the command, as a container
// runs it: the config, the log format and the log level come from the
// environment. Its /metrics carries shaper_build_info.
func TestRunTakesItsConfigAndLogSettingsFromTheEnvironment(t *testing.T) {
	natsURL := startJetStream(t, 3)
	sink := sinktest.Start(t, func(_ *http.Request, attempt int) sinktest.Action {
		if attempt == 1 {
			return sinktest.Action{Status: http.StatusServiceUnavailable} // a retry is logged at debug level
		}
		return sinktest.Action{}
	})
	admin := freeport.Addr(t)
	config := childtest.WriteConfig(t, strings.Replace(runConfig(natsURL, sink.URL, 100, 5*time.Second),
		`admin: {listen: "127.0.0.1:0"}`, fmt.Sprintf("admin: {listen: %q}", admin), 1))
	c := startShaper(t, []string{"SHAPER_CONFIG=" + config, "SHAPER_LOG_FORMAT=json", "SHAPER_LOG_LEVEL=debug"}, "run")

	testwait.For(t, time.Minute, "3 deliveries", func() bool {
		m, err := childtest.Scrape(admin)
		return err == nil && m.Sum("shaper_messages_completed_total", `outcome="delivered"`) >= 3
	})
	m, err := childtest.Scrape(admin)
	if err != nil {
		t.Fatal(err)
	}
	b := currentBuild() // the child is this test binary
	series := fmt.Sprintf(`shaper_build_info{commit=%q,go_version=%q,version=%q}`, b.commit, b.goVersion, b.version)
	if m[series] != 1 {
		t.Errorf("/metrics has %s = %v; want 1", series, m[series])
	}
	c.Signal(os.Interrupt)
	if code := c.Wait(time.Minute); code != exitOK {
		t.Fatalf("shaper run exited %d after SIGINT; want 0", code)
	}

	var started, debugRetry bool
	for _, line := range strings.Split(strings.TrimSpace(c.Stderr.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Errorf("log line is not JSON (SHAPER_LOG_FORMAT=json): %q", line)
			continue
		}
		started = started || rec["msg"] == "shaper started" && rec["version"] == b.version
		debugRetry = debugRetry || rec["level"] == "DEBUG" && rec["msg"] == "attempt failed; retrying"
	}
	if !started || !debugRetry {
		t.Errorf("log has shaper started with version %q: %v, a DEBUG retry line (SHAPER_LOG_LEVEL=debug): %v\n%s",
			b.version, started, debugRetry, c.Stderr.Tail(4000))
	}
}

// docCommandLine is the code block that opens the Command line section of
// docs/operations.md.
var docCommandLine = regexp.MustCompile("(?s)\n## Command line\n.*?```\n(.*?)```")

func TestDocCommandLineIsTheHelp(t *testing.T) {
	m := docCommandLine.FindSubmatch(repotest.Read(t, "../../docs/operations.md"))
	if m == nil {
		t.Fatal("docs/operations.md has no code block in its Command line section")
	}
	if got, want := string(m[1]), usage(); got != want {
		t.Errorf("docs/operations.md, Command line, is not what shaper --help prints; make it:\n%s", want)
	}
}
