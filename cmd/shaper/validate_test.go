package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/shaper-dev/shaper/internal/childtest"
)

// envRef matches a ${VAR} without a default in a config file.
var envRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// unsetEnv unsets each variable for the rest of the test.
func unsetEnv(t *testing.T, names ...string) {
	t.Helper()
	for _, name := range names {
		t.Setenv(name, "") // restores the variable after the test
		os.Unsetenv(name)
	}
}

// CI checks the example configs without their secrets: with --skip-env
// every file passes, and every variable it names is listed as not checked,
// with its place; without it, the files that name one fail.
func TestValidateSkipEnvPassesEveryExampleWithoutItsSecrets(t *testing.T) {
	paths, err := filepath.Glob("../../configs/*.yaml")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no example configs found: %v", err)
	}
	withVars := 0
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, m := range envRef.FindAllStringSubmatch(string(data), -1) {
			names = append(names, m[1])
		}
		t.Run(filepath.Base(path), func(t *testing.T) {
			unsetEnv(t, names...)
			code, out, errs := runMain(t, "validate", "--skip-env", "--config", path)
			if code != exitOK {
				t.Fatalf("validate --skip-env %s = %d; want 0:\n%s", path, code, errs)
			}
			for _, name := range names {
				note := regexp.MustCompile(regexp.QuoteMeta(path) + `:\d+:\d+: [^ ]+: \$\{` + name + `\} is not set: not checked\n`)
				if !note.MatchString(out) {
					t.Errorf("stdout does not list ${%s} as not checked:\n%s", name, out)
				}
			}
			if got, want := strings.Count(out, "is not set: not checked"), len(names); got != want {
				t.Errorf("%d values not checked; want %d:\n%s", got, want, out)
			}
			if len(names) > 0 && !strings.Contains(out, notChecked(len(names))+")") {
				t.Errorf("ok line does not count the values not checked:\n%s", out)
			}
			if len(names) == 0 {
				return
			}
			code, _, errs = runMain(t, "validate", "--config", path)
			if code != exitUsage || !strings.Contains(errs, "environment variable "+names[0]+" is not set") {
				t.Errorf("validate %s without --skip-env = %d, %q; want %d and %s not set", path, code, errs, exitUsage, names[0])
			}
		})
		if len(names) > 0 {
			withVars++
		}
	}
	if withVars == 0 {
		t.Error("no example config names a ${VAR}; the test proves nothing")
	}
}

// --skip-env skips only what it cannot know: a file with an unset
// variable and a typo still fails, on the typo, with a suggestion.
func TestValidateSkipEnvStillReportsEveryOtherProblem(t *testing.T) {
	unsetEnv(t, "SHAPER_TEST_TOKEN")
	src := strings.Replace(validConfig, `timeout: 2s}`, `timeout: 2s, headers: {Authorization: "Bearer ${SHAPER_TEST_TOKEN}"}}`, 1)
	src = strings.Replace(src, "bucket: {capacity: 100", "bukcet: {capacity: 100", 1)
	path := childtest.WriteConfig(t, src)
	code, out, errs := runMain(t, "validate", "--skip-env", "--config", path)
	if code != exitUsage {
		t.Errorf("validate --skip-env = %d; want %d", code, exitUsage)
	}
	wantOut := path + ":9:76: pipelines[0].sink.http.headers.Authorization: ${SHAPER_TEST_TOKEN} is not set: not checked\n"
	if out != wantOut {
		t.Errorf("stdout = %q; want %q", out, wantOut)
	}
	if want := path + `:6:5: pipelines[0].bukcet: unknown key (did you mean "bucket"?)`; !strings.Contains(errs, want) {
		t.Errorf("stderr lacks %q:\n%s", want, errs)
	}
}
